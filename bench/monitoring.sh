#!/usr/bin/env bash
# Monitoring's costs (BENCHMARKS.md, issue #7), on the upstream instance of serving.sh
# (`kep-bench upstream`, started by kep as a custom-image deployment):
#   1. gateway throughput with call metrics on (the default) and off
#      (KEP_GATEWAY_METRICS=false): two keps, each with its own upstream, measured in
#      alternation (on, off, on, off …); the goal is a cost under 5%;
#   2. the time from a deployment state change to the webhook receiving its alert: the
#      instance is SIGKILLed N times (Available → Progressing, then after the restart
#      Progressing → Available); latency = the webhook's arrival time − the event's `at` as
#      kep recorded it; the goal is under 1 s.
#
#   bench/monitoring.sh                    # needs wrk, jq, curl, taskset, python3 (3.11+)
#   DURATION=10s ROUNDS=3 KILLS=20 bench/monitoring.sh
#
# Pinned as serving.sh's pinned layout: each kep alone on CPU 1 with one tokio worker (only
# one is under load at a time); wrk (-t1) and the upstreams on CPU 0. "cpu" is kep's own CPU
# time (user + system, from /proc) per request, and its share of CPU 1 over the run: kep
# alone saturates its core, so well under ~95% means something else ran there. Both keps
# restart a failed instance after 100 ms (doubling up to 1 s); only part 2 uses it.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-64}
KILLS=${KILLS:-20}

source bench/lib.sh
bench_init kep kep-bench
api() { curl -sf -H "Authorization: Bearer bench-operator" -H 'content-type: application/json' "$@"; }

cat >"$WORK/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"inputs":[[1.0,2.0,3.0,4.0]]}'
wrk.headers["Content-Type"] = "application/json"
LUA
RESULTS=$WORK/results
: >"$RESULTS"

echo "== machine: $(machine), $(python3 --version)"
wait_for_quiet
# start_kep NAME ENV… → ADMIN[NAME] GATEWAY[NAME] KEY[NAME] KEP_PID[NAME]
declare -A ADMIN GATEWAY KEY KEP_PID
start_kep() {
  local name=$1; shift
  local data=$WORK/$name
  mkdir -p "$data"
  env "$@" TOKIO_WORKER_THREADS=1 KEP_LOG=warn KEP_ADMIN_TOKEN=bench-operator \
    KEP_SERVING_RESTART_BACKOFF_MS=100 KEP_SERVING_RESTART_BACKOFF_MAX_S=1 \
    taskset -c 1 "$KEP" serve --only serving --data-dir "$data/kep" \
    --admin-addr 127.0.0.1:0 --gateway-addr 127.0.0.1:0 >"$data/kep.log" 2>&1 &
  KEP_PID[$name]=$!
  pids+=("$!")
  local admin
  admin=$(kep_url "$data/kep" admin)
  ADMIN[$name]=$admin
  GATEWAY[$name]=$(kep_url "$data/kep" gateway)
  api -XPOST "$admin/admin/v1/serving/images" \
    -d "$(jq -nc --arg b "$BENCH" '{name: "upstream", command: [$b, "upstream"]}')" >/dev/null
  KEY[$name]=$(api -XPOST "$admin/admin/v1/serving/endpoints" -d '{"name":"bench","instance_count":1}' | jq -r .api_key)
  api -XPOST "$admin/admin/v1/serving/endpoints/bench/deployments" \
    -d '{"name":"d1","type":"custom-image","image":"upstream"}' >/dev/null
  local dep
  dep=$(wait_available "$admin" 0)
  local up_pid
  up_pid=$(jq -r '.instances[0].pid' <<<"$dep")
  # The instance inherits kep's CPU; it goes to wrk's.
  taskset -a -p -c 0 "$up_pid" >/dev/null
  curl -sf -XPOST -H "Authorization: Bearer ${KEY[$name]}" -H 'content-type: application/json' \
    -d '{"inputs":[[1.0,2.0,3.0,4.0]]}' "${GATEWAY[$name]}/endpoints/bench/v1/predict" >/dev/null \
    || { echo "no answer from kep $name" >&2; exit 1; }
  echo "== kep $name: pid ${KEP_PID[$name]} (${*:-default settings}), 1 tokio worker on CPU 1; upstream pid $up_pid on CPU 0"
}
# wait_available ADMIN OLD_PID → the deployment, once Available with an instance other than OLD_PID
wait_available() {
  deployment_when "$1" bench d1 ".state == \"Available\" and (.instances[0].pid | tostring) != \"$2\""
}

