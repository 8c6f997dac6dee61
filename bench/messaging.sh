#!/usr/bin/env bash
# Messaging benchmarks (BENCHMARKS.md):
#  1. accepted POST /v2/send/xms per second (each answered only once stored), and whether the
#     delivery pipeline keeps up (messages still at status 100 after the run);
#  2. POST /v2/info/message/search p50/p99 for a one-day page of 1000 with 1,000,000 stored
#     messages.
#
#   bench/messaging.sh        # needs wrk, jq, curl; DURATION (10s), CONNS (64), ROWS (1000000)
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
ROWS=${ROWS:-1000000}

cargo build --release -q -p kep -p kep-bench
KEP=target/release/kep
DATA=$(mktemp -d)
SERVER=
cleanup() { [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; rm -rf "$DATA"; }
trap cleanup EXIT

start() {
  rm -f "$DATA/addresses.json"
  KEP_LOG=warn KEP_SIMULATOR_DELAY_MS=${SIM_MS:-200} $KEP serve --data-dir "$DATA" --only messaging \
    --admin-addr 127.0.0.1:0 --messaging-addr 127.0.0.1:0 >/dev/null 2>&1 &
  SERVER=$!
  for _ in $(seq 200); do [ -f "$DATA/addresses.json" ] && break; sleep 0.1; done
  ADMIN=http://$(jq -r .admin "$DATA/addresses.json"); MSG=http://$(jq -r .messaging "$DATA/addresses.json")
}
start
OP=$(cat "$DATA/admin-token")
C=$(curl -sf -XPOST -H "Authorization: Bearer $OP" -H 'content-type: application/json' "$ADMIN/admin/v1/messaging/clients" -d '{}')
export TOKEN=$(curl -sf -u "$(jq -r .client_id <<<"$C"):$(jq -r .client_secret <<<"$C")" -d grant_type=client_credentials "$MSG/v2/oauth/token" | jq -r .access_token)
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"

cat >"$DATA/send.lua" <<'LUA'
local counter = 0
local threads = 0
function setup(thread) thread:set("tid", threads); threads = threads + 1 end
function request()
  counter = counter + 1
  local body = '{"cid":"b' .. tid .. '-' .. counter .. '","message_type":"SM","phone_number":"821012345678","message":"bench","sender_no":"0212345678"}'
  return wrk.format("POST", "/v2/send/xms", {["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. os.getenv("TOKEN"), ["accept"] = "*/*"}, body)
end
function response(status) if status ~= 200 then io.stderr:write("status " .. status .. "\n") end end
LUA
echo "== POST /v2/send/xms, wrk -t2 -c$CONNS -d$DURATION (simulator delay ${SIM_MS:-200} ms)"
wrk -t2 -c"$CONNS" -d"$DURATION" --latency -s "$DATA/send.lua" "$MSG" 2>"$DATA/wrk.err" | grep -E "Requests/sec|requests in|50%|99%" | sed 's/^/   /'
sort "$DATA/wrk.err" | uniq -c | head -3 | sed 's/^/   non-200: /'
sleep 2
PENDING=$(sqlite3 "$DATA/messaging.db" "SELECT COUNT(*) FROM messages WHERE status = '100'" 2>/dev/null || echo "?")
TOTAL=$(sqlite3 "$DATA/messaging.db" "SELECT COUNT(*) FROM messages" 2>/dev/null || echo "?")
echo "   stored: $TOTAL; still at status 100 two seconds after the run: $PENDING"

# --- 2. search with 1,000,000 stored messages ---
kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=
CLIENT=$(jq -r .client_id <<<"$C")
NOW_MS=$(($(date +%s%3N)))
SPAN_MS=$((10 * 86400 * 1000))
STEP=$((SPAN_MS / ROWS))
START=$((NOW_MS - SPAN_MS))
echo "== inserting $ROWS messages over the last 10 days for one client"
T0=$(date +%s)
sqlite3 "$DATA/messaging.db" <<SQL
PRAGMA journal_mode=WAL;
WITH RECURSIVE seq(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM seq WHERE n < $ROWS - 1)
INSERT INTO messages (uid, client_id, cid, channel, message_type, phone_number, request, request_hash, status,
                      sms_status_code, next_attempt_at, reg_date, req_date, sent_date, res_date)
SELECT printf('%020d', ($START + n * $STEP) * 1000000 + n % 1000), '$CLIENT', 'bulk-' || n, 'XMS', 'SM', '821012345678',
       '{"cid":"bulk-' || n || '","message_type":"SM","phone_number":"821012345678","message":"bench","sender_no":"0212345678","etc1":"e' || (n % 10) || '"}',
       'bulk', '200', 'API_200', 0, $START + n * $STEP, $START + n * $STEP, $START + n * $STEP, $START + n * $STEP
FROM seq;
SQL
echo "   done in $(( $(date +%s) - T0 )) s; $(sqlite3 "$DATA/messaging.db" 'SELECT COUNT(*) FROM messages') rows"
start
cat >"$DATA/search.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"size":1000}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["accept"] = "*/*"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN")
function response(status) if status ~= 200 then io.stderr:write("status " .. status .. "\n") end end
LUA
ROWS_TODAY=$(curl -sf -XPOST -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' "$MSG/v2/info/message/search" -d '{"size":1000}' | jq '.results | length')
for c in 1 4; do
  echo "== POST /v2/info/message/search, today's first page ($ROWS_TODAY results of 1000 asked), wrk -t1 -c$c -d$DURATION"
  wrk -t1 -c$c -d"$DURATION" --latency -s "$DATA/search.lua" "$MSG/v2/info/message/search" 2>>"$DATA/wrk2.err" \
    | grep -E "Requests/sec|50%|99%" | sed 's/^/   /'
done
sort "$DATA/wrk2.err" | uniq -c | head -3 | sed 's/^/   non-200: /'
