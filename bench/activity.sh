#!/usr/bin/env bash
# What a console client costs (BENCHMARKS.md): the messaging and live throughputs each event
# is made by, with and without an operator watching as the console does (GET
# /admin/v1/events, and /metrics scraped every second), in the same run.
# Runs alternate (without, with, with, without …) so that the machine's drift hits both.
#
#   bench/activity.sh        # needs wrk, jq, curl; ROUNDS (3), DURATION (5s), CONNS (64)
#   SCRAPE=0 bench/activity.sh   # the events stream alone, no /metrics scrapes
set -euo pipefail
[ -n "${TRACE:-}" ] && set -x
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5s}
CONNS=${CONNS:-64}

. bench/lib.sh
bench_init kep kep-bench
DATA=$WORK/data

serve_live_messaging
SECRET=$(jq -r .serviceSecret <<<"$SVC")
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"

WATCHER= SCRAPER=
watch_on() {
  curl -sN -H "Authorization: Bearer $OP" "$ADMIN/admin/v1/events${WATCH_QUERY:-}" >"$WORK/events" & WATCHER=$!
  if [ "${SCRAPE:-1}" = 1 ]; then
    while sleep 1; do curl -sf "$ADMIN/metrics" >"$WORK/metrics" || true; done & SCRAPER=$!
  fi
  sleep 0.2
}
watch_off() {
  echo "   watcher (curl) CPU: $(awk "{print (\$14+\$15)/100}" /proc/$WATCHER/stat) s" >&2
  kill $WATCHER $SCRAPER 2>/dev/null || true; wait $WATCHER $SCRAPER 2>/dev/null || true; WATCHER= SCRAPER=
}

write_send_lua "$WORK/send.lua"
# req/s, and kep's CPU µs per accepted send (its own cost, whatever else shares the cores).
sends() {
  local t0 t1 out
  t0=$(cpu_ticks "$SERVER")
  out=$(wrk -t2 -c"$CONNS" -d"$DURATION" -s "$WORK/send.lua" "$MSG" -- "$1" | awk '/requests in/ {n = $1} /Requests\/sec/ {print $2, n}')
  t1=$(cpu_ticks "$SERVER")
  awk -v t=$(((t1 - t0) * TICK_US)) '{printf "%.0f req/s %.0f us", $1, t / $2}' <<<"$out"
}
# 5,000 participants joining 10 rooms (each join is an event, and each room's opening),
# then leaving: JOINED is the seconds until all were in. (Not in a $(…): the hold is this
# shell's child, so that it can be stopped and waited for.)
joins() {
  local out=$WORK/hold-$1 line
  mkfifo "$out"
  $BENCH hold --live "$LIVE" --service-id bench --service-secret "$SECRET" --rooms 10 --per-room 500 \
    --prefix "$1" >"$out" &
  local hold=$!
  read -r line <"$out"
  kill -TERM "$hold"; wait "$hold" 2>/dev/null || true
  JOINED=$(awk '{print $(NF-1)}' <<<"$line")
}

echo "== POST /v2/send/xms (wrk -t2 -c$CONNS -d$DURATION: req/s, kep's CPU per send), and 5,000 joins (s), without | with a console's watching (events and scrapes)"
# Without and with swap places every round (ABBA): each run grows the database the next
# one writes to, so a fixed order would favour the side that goes first.
without() { off=$(sends "off$r"); joins "off$r"; j_off=$JOINED; }
with() { watch_on; on=$(sends "on$r"); joins "on$r"; j_on=$JOINED; watch_off; }
for r in $(seq "$ROUNDS"); do
  if ((r % 2)); then without; with; else with; without; fi
  echo "   round $r: sends $off | $on; joins $j_off | $j_on s; events streamed: $(grep -c '^id:' "$WORK/events"), missed: $(awk -F: '/^data: {"missed"/ {n += $3} END {print n + 0}' "$WORK/events")"
done
