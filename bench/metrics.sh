#!/usr/bin/env bash
# What the metrics of every service cost (BENCHMARKS.md): kep's CPU profile (perf, DWARF
# call stacks) under the messaging and live loads, and the share of its samples that have a
# frame of the metrics code on their stack (the `metrics` facade, the Prometheus recorder,
# metrics-util's atomics, kep's own observe functions). Every metric kep records is
# recorded inside such a frame, so that share bounds what the metrics take from the
# throughput.
#
#   bench/metrics.sh     # needs wrk, jq, curl, perf; DURATION (10s)
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10s}
SECS=${DURATION%s}

. bench/lib.sh
bench_init kep kep-bench
DATA=$WORK/data

serve_live_messaging
export LIVE_TOKEN=$("$KEP" live --data-dir "$DATA" provision --service-id bench \
  --admin-secret "$(jq -r .adminSecret <<<"$SVC")" | jq -r .token)
# A room of 100 participants held open (each join counts a socket message).
mkfifo "$WORK/hold"
$BENCH hold --live "$LIVE" --service-id bench --service-secret "$(jq -r .serviceSecret <<<"$SVC")" \
  --rooms 1 --per-room 100 --prefix lp >"$WORK/hold" &
pids+=($!)
read -r _ <"$WORK/hold"

write_send_lua "$WORK/send.lua"
cat >"$WORK/list.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":"1","method":"Room.ListParticipants","params":{"version":"2.0","roomId":"lp-0"}}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("LIVE_TOKEN")
LUA

# The share of the samples with a frame of the metrics code on their stack.
METRICS_FRAMES='metrics::|metrics_exporter_prometheus|metrics_util|kep_live::metrics|kep_[a-z_]+::.*observe'
share() {
  perf script -i "$1" -F ip,sym 2>/dev/null | awk -v re="$METRICS_FRAMES" '
    function done_sample() { if (n) { total++; depth += n; if (first != "") { hit++; by[first]++ } } n = 0; first = "" }
    /^$/ { done_sample(); next }
    { n++; if (first == "" && $0 ~ re) { $1 = ""; first = substr($0, 2) } }
    END {
      done_sample()
      printf "%d samples (%.0f frames deep on average), %.2f %% with a metrics frame; the most seen:\n", total, depth / total, 100 * hit / total
      for (f in by) printf "      %5.2f %%  %s\n", 100 * by[f] / total, substr(f, 1, 110) | "sort -rn | head -4"
    }'
}

# Load $1 (wrk against $3 with script $2) with kep profiled meanwhile.
profiled() {
  perf record -q -F 499 --call-graph dwarf,16384 -p "$SERVER" -o "$WORK/$1.perf" -- sleep "$SECS" 2>/dev/null &
  local perf=$!
  local rate
  rate=$(wrk -t2 -c64 -d"$DURATION" -s "$2" "$3" -- "$1" | awk '/Requests\/sec/ {print $2}')
  wait "$perf" || true
  echo "   $1: $rate req/s; $(share "$WORK/$1.perf")"
}

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "== wrk -t2 -c64 -d$DURATION, kep profiled by perf at 499 Hz (DWARF stacks)"
profiled sends "$WORK/send.lua" "$MSG"
profiled list "$WORK/list.lua" "$LIVE/api/rpc"
