#!/usr/bin/env bash
# Soak (RELIABILITY.md, issue #8): mixed traffic against every service of one release
# `kep serve` for MINUTES, at RATE calls per second to each (live: a participant joins,
# publishes, is listed and leaves; adapter: a DRM release round trip with a 16 KiB file;
# messaging: an XMS send, and a search every tenth; gateway: a call to a `kep-bench upstream`
# instance; operator: an endpoint's metrics). Every INTERVAL seconds it prints kep's RSS,
# open descriptors and each service's calls and p50/p99; at the end, the trend after a 20%
# warm-up. It fails on any failed call, or when the trend adds more than 5% of the memory
# held or 10 descriptors over the run.
#
#   bench/soak.sh                       # 10 minutes, 20 calls/s per service
#   MINUTES=60 RATE=50 bench/soak.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${MINUTES:-10}
RATE=${RATE:-20}
INTERVAL=${INTERVAL:-5}

source bench/lib.sh
bench_init kep kep-bench
echo "== machine: $(machine)"
# Not waiting for a quiet machine: memory and descriptors are what is judged; latencies
# measured beside a compilation are only indicative.
DATA=$WORK/data
KEP_LOG=warn KEP_ADMIN_TOKEN=bench-operator KEP_SIMULATOR_DELAY_MS=50 \
  "$KEP" serve --data-dir "$DATA" --admin-addr 127.0.0.1:0 --live-addr 127.0.0.1:0 --media-addr 127.0.0.1:0 \
  --adapter-addr 127.0.0.1:0 --messaging-addr 127.0.0.1:0 --gateway-addr 127.0.0.1:0 \
  >"$WORK/kep.log" 2>&1 &
pids+=($!)
KEP_PID=$!
kep_url "$DATA" admin >/dev/null
echo "== soak: $MINUTES min, $RATE calls/s to each of 5 services, a sample every $INTERVAL s"
"$BENCH" soak --data-dir "$DATA" --token bench-operator --pid "$KEP_PID" \
  --seconds $((MINUTES * 60)) --interval "$INTERVAL" --rate "$RATE"
