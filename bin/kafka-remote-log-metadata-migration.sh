#!/bin/sh
# Kafka's bin/kafka-remote-log-metadata-migration.sh (KIP-1266) for Strata: the same flags, over the Kafka
# protocol only (it runs `strata remote-log-metadata-migration "$@"`):
#   --bootstrap-server H:P --upgrade-to-v1 --retention-ms N
#   --bootstrap-server H:P --check [--upgrade-to-v2 [--force]]
#
# bin/strata-tool.sh beside it (symlinks followed) finds the repository's .venv, a `strata` on PATH,
# or python3 with the repository's src/.
exec "$(dirname "$(readlink -f "$0")")/strata-tool.sh" remote-log-metadata-migration "$@"
