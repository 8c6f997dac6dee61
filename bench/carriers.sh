#!/usr/bin/env bash
# Carrier benchmarks (BENCHMARKS.md, issue #22), over SMPP 3.4 on loopback. The SMSC is a sink
# (`kep smsc --quiet`: kep-smpp's small SMSC, recording and printing nothing per submit) that
# acknowledges every submit_sm and sends its DELIVRD receipt at once.
#  a. kep's ESME alone (`kep-bench esme-submit`, a `kep_smpp::Esme`: one bind, window 64)
#     submits N Korean SMS to the sink: submit_sm/s. Beside it, smpplib as its users write it
#     (bench/smpplib_submit.py: one submit_sm, then its resp) submits JASMIN_N, when installed,
#     and again with TCP_NODELAY set (smpplib leaves Nagle's algorithm on).
#  b. End to end: N SMS through `POST /v2/send/xms` (wrk -t2 -c$CONNS, each thread stopping at
#     its share of N) to `kep serve --only messaging` whose one carrier is the sink (kind smpp,
#     window 64), from the first message accepted (its reg_date) to the last one final (its
#     res_date), every one 200. Beside it, in the same round, the same with the carrier
#     simulator (no carrier configured; 200 ms a hand-over, as bench/messaging.sh): the
#     reference. Rounds alternate which side goes first. kep's, the sink's and wrk's CPU per
#     message tell where the two cores went.
#  c. Against Jasmin 0.11.0, when jasmind.py is on PATH: started exactly as the messaging tests
#     start theirs, by their fixture (`kep-bench jasmin`, built with its feature `jasmin`,
#     which includes crates/kep-messaging/tests/it/jasmin/). JASMIN_N SMS submitted by kep's
#     ESME, by smpplib and by smpplib with TCP_NODELAY, one after the other, each waiting for
#     Jasmin's receipts (ACCEPTD) of all its messages before the next begins.
#
#   bench/carriers.sh    # needs wrk, jq, curl, sqlite3; N (100000), ROUNDS (2), CONNS (64),
#                        # JASMIN_N (2000); smpplib (pip) for smpplib's rows; WAIT_QUIET (1);
#                        # KEP_BIN: another kep to run in b (a build with a change, say);
#                        # PARTS (a b c): which parts to run
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-100000}
ROUNDS=${ROUNDS:-2}
CONNS=${CONNS:-64}
JASMIN_N=${JASMIN_N:-2000}
PARTS=${PARTS:-a b c}
WINDOW=64

. bench/lib.sh
bench_init kep kep-bench
# The sink is this tree's `kep smsc`, whichever kep b runs.
cp "$KEP" "$WORK/kep-smsc"
if [ -n "${KEP_BIN:-}" ]; then cp "$KEP_BIN" "$WORK/kep"; fi

# Jasmin (c): the featured kep-bench, built after the plain one was copied.
JASMIND=$(command -v jasmind.py || true)
JASMIN_SKIP=
if [[ " $PARTS " != *" c "* ]]; then
  JASMIN_SKIP="not asked for (PARTS=$PARTS)"
elif [ -z "$JASMIND" ]; then
  JASMIN_SKIP="jasmind.py is not on PATH: \`./test\` installs Jasmin 0.11.0 into .venv/jasmin; then PATH=\$PWD/.venv/bin:\$PWD/.venv/jasmin/bin:\$PATH bench/carriers.sh"
elif cargo build --release -q -p kep-bench --features jasmin; then
  cp "${CARGO_TARGET_DIR:-target}/release/kep-bench" "$WORK/kep-bench-jasmin"
else
  JASMIN_SKIP="kep-bench --features jasmin does not build (has the fixture crates/kep-messaging/tests/it/jasmin/ changed?)"
fi
# smpplib: in Jasmin's virtual environment, or the python3 on PATH.
PY=
for p in "$(dirname "${JASMIND:-/nonexistent/x}")/python3" python3; do
  if "$p" -c 'import smpplib' 2>/dev/null; then PY=$p; break; fi
