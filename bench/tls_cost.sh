#!/usr/bin/env bash
# What TLS costs the live RPC and the messaging send (BENCHMARKS.md, issue #48): two kep
# servers side by side, one plain, one with --tls-self-signed, and the same calls to each in
# turn (keep-alive: the handshake is paid once per connection), ROUNDS times; ratios.
#
#   bench/tls_cost.sh        # needs wrk, jq, curl; DURATION (10s), CONNS (64), ROUNDS (2)
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
ROUNDS=${ROUNDS:-2}

source bench/lib.sh
bench_init kep
write_send_lua "$WORK/send.lua"
cat >"$WORK/rpc.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":"1","method":"Room.ListParticipants","params":{"version":"2.0","roomId":"r"}}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("LIVE_TOKEN")
LUA

declare -A live msg token live_token
for mode in plain tls; do
  DATA=$WORK/$mode
  mkdir -p "$DATA"
  extra=()
  [ "$mode" = tls ] && extra=(--tls-self-signed)
  serve_live_messaging "${extra[@]}"
  live[$mode]=$LIVE msg[$mode]=$MSG token[$mode]=$TOKEN
  live_token[$mode]=$("$KEP" live --data-dir "$DATA" provision --service-id bench \
    --admin-secret "$(jq -r .adminSecret <<<"$SVC")" 2>/dev/null | jq -r .token)
done
echo "== machine: $(machine)"
wait_for_quiet
RESULTS=$WORK/results
: >"$RESULTS"
run() { # CALL MODE
  local out
  case $1 in
    rpc) out=$(LIVE_TOKEN=${live_token[$2]} wrk -t2 -c"$CONNS" -d"$DURATION" --latency \
      -s "$WORK/rpc.lua" "${live[$2]}/api/rpc" | awk "$WRK_AWK") ;;
    send) out=$(TOKEN=${token[$2]} wrk -t2 -c"$CONNS" -d"$DURATION" --latency \
      -s "$WORK/send.lua" "${msg[$2]}" -- "$2-$r" | awk "$WRK_AWK") ;;
  esac
  read -r rps p50 p99 _ <<<"$out"
  printf '   %-4s %-5s %9s req/s  p50 %6s us  p99 %6s us\n' "$1" "$2" "$rps" "$p50" "$p99"
  echo "$1 $2 $rps $p50 $p99" >>"$RESULTS"
}
echo "   wrk -t2 -c$CONNS -d$DURATION (keep-alive), $ROUNDS rounds, plain and TLS in turn"
for r in $(seq "$ROUNDS"); do
  for call in rpc send; do run "$call" plain; run "$call" tls; done
done
echo "== summary: TLS / plain (req/s summed over rounds; p99 mean)"
awk '{ rps[$1, $2] += $3; p99[$1, $2] += $5; n[$1, $2]++; calls[$1] = 1 }
  END { for (c in calls) printf "   %s: throughput %.2f, p99 %.0f us vs %.0f us\n", c,
    rps[c, "tls"] / rps[c, "plain"], p99[c, "tls"] / n[c, "tls"], p99[c, "plain"] / n[c, "plain"] }' "$RESULTS"