# measure NAME → appends "name rps p50 p99 cpu requests" to $RESULTS
measure() {
  local name=$1 t0 t1 w0 w1 out note=""
  compiling && note="  (a compilation ran)"
  t0=$(cpu_ticks "${KEP_PID[$name]}") w0=$EPOCHREALTIME
  out=$(taskset -c 0 wrk -t1 -c"$CONNS" -d"$DURATION" --latency -s "$WORK/post.lua" \
    -H "Authorization: Bearer ${KEY[$name]}" "${GATEWAY[$name]}/endpoints/bench/v1/predict" | awk "$WRK_AWK")
  t1=$(cpu_ticks "${KEP_PID[$name]}") w1=$EPOCHREALTIME
  compiling && note="  (a compilation ran)"
  read -r rps p50 p99 n <<<"$out"
  local cpu=$(((t1 - t0) * TICK_US * 100 / n)) # hundredths of a µs
  cpu=$(printf '%d.%02d' $((cpu / 100)) $((cpu % 100)))
  local core=$(awk -v t=$((t1 - t0)) -v w0="$w0" -v w1="$w1" -v us="$TICK_US" 'BEGIN { printf "%.0f", t * us / (w1 - w0) / 1e4 }')
  printf '   %-4s %9s req/s  p50 %6s us  p99 %6s us  kep cpu %s us/req, %3s%% of its core%s\n' \
    "$name" "$rps" "$p50" "$p99" "$cpu" "$core" "$note"
  echo "$name $rps $p50 $p99 $cpu $n" >>"$RESULTS"
}

start_kep on
start_kep off KEP_GATEWAY_METRICS=false

# ---- part 1: throughput, metrics on vs off
for k in on off; do # warm the upstream connection pools
  taskset -c 0 wrk -t1 -c"$CONNS" -d2s -s "$WORK/post.lua" -H "Authorization: Bearer ${KEY[$k]}" \
    "${GATEWAY[$k]}/endpoints/bench/v1/predict" >/dev/null
done
echo "== gateway throughput: wrk -t1 -c$CONNS -d$DURATION --latency (keep-alive), $ROUNDS rounds of on, off"
for _ in $(seq "$ROUNDS"); do measure on; measure off; done