done

# forget PID: out of lib.sh's `pids`, once it has ended.
forget() {
  local p keep=()
  for p in "${pids[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
  pids=("${keep[@]}")
}
# stop PID: SIGTERM, and wait for it (lib.sh's cleanup takes the others at exit).
stop() {
  kill -TERM "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  forget "$1"
}

# start_sink OUT: the sink on a free port; sets SINK (its pid) and SINK_PORT.
start_sink() {
  "$WORK/kep-smsc" smsc --port 0 --quiet >"$1" &
  SINK=$!
  pids+=("$SINK")
  for _ in $(seq 100); do grep -q '^ready' "$1" 2>/dev/null && break; sleep 0.05; done
  SINK_PORT=$(awk '/^ready/ {print $2}' "$1")
  [ -n "$SINK_PORT" ] || { echo "the SMSC sink did not start" >&2; exit 1; }
}

# descendants PID: every process under it (Jasmin's Redis, jasmind, RabbitMQ and its epmd).
descendants() {
  local c
  for c in $(pgrep -P "$1" || true); do echo "$c"; descendants "$c"; done
}

quiet() { if [ "${WAIT_QUIET:-1}" = 1 ]; then wait_for_quiet; fi; }

smpplib_name() { echo "smpplib 2.2, one submit_sm at a time${1:+, TCP_NODELAY set}"; }

# A wrk script of `POST /v2/send/xms`, each a new cid; each thread sends its share of N
# (wrk's arguments after `--`: the run's name, N, the threads) and stops once all are
# answered. The share is taken in delay(), which runs before each request is made.
cat >"$WORK/send.lua" <<'LUA'
taken, answered = 0, 0
local threads = 0
function setup(thread) thread:set("tid", threads); threads = threads + 1 end
function init(args)
  run = args[1]
  local n, t = tonumber(args[2]), tonumber(args[3])
  share = math.floor(n / t) + ((tid < n % t) and 1 or 0)
  counter = 0
end
function delay()
  if taken >= share then return 3600000 end
  taken = taken + 1
  return 0
