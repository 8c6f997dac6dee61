#!/usr/bin/env bash
# Serving failover (BENCHMARKS.md, issue #21): three `kep serve` on one throwaway
# PostgreSQL, an endpoint of two instances (a Python HTTP server), the node running them
# killed -9; the time from the kill to the first good answer through another node's
# gateway, ROUNDS times (5). Each round is the several-nodes test, which prints the figure.
#
#   bench/failover.sh   # needs Debian's postgresql and python3
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
cargo test -q -p kep --test it --no-run 2>/dev/null
figures=()
for _ in $(seq "$ROUNDS"); do
  ms=$(cargo test -q -p kep --test it several_nodes::serving::serving_moves -- --nocapture 2>&1 |
    sed -n 's/^serving failover: \([0-9]*\) ms.*/\1/p')
  echo "round: ${ms:?the test printed no figure} ms"
  figures+=("$ms")
done
printf '%s\n' "${figures[@]}" | sort -n |
  awk '{a[NR]=$1} END {print "median: " a[int((NR+1)/2)] " ms, min " a[1] ", max " a[NR] " (goal < 10000 ms)"}'
