"""KIP-932 share groups on the partition leader: the share sessions, the share-partitions that hand records
out under acquisition locks, and the persister that keeps their state with the share coordinator.

The group side (membership, assignment) is :mod:`strata.coordinator.group.share_manager`; the state side
(``__share_group_state``) is :mod:`strata.coordinator.share.coordinator`. This package joins them to the
log for ShareFetch and ShareAcknowledge."""
