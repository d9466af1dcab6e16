#!/bin/sh
# What bin/kafka-*.sh run: `strata TOOL ARGS...` with this repository's .venv (src/ first on the path),
# else a `strata` on the PATH, else python3 with this repository's src/ (Kafka's kafka-run-class.sh role).
tool=$1
shift
root=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
if [ -x "$root/.venv/bin/python" ]; then
    PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}" exec "$root/.venv/bin/python" -m strata "$tool" "$@"
elif command -v strata >/dev/null 2>&1; then
    exec strata "$tool" "$@"
elif [ -f "$root/src/strata/__init__.py" ]; then
    PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}" exec python3 -m strata "$tool" "$@"
fi
echo "strata $tool: cannot find Strata: no $root/.venv (run 'make run' there) and no 'strata' on PATH" >&2
exit 1
