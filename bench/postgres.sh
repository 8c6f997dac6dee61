#!/usr/bin/env bash
# PostgreSQL beside SQLite (BENCHMARKS.md, issue #21), in one run:
#  1. accepted POST /v2/send/xms per second with the messaging state in SQLite and in
#     PostgreSQL (a throwaway cluster on this machine, with its default durability: it
#     shares the cores with kep and wrk); each round a fresh server and database, the sides
#     swapping every round;
#  2. POST /v2/info/message/search p50/p99 for a one-day page of 1000 with 1,000,000 stored
#     messages, on each backend.
#
#   bench/postgres.sh   # needs wrk, jq, curl, Debian's postgresql; ROUNDS (4), DURATION
#                       # (10s), CONNS (64), ROWS (1000000)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-4}
DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
ROWS=${ROWS:-1000000}

. bench/lib.sh
bench_init kep
write_send_lua "$WORK/send.lua"

# A throwaway PostgreSQL, as ./test starts one (initdb as `postgres` when root).
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
PG_DIR=$WORK/pg
mkdir -p "$PG_DIR"
AS=()
if [ "$(id -u)" = 0 ]; then
  chmod 755 "$WORK"
  chown postgres "$PG_DIR"
  AS=(runuser -u postgres --)
fi
PG_PORT=$(free_port)
"${AS[@]}" "$PG_BIN/initdb" -D "$PG_DIR/data" -A trust -U postgres >/dev/null
"${AS[@]}" "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/log" -w \
  -o "-p $PG_PORT -k $PG_DIR -c listen_addresses=127.0.0.1" start >/dev/null
PG_PID=$(head -1 "$PG_DIR/data/postmaster.pid")
trap 'cleanup; kill -INT "$PG_PID"; while kill -0 "$PG_PID" 2>/dev/null; do sleep 0.1; done; rm -rf "$WORK"' EXIT
psql_() { psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -qAt "$@"; }
echo "== machine: $(machine); PostgreSQL $("$PG_BIN/postgres" --version | cut -d' ' -f3)"

# serve NAME BACKEND: `kep serve --only messaging` with its data in $WORK/NAME, on SQLite
# or on database NAME of the cluster; sets SERVER and MSG, and exports TOKEN of a new
# client (its id in CLIENT).
serve() {
  local data=$WORK/$1 url=()
  if [ "$2" = postgres ]; then
    psql_ -d postgres -c "CREATE DATABASE $1" 2>/dev/null || true
    url=(--database-url "postgres://postgres@127.0.0.1:$PG_PORT/$1")
  fi
  rm -f "$data/addresses.json"
  KEP_LOG=warn KEP_SIMULATOR_DELAY_MS=200 KEP_ADMIN_TOKEN=bench-operator "$KEP" serve \
    --data-dir "$data" --only messaging --admin-addr 127.0.0.1:0 \
    --messaging-addr 127.0.0.1:0 "${url[@]}" >"$data.log" 2>&1 &
  SERVER=$!
  pids+=("$SERVER")
  local admin
  admin=$(kep_url "$data" admin)
  MSG=$(kep_url "$data" messaging)
  if [ -z "${KEEP_CLIENT:-}" ]; then
    local c
    c=$(curl -sf -XPOST -H "Authorization: Bearer bench-operator" \
      -H 'content-type: application/json' "$admin/admin/v1/messaging/clients" -d '{}')
    CLIENT=$(jq -r .client_id <<<"$c")
    TOKEN=$(curl -sf -u "$CLIENT:$(jq -r .client_secret <<<"$c")" \
      -d grant_type=client_credentials "$MSG/v2/oauth/token" | jq -r .access_token)
    export TOKEN
  fi
}

stop() {
  kill -TERM "$SERVER"
  wait "$SERVER" 2>/dev/null || true
}

