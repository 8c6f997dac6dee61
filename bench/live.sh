#!/usr/bin/env bash
# Live API benchmarks (BENCHMARKS.md): Room.ListParticipants on a 100-participant room next
# to a bare axum handler that returns the same bytes, then 10,000 participant sockets across
# 100 rooms (server RSS) and Room.DestroyRoom on a 1,000-participant room.
#
#   bench/live.sh            # needs wrk (apt-get install wrk), jq, curl
#   DURATION=30s bench/live.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-15s}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}

cargo build --release -q -p kep -p kep-bench
KEP=target/release/kep
BENCH=target/release/kep-bench
DATA=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$DATA"; }
trap cleanup EXIT
ulimit -n "$(ulimit -Hn)"

KEP_LOG=warn $KEP serve --data-dir "$DATA" --admin-addr 127.0.0.1:0 --live-addr 127.0.0.1:0 --media-addr 127.0.0.1:0 >/dev/null 2>&1 &
pids+=($!); SERVER=$!
for _ in $(seq 100); do [ -f "$DATA/addresses.json" ] && break; sleep 0.1; done
ADMIN=http://$(jq -r .admin "$DATA/addresses.json"); LIVE=http://$(jq -r .live "$DATA/addresses.json")
OP=$(cat "$DATA/admin-token")
SVC=$(curl -sf -XPOST -H "Authorization: Bearer $OP" -H 'content-type: application/json' "$ADMIN/admin/v1/live/services" -d '{"serviceId":"bench"}')
SECRET=$(jq -r .serviceSecret <<<"$SVC")
export TOKEN=$($KEP live --data-dir "$DATA" provision --service-id bench --admin-secret "$(jq -r .adminSecret <<<"$SVC")" 2>/dev/null | jq -r .token)

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"

# --- 1. Room.ListParticipants on a 100-participant room vs the ceiling ---
mkfifo "$DATA/hold.out"
$BENCH hold --live "$LIVE" --service-id bench --service-secret "$SECRET" --rooms 1 --per-room 100 --prefix lp >"$DATA/hold.out" &
pids+=($!)
read -r line <"$DATA/hold.out"; echo "   $line"
BODY='{"jsonrpc":"2.0","id":"1","method":"Room.ListParticipants","params":{"version":"2.0","roomId":"lp-0"}}'
curl -sf -XPOST -H 'content-type: application/json' -H "Authorization: Bearer $TOKEN" "$LIVE/api/rpc" -d "$BODY" -o "$DATA/answer.json"
echo "   answer: $(wc -c <"$DATA/answer.json") bytes, $(jq '.result.participants | length' "$DATA/answer.json") participants"
mkfifo "$DATA/ceiling.out"
$BENCH ceiling --addr 127.0.0.1:0 --body "$DATA/answer.json" >"$DATA/ceiling.out" &
pids+=($!)
read -r _ CEIL <"$DATA/ceiling.out"
cat >"$DATA/post.lua" <<LUA
wrk.method = "POST"
wrk.body = '$BODY'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN")
LUA
run_wrk() { wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" -s "$DATA/post.lua" "$1/api/rpc" | awk '/Requests\/sec/ {print $2} /Latency/ {lat=$2" avg, "$4" stdev"} /Non-2xx/ {print "NON-2XX " $0 > "/dev/stderr"} END {}'; }
echo "== Room.ListParticipants, 100 participants, wrk -t$THREADS -c$CONNS -d$DURATION (keep-alive)"
KEP_RPS=$(run_wrk "$LIVE")
CEIL_RPS=$(run_wrk "http://$CEIL")
KEP_RPS2=$(run_wrk "$LIVE")
CEIL_RPS2=$(run_wrk "http://$CEIL")
echo "   kep:     $KEP_RPS, $KEP_RPS2 req/s"
echo "   ceiling: $CEIL_RPS, $CEIL_RPS2 req/s"
echo "   ratio:   $(echo "($KEP_RPS + $KEP_RPS2) / ($CEIL_RPS + $CEIL_RPS2)" | bc -l | cut -c1-5)"
kill "${pids[-1]}" "${pids[-2]}" 2>/dev/null || true

# --- 2. 10,000 participant sockets across 100 rooms ---
rss() { awk '/VmRSS/ {printf "%.1f MB", $2/1024}' "/proc/$SERVER/status"; }
echo "== 10,000 participants across 100 rooms"
echo "   server RSS before: $(rss)"
mkfifo "$DATA/many.out"
$BENCH hold --live "$LIVE" --service-id bench --service-secret "$SECRET" --rooms 100 --per-room 100 --prefix many >"$DATA/many.out" &
pids+=($!)
read -r line <"$DATA/many.out"; echo "   $line"
sleep 1
echo "   server RSS with 10,000 sockets: $(rss)"
echo "   rooms listed: $(curl -sf -XPOST -H 'content-type: application/json' -H "Authorization: Bearer $TOKEN" "$LIVE/api/rpc" -d '{"jsonrpc":"2.0","id":"1","method":"Room.ListRooms","params":{}}' | jq '.result | length')"

# --- 3. Room.DestroyRoom on a 1,000-participant room (while the 10,000 stay) ---
echo "== Room.DestroyRoom, 1,000 participants"
for i in 1 2 3; do
  $BENCH destroy --live "$LIVE" --service-id bench --service-secret "$SECRET" --token "$TOKEN" --participants 1000 --room "destroy-$i" | sed 's/^/   /'
done
echo "   server RSS at the end: $(rss)"
