#!/usr/bin/env bash
# Stragglers after a burst (BENCHMARKS.md "Messages at 100 after a burst", issue #41):
# ROUNDS (10) bursts of POST /v2/send/xms, each DURATION (10s) long from wrk -t2 -c CONNS
# (64), the simulator at its 200 ms default, one node on SQLite; two seconds after each
# round, the messages still at 100. wrk cuts off the requests it has in flight when its
# time is up, as a client that gives up does: what kep stored of them must be delivered
# all the same, within the carrier's delay.
#
#   bench/burst.sh                  # needs wrk, jq, curl, sqlite3
#   REF_BIN=/path/to/old/kep bench/burst.sh   # the same rounds against that binary too,
#                                             # alternating, on a server of its own
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
ROUNDS=${ROUNDS:-10}
DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
bench_init kep
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"

cat >"$WORK/send.lua" <<'LUA'
local counter = 0
local threads = 0
local prefix = os.getenv("PREFIX")
function setup(thread) thread:set("tid", threads); threads = threads + 1 end
function request()
  counter = counter + 1
  local body = '{"cid":"' .. prefix .. tid .. '-' .. counter .. '","message_type":"SM","phone_number":"821012345678","message":"bench","sender_no":"0212345678"}'
  return wrk.format("POST", "/v2/send/xms", {["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. os.getenv("TOKEN"), ["accept"] = "*/*"}, body)
end
LUA

# start NAME BIN: a server of its own on a fresh data dir, with a client and its token.
declare -A MSG TOKEN DATA
start() {
  local name=$1 bin=$2 dir=$WORK/data-$1
  mkdir -p "$dir"
  KEP_LOG=warn "$bin" serve --data-dir "$dir" --only messaging \
    --admin-addr 127.0.0.1:0 --messaging-addr 127.0.0.1:0 >"$dir/log" 2>&1 &
  pids+=($!)
  for _ in $(seq 200); do [ -f "$dir/addresses.json" ] && break; sleep 0.1; done
  local admin=http://$(jq -r .admin "$dir/addresses.json") op c
  MSG[$name]=http://$(jq -r .messaging "$dir/addresses.json")
  op=$(cat "$dir/admin-token")
  c=$(curl -sf -XPOST -H "Authorization: Bearer $op" -H 'content-type: application/json' "$admin/admin/v1/messaging/clients" -d '{}')
  TOKEN[$name]=$(curl -sf -u "$(jq -r .client_id <<<"$c"):$(jq -r .client_secret <<<"$c")" \
    -d grant_type=client_credentials "${MSG[$name]}/v2/oauth/token" | jq -r .access_token)
  DATA[$name]=$dir
}
names=(kep)
start kep "$KEP"
if [ -n "${REF_BIN:-}" ]; then
  cp "$REF_BIN" "$WORK/kep-ref"
  names+=(ref)
  start ref "$WORK/kep-ref"
fi

echo "== $ROUNDS rounds of wrk -t2 -c$CONNS -d$DURATION POST /v2/send/xms; at 100 two seconds after each"
printf '   %-6s %-5s %12s %16s\n' round build accepted/s "at 100 after 2 s"
for round in $(seq "$ROUNDS"); do
  for name in "${names[@]}"; do
    rps=$(PREFIX="r$round-" TOKEN=${TOKEN[$name]} wrk -t2 -c"$CONNS" -d"$DURATION" -s "$WORK/send.lua" "${MSG[$name]}" |
      awk '/Requests\/sec/ { print $2 }')
    sleep 2
    left=$(sqlite3 "${DATA[$name]}/messaging.db" "SELECT COUNT(*) FROM messages WHERE status = '100'")
    printf '   %-6s %-5s %12s %16s\n' "$round" "$name" "$rps" "$left"
    # The next round starts once this one's stragglers are final, whoever left them.
    for _ in $(seq 600); do
      [ "$(sqlite3 "${DATA[$name]}/messaging.db" "SELECT COUNT(*) FROM messages WHERE status = '100'")" = 0 ] && break
      sleep 0.1
    done
  done
done
