#!/usr/bin/env bash
# Live media benchmark (BENCHMARKS.md): one WHIP publisher (~1 Mbit/s of VP8-framed video
# and Opus-sized audio) and steps of WHEP subscribers, str0m peers in kep-bench, all on
# 127.0.0.1. Per step: forwarded packets/s and Mbit/s, per core of kep's CPU time, CPU per
# forwarded Mbit, RSS per subscriber, loss, join -> first video frame (p50/p99).
#
#   bench/media.sh                      # steps 1,10,50,100,200
#   STEPS=1,25,50,100,150,200,300 SECONDS_PER_STEP=10 bench/media.sh
#   KEP_CPUS=0 BENCH_CPUS=1 bench/media.sh   # kep and the peers each on cores of their own
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-1,10,50,100,200}
SECONDS_PER_STEP=${SECONDS_PER_STEP:-10}
pin() { if [ -n "${1:-}" ]; then echo taskset -c "$1"; fi; }

. bench/lib.sh
bench_init kep kep-bench
DATA=$WORK/data

KEP_LOG=warn $(pin "${KEP_CPUS:-}") $KEP serve --only live --data-dir "$DATA" --admin-addr 127.0.0.1:0 --live-addr 127.0.0.1:0 \
  --media-addr 127.0.0.1:0 >/dev/null 2>&1 &
pids+=($!); SERVER=$!
for _ in $(seq 100); do [ -f "$DATA/addresses.json" ] && break; sleep 0.1; done
ADMIN=http://$(jq -r .admin "$DATA/addresses.json"); LIVE=http://$(jq -r .live "$DATA/addresses.json")
OP=$(cat "$DATA/admin-token")
SVC=$(curl -sf -XPOST -H "Authorization: Bearer $OP" -H 'content-type: application/json' "$ADMIN/admin/v1/live/services" -d '{"serviceId":"bench"}')

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
$(pin "${BENCH_CPUS:-}") $BENCH media --live "$LIVE" --service-id bench --service-secret "$(jq -r .serviceSecret <<<"$SVC")" \
  --kep-pid "$SERVER" --steps "$STEPS" --seconds "$SECONDS_PER_STEP"
