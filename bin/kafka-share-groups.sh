#!/bin/sh
# Kafka's bin/kafka-share-groups.sh for Strata: the same flags and output, over the Kafka protocol only
# (it runs `strata share-groups "$@"`): list, describe, reset offsets of and delete KIP-932 share groups.
#
# bin/strata-tool.sh beside it (symlinks followed) finds the repository's .venv, a `strata` on PATH,
# or python3 with the repository's src/.
exec "$(dirname "$(readlink -f "$0")")/strata-tool.sh" share-groups "$@"
