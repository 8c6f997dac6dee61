#!/usr/bin/env bash
# Live webhooks (BENCHMARKS.md): how late a room's events reach a healthy receiver when
# 1,000 participants join and leave across 100 rooms, and what the webhooks cost Room
# methods: Room.ListParticipants under wrk while participants come and go, on a service with
# its webhook on and on one without, in the same run (sides swap every round).
#
#   bench/webhooks.sh     # needs wrk, jq, curl; ROUNDS (4), DURATION (5s), CYCLES (1)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-4}
CYCLES=${CYCLES:-1}
DURATION=${DURATION:-5s}

. bench/lib.sh
bench_init kep kep-bench
DATA=$WORK/data

KEP_LOG=warn "$KEP" serve --data-dir "$DATA" --only live --admin-addr 127.0.0.1:0 \
  --live-addr 127.0.0.1:0 --media-addr 127.0.0.1:0 >/dev/null 2>&1 &
SERVER=$!
pids+=("$SERVER")
for _ in $(seq 100); do [ -f "$DATA/addresses.json" ] && break; sleep 0.1; done
ADMIN=http://$(jq -r .admin "$DATA/addresses.json")
LIVE=http://$(jq -r .live "$DATA/addresses.json")
OP=$(cat "$DATA/admin-token")
admin() { curl -sf -X"$1" -H "Authorization: Bearer $OP" -H 'content-type: application/json' "$ADMIN$2" -d "$3"; }
declare -A SECRET TOKEN
for s in on off; do
  svc=$(admin POST /admin/v1/live/services "{\"serviceId\":\"$s\"}")
  SECRET[$s]=$(jq -r .serviceSecret <<<"$svc")
  TOKEN[$s]=$("$KEP" live --data-dir "$DATA" provision --service-id "$s" \
    --admin-secret "$(jq -r .adminSecret <<<"$svc")" | jq -r .token)
done

# The receiver, for one measurement: it ends, printing what it saw, once no event came for
# a while.
receive() { # $1: output file, $2: quiet ms; sets RECEIVER (its pid), points `on`'s webhook at it
  mkfifo "$1.fifo"
  $BENCH receive --quiet-ms "$2" >"$1.fifo" &
  RECEIVER=$!
  pids+=("$RECEIVER")
  local _ addr
  exec 3<"$1.fifo"
  read -r _ addr <&3
  cat <&3 >"$1" &
  exec 3<&-
  admin PUT /admin/v1/live/services/on/webhook "{\"url\":\"http://$addr/hook\",\"enabled\":true}" >/dev/null
}

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "== 1,000 participants join and leave 100 rooms; a healthy receiver"
receive "$WORK/latency" 2000
$BENCH churn --live "$LIVE" --service-id on --service-secret "${SECRET[on]}" --rooms 100 --per-room 10 \
  --prefix lat --cycles 1 | sed 's/^/   /'
wait "$RECEIVER" || true
sleep 0.2
echo "   $(cat "$WORK/latency")"

# Room.ListParticipants of a 10-participant room of the side's service, under wrk, while
# 1,000 of its participants join and leave 100 rooms (CYCLES times), with kep's CPU time.
mkfifo "$WORK/held"
for s in on off; do
  $BENCH hold --live "$LIVE" --service-id "$s" --service-secret "${SECRET[$s]}" --rooms 1 \
    --per-room 10 --prefix "lp$s" >"$WORK/held" &
  pids+=($!)
  read -r _ <"$WORK/held"
done
cat >"$WORK/list.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
function init(args) room = args[1]; token = args[2] end
function request()
  return wrk.format(nil, nil, {["Authorization"] = "Bearer " .. token},
    '{"jsonrpc":"2.0","id":"1","method":"Room.ListParticipants","params":{"version":"2.0","roomId":"' .. room .. '"}}')
end
LUA
side() { # $1: on | off; prints "<req/s> req/s, <joins/s> joins/s, <kep CPU> s"
  local t0 t1 rate
  t0=$(cpu_ticks "$SERVER")
  (sleep 1; $BENCH churn --live "$LIVE" --service-id "$1" --service-secret "${SECRET[$1]}" --rooms 100 \
    --per-room 10 --prefix "c$1" --cycles "$CYCLES" >"$WORK/churn-$1") &
  local churn=$!
  rate=$(wrk -t2 -c64 -d"$DURATION" -s "$WORK/list.lua" "$LIVE/api/rpc" -- "lp$1-0" "${TOKEN[$1]}" |
    awk '/Requests\/sec/ {print $2}')
  wait "$churn" 2>/dev/null || true
  t1=$(cpu_ticks "$SERVER")
  awk -v r="$rate" -v cpu=$(((t1 - t0) * TICK_US)) '{gsub(/[(]/, ""); s += $8; n++}
    END {printf "%.0f req/s, %.0f joins/s, kep CPU %.2f s", r, n ? s / n : 0, cpu / 1e6}' "$WORK/churn-$1"
}
receive "$WORK/during" 20000 # for the `on` side's events throughout, quiet through an `off` side
echo "== Room.ListParticipants (wrk -t2 -c64 -d$DURATION) while 1,000 participants join and leave $CYCLES time(s); webhook off | on"
for r in $(seq "$ROUNDS"); do
  if ((r % 2)); then off=$(side off); on=$(side on); else on=$(side on); off=$(side off); fi
  echo "   round $r: $off | $on"
done
wait "$RECEIVER" || true
sleep 0.2
echo "   webhook events, all rounds: $(cat "$WORK/during")"
curl -sf -H "Authorization: Bearer $OP" "$ADMIN/admin/v1/live/services/on/webhook/deliveries?limit=1000" |
  jq -r '"   the last 1,000 deliveries: " + ([.deliveries[].status] | group_by(.) | map("\(length) \(.[0])") | join(", "))'