echo "== summary (medians over rounds; latencies in µs)"
awk '
  function med(k, f,   a, n, i, j, t) { n = 0
    for (i = 1; i <= NR; i++) if (name[i] == k) a[++n] = v[i, f]
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  { name[NR] = $1; for (f = 2; f <= 5; f++) v[NR, f] = $f }
  END {
    on = med("on", 2); off = med("off", 2)
    printf "   metrics on  %9.0f req/s  p50 %6.0f  p99 %6.0f  kep cpu %.2f us/req\n", on, med("on", 3), med("on", 4), med("on", 5)
    printf "   metrics off %9.0f req/s  p50 %6.0f  p99 %6.0f  kep cpu %.2f us/req\n", off, med("off", 3), med("off", 4), med("off", 5)
    printf "   cost of metrics: %.1f%% of req/s ((off-on)/off), %+.2f us cpu/req (goal: under 5%%)\n", (off - on) / off * 100, med("on", 5) - med("off", 5)
  }' "$RESULTS"

COUNTER='kep_serving_requests_total{endpoint="bench",deployment="d1",status="2xx"}'
counted() { curl -sf "${ADMIN[$1]}/metrics" | awk -v c="$COUNTER" 'index($0, c " ") == 1 { print $2 }'; }
sent_on=$(awk '$1 == "on" { s += $6 } END { print s }' "$RESULTS")
on_count=$(counted on); off_count=$(counted off)
echo "   /metrics $COUNTER: on ${on_count:-absent} (wrk counted $sent_on in the measured runs, plus warm-up), off ${off_count:-absent}"
[ -n "$on_count" ] && [ "${on_count%.*}" -ge "$sent_on" ] || { echo "metrics-on kep did not count the calls" >&2; exit 1; }
[ -z "$off_count" ] || [ "${off_count%.*}" = 0 ] || { echo "metrics-off kep counted calls" >&2; exit 1; }

# ---- part 2: state change → webhook alert
hook_port=$(free_port)
cat >"$WORK/hook.py" <<'PY'
import http.server, json, sys, time
out = open(sys.argv[2], "a", buffering=1)
class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        t = time.time()
        out.write(f"{t:.6f} {json.loads(body)['text']}\n")
        self.send_response(200); self.send_header("content-length", "0"); self.end_headers()
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Hook).serve_forever()
PY
: >"$WORK/alerts"
python3 "$WORK/hook.py" "$hook_port" "$WORK/alerts" &
pids+=("$!")
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$hook_port") 2>/dev/null && break; sleep 0.1; done
admin=${ADMIN[on]}
api -XPUT "$admin/admin/v1/serving/endpoints/bench/alerts" -d "{\"enabled\":true,\"webhook_url\":\"http://127.0.0.1:$hook_port/hook\",\"conditions\":{\"state_progressing\":{\"enabled\":true},\"state_available\":{\"enabled\":true}}}" >/dev/null
echo "== state change → webhook: $KILLS SIGKILLs of kep on's instance (restart back-off 100 ms doubling to 1 s); webhook on port $hook_port"
last_id=$(api "$admin/admin/v1/serving/endpoints/bench/deployments/d1/events?limit=1" | jq '.[0].id // 0')
: >"$WORK/events"
for r in $(seq "$KILLS"); do
  pid=$(api "$admin/admin/v1/serving/endpoints/bench/deployments/d1" | jq -r '.instances[0].pid')
  kill -KILL "$pid"
  wait_available "$admin" "$pid" >/dev/null
  for _ in $(seq 100); do [ "$(wc -l <"$WORK/alerts")" -ge $((2 * r)) ] && break; sleep 0.1; done
  [ "$(wc -l <"$WORK/alerts")" -ge $((2 * r)) ] || { echo "round $r: alerts missing" >&2; cat "$WORK/alerts" >&2; exit 1; }
  api "$admin/admin/v1/serving/endpoints/bench/deployments/d1/events?limit=50" |
    jq -c --argjson l "$last_id" '[.[] | select(.id > $l)] | sort_by(.id) | .[] | select(.kind == "deployment_state")' >>"$WORK/events"
  last_id=$(api "$admin/admin/v1/serving/endpoints/bench/deployments/d1/events?limit=1" | jq '.[0].id')
done
python3 - "$WORK/events" "$WORK/alerts" <<'PY'
import json, math, sys
from datetime import datetime
events = [json.loads(l) for l in open(sys.argv[1])]
alerts = [l.rstrip("\n").split(" ", 1) for l in open(sys.argv[2])]
odd = [e for e in events if (e["from"], e["to"]) not in (("Available", "Progressing"), ("Progressing", "Available"))]
if odd: print("   other deployment_state events:", odd)
for frm, to in (("Available", "Progressing"), ("Progressing", "Available")):
    ev = [datetime.fromisoformat(e["at"]).timestamp() for e in events if (e["from"], e["to"]) == (frm, to)]
    al = [float(t) for t, text in alerts if text.endswith(f"state changed from {frm} to {to}")]
    if len(ev) != len(al): print(f"   {frm} → {to}: {len(ev)} events but {len(al)} alerts")
    lat = sorted((a - e) * 1000 for e, a in zip(ev, al))
    pick = lambda q: lat[max(0, math.ceil(q * len(lat)) - 1)]
    print(f"   {frm:>11} → {to:<11} n={len(lat)}  p50 {pick(0.5):6.1f} ms  p99 {pick(0.99):6.1f} ms"
          f"{' (= max, n<100)' if len(lat) < 100 else ''}  max {lat[-1]:6.1f} ms  min {lat[0]:6.1f} ms  (goal: under 1000 ms)")
PY
