#!/bin/bash
# The bookie's CPU per add, as docs/benchmarks.md measures it: start `bkeeper bookie` from the
# source tree TREE on PORT (no metadata service), run `bkeeper bench bookie --address` against
# it, and read the bookie's utime+stime from /proc around the run.
#   scripts/bookie_cpu_per_add.sh TREE PORT [bench bookie options, e.g. --protocol v3]
# Prints: TREE adds/s µs-per-add. The CPU counts the bookie's start and the bench's warm-up
# too, over the adds measured: compare trees side by side, not with other figures.
set -euo pipefail
tree=$(cd "$1" && pwd); port=$2; shift 2
data=$(mktemp -d)
trap 'kill "$bookie" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$data" "$data.log"' EXIT
PYTHONPATH=$tree/src python -m bkeeper bookie --data-dir "$data" --port "$port" >"$data.log" 2>&1 &
bookie=$!
for _ in $(seq 100); do (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.2; done
cpu() { awk '{print $14 + $15}' "/proc/$bookie/stat"; }
before=$(cpu)
row=$(PYTHONPATH=$tree/src python -m bkeeper bench bookie --address "127.0.0.1:$port" \
    --duration 5 "$@" 2>&1 | grep "bookie adds")
after=$(cpu)
ops=$(echo "$row" | awk -F'│' '{gsub(/[ ,]/, "", $3); print $3}')
rate=$(echo "$row" | awk -F'│' '{gsub(/[ ,]/, "", $5); print $5}')
ticks=$(getconf CLK_TCK)
python -c "print('$tree', $rate, round(($after - $before) / $ticks / $ops * 1e6, 2), 'us/add')"
