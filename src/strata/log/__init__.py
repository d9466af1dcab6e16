"""The local log in Kafka's on-disk format, byte for byte."""
