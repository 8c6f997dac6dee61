#!/usr/bin/env bash
# What the operator views' indexes cost the sends (BENCHMARKS.md): the same kep on two data
# dirs, one as migrated and one with the indexes each accepted message and hand-over adds
# to (messages_by_phone, outbox_by_uid) dropped.
#
#   bench/operator_indexes.sh     # needs wrk, jq, curl, python3; ROUNDS (3), DURATION (5s)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5s}

. bench/lib.sh
bench_init kep
write_send_lua "$WORK/send.lua"

SERVER=
start() { # $1: data dir; sets SERVER, MSG and TOKEN
  KEP_LOG=warn KEP_SIMULATOR_DELAY_MS=200 "$KEP" serve --data-dir "$1" --only messaging \
    --admin-addr 127.0.0.1:0 --messaging-addr 127.0.0.1:0 >/dev/null 2>&1 &
  SERVER=$!
  pids+=("$SERVER")
  for _ in $(seq 100); do [ -f "$1/addresses.json" ] && break; sleep 0.1; done
  MSG=http://$(jq -r .messaging "$1/addresses.json")
  local admin=http://$(jq -r .admin "$1/addresses.json") c
  c=$(curl -sf -XPOST -H "Authorization: Bearer $(cat "$1/admin-token")" -H 'content-type: application/json' \
    "$admin/admin/v1/messaging/clients" -d '{}')
  export TOKEN=$(curl -sf -u "$(jq -r .client_id <<<"$c"):$(jq -r .client_secret <<<"$c")" \
    -d grant_type=client_credentials "$MSG/v2/oauth/token" | jq -r .access_token)
}
stop() { kill -TERM "$SERVER"; wait "$SERVER" 2>/dev/null || true; pids=(); rm -f "$1/addresses.json"; }

# Both data dirs migrated; then the second loses the indexes.
for side in with without; do start "$WORK/$side"; stop "$WORK/$side"; done
python3 - "$WORK/without/messaging.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
for index in ("messages_by_phone", "outbox_by_uid"):
    db.execute(f"DROP INDEX {index}")
db.commit()
PY

# req/s, and kep's CPU µs per accepted send.
sends() {
  start "$WORK/$1"
  local t0 t1 out
  t0=$(cpu_ticks "$SERVER")
  out=$(wrk -t2 -c64 -d"$DURATION" -s "$WORK/send.lua" "$MSG" -- "$1$2" | awk '/requests in/ {n = $1} /Requests\/sec/ {print $2, n}')
  sleep 1 # the writer and the dispatcher finish what was accepted
  t1=$(cpu_ticks "$SERVER")
  stop "$WORK/$1"
  awk -v t=$(((t1 - t0) * TICK_US)) '{printf "%.0f req/s %.0f us", $1, t / $2}' <<<"$out"
}

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "== POST /v2/send/xms, wrk -t2 -c64 -d$DURATION: req/s, kep CPU per send; without | with the indexes"
# The order swaps every round (ABBA), so that the machine's drift hits both sides.
for r in $(seq "$ROUNDS"); do
  if ((r % 2)); then a=$(sends without "$r"); b=$(sends with "$r")
  else b=$(sends with "$r"); a=$(sends without "$r"); fi
  echo "   round $r: $a | $b"
done
