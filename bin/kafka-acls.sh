#!/bin/sh
# Kafka's bin/kafka-acls.sh for Strata: the same flags and output, over the Kafka protocol only
# (it runs `strata acls "$@"`). Scripts written for Kafka's tools, and librdkafka's tests with
# KAFKA_PATH set to this repository, run unchanged.
exec "$(dirname "$(readlink -f "$0")")/strata-tool.sh" acls "$@"
