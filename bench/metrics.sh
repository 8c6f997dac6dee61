#!/usr/bin/env bash
# What the metrics of every service cost (BENCHMARKS.md): the messaging and live throughputs
# of this tree's kep against BASE, a kep built without them, alternating in one run.
#
#   BASE=/path/to/older/kep bench/metrics.sh     # needs wrk, jq, curl; ROUNDS (3), DURATION (5s)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5s}
: "${BASE:?BASE=<a kep binary to compare with>}"

. bench/lib.sh
bench_init kep kep-bench
cp "$BASE" "$WORK/base-kep"

write_send_lua "$WORK/send.lua"
BODY='{"jsonrpc":"2.0","id":"1","method":"Room.ListParticipants","params":{"version":"2.0","roomId":"lp-0"}}'
cat >"$WORK/list.lua" <<LUA
wrk.method = "POST"
wrk.body = '$BODY'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("LIVE_TOKEN")
LUA

# One round of binary $1: "sends req/s, kep CPU µs per send, ListParticipants req/s".
round() {
  local kep=$1 data=$WORK/data-$2
  rm -rf "$data"
  KEP_LOG=warn KEP_SIMULATOR_DELAY_MS=200 "$kep" serve --data-dir "$data" --only live,messaging \
    --admin-addr 127.0.0.1:0 --live-addr 127.0.0.1:0 --media-addr 127.0.0.1:0 \
    --messaging-addr 127.0.0.1:0 >/dev/null 2>&1 &
  local server=$!
  pids+=("$server")
  for _ in $(seq 100); do [ -f "$data/addresses.json" ] && break; sleep 0.1; done
  local admin=http://$(jq -r .admin "$data/addresses.json") live=http://$(jq -r .live "$data/addresses.json")
  local msg=http://$(jq -r .messaging "$data/addresses.json") op
  op=$(cat "$data/admin-token")
  local c svc
  c=$(curl -sf -XPOST -H "Authorization: Bearer $op" -H 'content-type: application/json' "$admin/admin/v1/messaging/clients" -d '{}')
  export TOKEN=$(curl -sf -u "$(jq -r .client_id <<<"$c"):$(jq -r .client_secret <<<"$c")" \
    -d grant_type=client_credentials "$msg/v2/oauth/token" | jq -r .access_token)
  svc=$(curl -sf -XPOST -H "Authorization: Bearer $op" -H 'content-type: application/json' "$admin/admin/v1/live/services" -d '{"serviceId":"bench"}')
  export LIVE_TOKEN=$("$KEP" live --data-dir "$data" provision --service-id bench --admin-secret "$(jq -r .adminSecret <<<"$svc")" | jq -r .token)
  mkfifo "$data.hold"
  $BENCH hold --live "$live" --service-id bench --service-secret "$(jq -r .serviceSecret <<<"$svc")" \
    --rooms 1 --per-room 100 --prefix lp >"$data.hold" &
  local hold=$!
  read -r _ <"$data.hold"
  local t0 t1 sends list
  t0=$(cpu_ticks "$server")
  sends=$(wrk -t2 -c64 -d"$DURATION" -s "$WORK/send.lua" "$msg" -- "$2" | awk '/requests in/ {n = $1} /Requests\/sec/ {print $2, n}')
  t1=$(cpu_ticks "$server")
  list=$(wrk -t2 -c64 -d"$DURATION" -s "$WORK/list.lua" "$live/api/rpc" | awk '/Requests\/sec/ {print $2}')
  kill -TERM "$hold" "$server"; wait "$hold" "$server" 2>/dev/null || true
  awk -v t=$(((t1 - t0) * TICK_US)) -v l="$list" '{printf "sends %.0f req/s %.0f us; ListParticipants %.0f req/s", $1, t / $2, l}' <<<"$sends"
}

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "== wrk -t2 -c64 -d$DURATION: POST /v2/send/xms (req/s, kep CPU per send), Room.ListParticipants of 100 (req/s)"
for r in $(seq "$ROUNDS"); do
  echo "   round $r base:  $(round "$WORK/base-kep" "base$r")"
  echo "   round $r HEAD:  $(round "$KEP" "head$r")"
done