end
function request()
  counter = counter + 1
  local body = '{"cid":"' .. run .. '-' .. tid .. '-' .. counter .. '","message_type":"SM","phone_number":"821012345678","message":"안녕하세요, kep 통신사 벤치마크 메시지입니다.","sender_no":"0212345678"}'
  return wrk.format("POST", "/v2/send/xms", {["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. os.getenv("TOKEN")}, body)
end
function response(status)
  if status ~= 200 then io.stderr:write("status " .. status .. "\n") end
  answered = answered + 1
  if answered >= share then wrk.thread:stop() end
end
LUA

echo "== machine: $(machine)"

# --- a. kep's ESME against the sink ---
A_ROWS=()
if [[ " $PARTS " == *" a "* ]]; then
  quiet
  echo "== a. kep's ESME against the sink: $N submit_sm over one bind, window $WINDOW"
  start_sink "$WORK/sink-a.out"
  for r in $(seq "$ROUNDS"); do
    s0=$(cpu_ticks "$SINK")
    out=$("$BENCH" esme-submit --port "$SINK_PORT" --messages "$N" --window "$WINDOW")
    s1=$(cpu_ticks "$SINK")
    echo "   round $r: $out"
    A_ROWS+=("$(jq -r --argjson sink_us $(((s1 - s0) * TICK_US)) \
      '"| kep ESME (`kep_smpp::Esme`), window 64 | \(.messages) | \(.per_s | floor) | \(.seconds * 1000 | floor) ms | \(.receipts) | \(.cpu_s * 1e6 / .messages | . * 10 | floor / 10) | \($sink_us / .messages | . * 10 | floor / 10) |"' <<<"$out")")
  done
  if [ -n "$PY" ]; then
    for nodelay in "" --nodelay; do
      s0=$(cpu_ticks "$SINK")
      out=$(/usr/bin/env time -f '%U %S' -o "$WORK/py.time" "$PY" bench/smpplib_submit.py 127.0.0.1 "$SINK_PORT" kep secret --messages "$JASMIN_N" $nodelay)
      s1=$(cpu_ticks "$SINK")
      echo "   smpplib $nodelay: $out"
      A_ROWS+=("$(jq -r --argjson sink_us $(((s1 - s0) * TICK_US)) --argjson cpu "$(awk '{print $1 + $2}' "$WORK/py.time")" --arg what "$(smpplib_name "$nodelay")" \
        '"| \($what) | \(.messages) | \(.per_s | floor) | \(.seconds * 1000 | floor) ms | \(.receipts) | \($cpu * 1e6 / .messages | floor) | \($sink_us / .messages | . * 10 | floor / 10) |"' <<<"$out")")
    done
  else
    echo "   smpplib: not installed (pip install smpplib): its rows are skipped"
fi
stop "$SINK"
echo "   sink: $(tail -1 "$WORK/sink-a.out")"
fi

# --- b. end to end ---
# e2e SIDE ROUND: N sends through kep with SIDE's carrier (smpp: the sink; simulator), until
# every message is final; sets LINE to "side messages at_200 accepted/s e2e/s kep_us sink_us
# wrk_us sink_submits seconds".
e2e() {
  local side=$1 data=$WORK/$1-$2 cfg=() sink_out=
  mkdir -p "$data"
  SINK=
  if [ "$side" = smpp ]; then
    sink_out=$data/sink.out
    start_sink "$sink_out"
    cat >"$data/kep.toml" <<TOML
[[messaging.carriers]]
name = "sink"
kind = "smpp"
host = "127.0.0.1"
port = $SINK_PORT
system_id = "kep"
password = "secret"
window = $WINDOW
source_addr = "1588"
TOML
    cfg=(--config "$data/kep.toml")
  fi
  KEP_LOG=warn KEP_SIMULATOR_DELAY_MS=200 "$KEP" serve "${cfg[@]}" --data-dir "$data" --only messaging \
    --admin-addr 127.0.0.1:0 --messaging-addr 127.0.0.1:0 >"$data/kep.log" 2>&1 &
  local server=$!
  pids+=("$server")
  local admin msg op c
  admin=$(kep_url "$data" admin)
  msg=$(kep_url "$data" messaging)
  op=$(cat "$data/admin-token")
  c=$(curl -sf -XPOST -H "Authorization: Bearer $op" -H 'content-type: application/json' \
    "$admin/admin/v1/messaging/clients" -d '{}')
  TOKEN=$(curl -sf -u "$(jq -r .client_id <<<"$c"):$(jq -r .client_secret <<<"$c")" \
    -d grant_type=client_credentials "$msg/v2/oauth/token" | jq -r .access_token)
  export TOKEN
  local state=
  for _ in $(seq 100); do
    state=$(curl -sf -H "Authorization: Bearer $op" "$admin/admin/v1/messaging/carriers" | jq -r '.[0].state')
    [ "$state" = up ] && break
    sleep 0.1
  done
  [ "$state" = up ] || { echo "kep's first carrier is $state" >&2; exit 1; }

  local db=$data/messaging.db k0 k1 s0=0 s1=0 w=0 total=0 pending=1 began
  k0=$(cpu_ticks "$server")
  [ -n "$SINK" ] && s0=$(cpu_ticks "$SINK")
  began=$(date +%s)
  wrk -t2 -c"$CONNS" -d3600s -s "$WORK/send.lua" "$msg" -- "$side$2" "$N" 2 >"$data/wrk.out" 2>"$data/wrk.err" &
  local wrk=$!
  pids+=("$wrk")
  # Every 0.1 s: how many are stored, how many still at 100. wrk is stopped once N are
  # stored (its threads stopped at their shares, but wrk itself would sleep out its -d).
  while :; do
    sleep 0.1
    read -r total pending < <(sqlite3 "$db" "SELECT COUNT(*) FROM messages; SELECT COUNT(*) FROM messages WHERE status = '100';" 2>/dev/null | paste -sd' ') || true
    if [ -n "$wrk" ] && { [ "${total:-0}" -ge "$N" ] || ! kill -0 "$wrk" 2>/dev/null; }; then
      w=$(cpu_ticks "$wrk" 2>/dev/null || echo 0)
      kill -INT "$wrk" 2>/dev/null || true
      wait "$wrk" 2>/dev/null || true
      forget "$wrk"
      wrk=
    fi
    [ -z "$wrk" ] && [ "${pending:-1}" = 0 ] && break
    if (($(date +%s) - began > 600)); then
      echo "   $side: $total of $N stored, $pending still at 100 after 600 s" >&2
      break
    fi
  done
  k1=$(cpu_ticks "$server")
  local sink_submits=-
  if [ -n "$SINK" ]; then
    s1=$(cpu_ticks "$SINK")
    stop "$SINK"
    sink_submits=$(tail -1 "$sink_out" | jq .submits)
  fi
  stop "$server"
  if [ -s "$data/wrk.err" ]; then sort "$data/wrk.err" | uniq -c | head -3 | sed "s/^/   $side non-200: /"; fi
  LINE=$(sqlite3 -separator ' ' "$db" "SELECT COUNT(*), SUM(status = '200'), MIN(reg_date), MAX(reg_date), MAX(res_date) FROM messages" |
    awk -v side="$side" -v kep=$(((k1 - k0) * TICK_US)) -v sink=$(((s1 - s0) * TICK_US)) -v wrk_us=$((w * TICK_US)) -v submits="$sink_submits" '
      { n = $1; ok = $2; first = $3; last_in = $4; last_out = $5 }
      END { printf "%s %d %d %.0f %.0f %.1f %s %.1f %s %.2f\n", side, n, ok, n * 1000 / (last_in - first), n * 1000 / (last_out - first),
              kep / n, (side == "smpp" ? sprintf("%.1f", sink / n) : "-"), wrk_us / n, submits, (last_out - first) / 1000 }')
}

B_ROWS=()
declare -A E2E_SUM=()
if [[ " $PARTS " == *" b "* ]]; then
  quiet
  echo "== b. end to end: $N SMS through POST /v2/send/xms (wrk -t2 -c$CONNS) to the last status 200"
  echo "   side messages at_200 accepted/s end_to_end/s kep_us/msg sink_us/msg wrk_us/msg sink_submits seconds"
  for r in $(seq "$ROUNDS"); do
    if ((r % 2)); then order=(smpp simulator); else order=(simulator smpp); fi
    for side in "${order[@]}"; do
      quiet
      e2e "$side" "$r"
      echo "   round $r: $LINE"
      read -r s n ok acc e2e kep_us sink_us wrk_us submits secs <<<"$LINE"
      E2E_SUM[$side]=$(awk -v a="${E2E_SUM[$side]:-0}" -v b="$e2e" 'BEGIN { print a + b }')
      B_ROWS+=("| $r | $s | $n | $ok | $acc | **$e2e** | $secs s | $kep_us | $sink_us | $wrk_us | $submits |")
    done
  done
fi

# --- c. Jasmin ---
C_ROWS=()
if [ -n "$JASMIN_SKIP" ]; then
  echo "== c. against Jasmin: skipped: $JASMIN_SKIP"
else
  quiet
  echo "== c. against Jasmin ($JASMIND): $JASMIN_N SMS by kep's ESME, then by smpplib (without, with TCP_NODELAY)"
  "$WORK/kep-bench-jasmin" jasmin >"$WORK/jasmin.out" 2>"$WORK/jasmin.err" &
  JAS=$!
  pids+=("$JAS")
  for _ in $(seq 1200); do grep -q '^ready' "$WORK/jasmin.out" 2>/dev/null && break; kill -0 "$JAS" 2>/dev/null || break; sleep 0.1; done
  if ! read -r _ JPORT JUSER JPASS < <(grep '^ready' "$WORK/jasmin.out"); then
    echo "   Jasmin did not start: skipped"
    tail -20 "$WORK/jasmin.err" | sed 's/^/   /'
  else
    jasmin_cpu() { cpu_ticks $(descendants "$JAS"); }
    clients=(kep)
    [ -n "$PY" ] && clients+=(smpplib smpplib--nodelay) || echo "   smpplib: not installed (pip install smpplib): its runs are skipped"
    for client in "${clients[@]}"; do
      j0=$(jasmin_cpu)
      if [ "$client" = kep ]; then
        out=$("$BENCH" esme-submit --port "$JPORT" --system-id "$JUSER" --password "$JPASS" \
          --messages "$JASMIN_N" --window "$WINDOW" --receipt-wait-s 900)
        what="kep ESME (\`kep_smpp::Esme\`), window 64"
      else
        nodelay=${client#smpplib}
        out=$("$PY" bench/smpplib_submit.py 127.0.0.1 "$JPORT" "$JUSER" "$JPASS" --messages "$JASMIN_N" --receipt-wait-s 900 $nodelay)
        what=$(smpplib_name "$nodelay")
      fi
      j1=$(jasmin_cpu)
      echo "   $client: $out"
      C_ROWS+=("$(jq -r --arg what "$what" --argjson jas_us $(((j1 - j0) * TICK_US)) \
        '"| \($what) | \(.messages) | **\(.per_s | floor)** | \(.seconds * 10 | floor / 10) s | \(.receipts) in \(.receipts_seconds // 0 | . * 10 | floor / 10) s | \(if .receipts_seconds then (.receipts / .receipts_seconds | floor) else "-" end) | \($jas_us / .messages / 1000 | . * 100 | floor / 100) ms |"' <<<"$out")")
    done
  fi
  stop "$JAS"
fi

echo
echo "== results ($(date +%F), $(nproc) cores)"
if [ ${#A_ROWS[@]} -gt 0 ]; then
  echo
  echo "a. submit_sm to the sink, one bind:"
  echo
  echo "| client | messages | submit_sm/s | time | receipts | client CPU µs/msg | sink CPU µs/msg |"
  echo "|---|---:|---:|---:|---:|---:|---:|"
  printf '%s\n' "${A_ROWS[@]}"
fi
if [ ${#B_ROWS[@]} -gt 0 ]; then
  echo
  echo "b. end to end, POST /v2/send/xms to the last status 200 (wrk -t2 -c$CONNS):"
  echo
  echo "| round | carrier | messages | at 200 | accepted/s | end to end/s | first accept → last 200 | kep CPU µs/msg | sink µs/msg | wrk µs/msg | submit_sm at the sink |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  printf '%s\n' "${B_ROWS[@]}"
  awk -v s="${E2E_SUM[smpp]}" -v m="${E2E_SUM[simulator]}" -v r="$ROUNDS" 'BEGIN {
    printf "\nmean end to end: SMPP sink %.0f/s, simulator %.0f/s; SMPP / simulator **%.2f** (goal: >= 10,000/s end to end)\n", s / r, m / r, s / m }'
fi
if [ ${#C_ROWS[@]} -gt 0 ]; then
  echo
  echo "c. against Jasmin, one bind each:"
  echo
  echo "| client | messages | submit_sm/s | to the last submit_sm_resp | receipts (ACCEPTD) | receipts/s | Jasmin CPU per msg |"
  echo "|---|---:|---:|---:|---:|---:|---:|"
  printf '%s\n' "${C_ROWS[@]}"
fi
