#!/bin/sh
# Kafka's bin/kafka-consumer-groups.sh for Strata: the same flags and output, over the Kafka protocol only
# (it runs `strata consumer-groups "$@"`). Scripts written for Kafka's tools, and librdkafka's tests with
# KAFKA_PATH set to this repository, run unchanged.
#
# bin/strata-tool.sh beside it (symlinks followed) finds the repository's .venv, a `strata` on PATH,
# or python3 with the repository's src/.
exec "$(dirname "$(readlink -f "$0")")/strata-tool.sh" consumer-groups "$@"
