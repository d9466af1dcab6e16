#!/bin/sh
# Kafka's bin/kafka-topics.sh for Strata: the same flags and output, over the Kafka protocol only
# (it runs `strata topics "$@"`). Scripts written for Kafka's tools, and librdkafka's tests with
# KAFKA_PATH set to this repository, run unchanged.
#
# Finds the repository relative to this script (following symlinks), then runs its .venv's
# Python with its src/ first on PYTHONPATH; else a `strata` on PATH; else python3 with src/.
script=$0
while [ -L "$script" ]; do
    target=$(readlink "$script")
    case $target in
        /*) script=$target ;;
        *) script=$(dirname "$script")/$target ;;
    esac
done
root=$(cd "$(dirname "$script")/.." && pwd)
if [ -x "$root/.venv/bin/python" ]; then
    PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}" exec "$root/.venv/bin/python" -m strata topics "$@"
elif command -v strata >/dev/null 2>&1; then
    exec strata topics "$@"
elif [ -f "$root/src/strata/__init__.py" ]; then
    PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}" exec python3 -m strata topics "$@"
fi
echo "kafka-topics.sh: cannot find Strata: no $root/.venv (run 'make run' there) and no 'strata' on PATH" >&2
exit 1
