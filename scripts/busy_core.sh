#!/usr/bin/env bash
# Runs the test suite (or what the arguments after -- select) RUNS times in a row while
# another process keeps one core busy (a Python spin loop), as issue 41's "done when" asks;
# prints each run's exit status and wall time, and stops at the first failure.
#
#   bash scripts/busy_core.sh RUNS [-- PYTEST ARGS]
#   bash scripts/busy_core.sh 5 -- -m "not integration"
#
# Without pytest arguments each run is the whole suite, as scripts/test.sh runs it (both
# tiers, as many processes each), without the installs and linters.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:?usage: busy_core.sh RUNS [-- PYTEST ARGS]}"
if ! [[ "$runs" =~ ^[1-9][0-9]*$ ]]; then
    echo "error: RUNS: '$runs' is not a positive whole number (usage: busy_core.sh RUNS [-- PYTEST ARGS])" >&2
    exit 2
fi
shift
[ "${1:-}" = "--" ] && shift
python -c "while True: pass" &
spinner=$!
trap 'kill "$spinner" 2>/dev/null || true' EXIT
for run in $(seq 1 "$runs"); do
    started=$(date +%s)
    if [ "$#" -gt 0 ]; then
        code=0; python -m pytest -n 2 --dist loadfile "$@" > "/tmp/busy-core-run-$run.txt" 2>&1 || code=$?
    else
        code=0
        { python -m pytest -n 4 --dist worksteal -m "not integration" -x \
          && python -m pytest -n 2 --dist loadfile -m integration; } \
          > "/tmp/busy-core-run-$run.txt" 2>&1 || code=$?
    fi
    echo "run $run of $runs: exit $code in $(( $(date +%s) - started )) s ($(tail -n 1 "/tmp/busy-core-run-$run.txt"))"
    [ "$code" -eq 0 ] || exit "$code"
done
