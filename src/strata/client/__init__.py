"""Blocking Kafka-protocol clients for Strata's own tools and the Spark data source.

They speak the wire format through kio over plain sockets: the tools and the Spark driver ask a
broker a handful of questions (metadata, offsets, configs, the remote log metadata topic) and read
raw record batches, which a general client library would decode record by record.
"""