declare -A RPS P99
for side in sqlite postgres; do RPS[$side]=""; P99[$side]=""; done
echo "== 1. POST /v2/send/xms, wrk -t2 -c$CONNS -d$DURATION, $ROUNDS rounds (simulator 200 ms)"
for round in $(seq "$ROUNDS"); do
  if ((round % 2)); then order="sqlite postgres"; else order="postgres sqlite"; fi
  for side in $order; do
    wait_for_quiet
    serve "send_${side}_$round" "$side"
    read -r rps p50 p99 n < <(wrk -t2 -c"$CONNS" -d"$DURATION" --latency -s "$WORK/send.lua" \
      "$MSG" -- "r$round" | awk "$WRK_AWK")
    stop
    printf '   round %d %-8s %9.0f req/s  p50 %6.1f ms  p99 %6.1f ms  (%d sent)\n' \
      "$round" "$side" "$rps" "$(bc -l <<<"$p50/1000")" "$(bc -l <<<"$p99/1000")" "$n"
    RPS[$side]+="$rps "
    P99[$side]+="$p99 "
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
S=$(median <<<"${RPS[sqlite]}")
P=$(median <<<"${RPS[postgres]}")
printf '   median: SQLite %.0f req/s, PostgreSQL %.0f req/s: PostgreSQL/SQLite = %.2f\n' \
  "$S" "$P" "$(bc -l <<<"$P/$S")"

# --- 2. search with 1,000,000 stored messages, on each backend ---
NOW_MS=$(date +%s%3N)
SPAN_MS=$((10 * 86400 * 1000))
STEP=$((SPAN_MS / ROWS))
START=$((NOW_MS - SPAN_MS))
REQUEST="'{\"cid\":\"bulk-' || n || '\",\"message_type\":\"SM\",\"phone_number\":\"821012345678\",\"message\":\"bench\",\"sender_no\":\"0212345678\",\"etc1\":\"e' || (n % 10) || '\"}'"
cat >"$WORK/search.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"size":1000}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN")
LUA
for side in sqlite postgres; do
  serve "search_$side" "$side"
  echo "== 2. $side: inserting $ROWS messages over the last 10 days for one client"
  T0=$(date +%s)
  if [ "$side" = sqlite ]; then
    stop
    sqlite3 "$WORK/search_sqlite/messaging.db" <<SQL
WITH RECURSIVE seq(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM seq WHERE n < $ROWS - 1)
INSERT INTO messages (uid, client_id, cid, channel, message_type, phone_number, request, request_hash,
                      status, sms_status_code, next_attempt_at, reg_date, req_date, sent_date, res_date)
SELECT printf('%020d', ($START + n * $STEP) * 1000000 + n % 1000), '$CLIENT', 'bulk-' || n, 'XMS', 'SM',
       '821012345678', $REQUEST, 'bulk', '200', 'API_200', 0, $START + n * $STEP, $START + n * $STEP,
       $START + n * $STEP, $START + n * $STEP
FROM seq;
SQL
    KEEP_CLIENT=1 serve "search_$side" "$side"
  else
    psql_ -d "search_$side" <<SQL
INSERT INTO kep_messaging.messages (uid, client_id, cid, channel, message_type, phone_number, request,
       request_hash, status, sms_status_code, next_attempt_at, reg_date, req_date, sent_date, res_date)
SELECT lpad((($START + n * $STEP) * 1000000 + n % 1000)::text, 20, '0'), '$CLIENT', 'bulk-' || n, 'XMS',
       'SM', '821012345678', $REQUEST, 'bulk', '200', 'API_200', 0, $START + n * $STEP,
       $START + n * $STEP, $START + n * $STEP, $START + n * $STEP
FROM generate_series(0, $ROWS - 1) n;
ANALYZE kep_messaging.messages;
SQL
  fi
  echo "   done in $(($(date +%s) - T0)) s"
  TODAY=$(curl -sf -XPOST -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' \
    "$MSG/v2/info/message/search" -d '{"size":1000}' | jq '.results | length')
  for c in 1 4; do
    wait_for_quiet
    read -r rps p50 p99 n < <(wrk -t1 -c$c -d"$DURATION" --latency -s "$WORK/search.lua" \
      "$MSG/v2/info/message/search" | awk "$WRK_AWK")
    printf '   %s, today'"'"'s page (%d rows), %d connection(s): p50 %.1f ms, p99 %.1f ms (%.0f req/s)\n' \
      "$side" "$TODAY" "$c" "$(bc -l <<<"$p50/1000")" "$(bc -l <<<"$p99/1000")" "$rps"
  done
  stop
done
