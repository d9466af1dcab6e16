"""The classic consumer-group protocol: coordinator, group state machine, offsets in __consumer_offsets."""
