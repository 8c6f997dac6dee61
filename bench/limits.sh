#!/usr/bin/env bash
# Limits under load (RELIABILITY.md, "Limits under load"): one release `kep serve` with all
# five listeners, flooded on all of them at once by `kep-bench flood` for DURATION_S seconds:
#   SLOW      slowloris connections per listener (a request head a byte a second, never done);
#   FAT       connections per listener sending 256 KiB of request head at once, never done;
#   STALLED   connections per listener that send a body at the listener's limit but for its
#             last byte, then nothing;
#   BODIES    connections per listener sending whole bodies at that limit, one after another;
# each reconnecting a second after kep lets go of one. The limits: 2 MiB on the operator API and
# the adapter's uploadResult (axum's default), 1 MiB on live and messaging, and on the
# gateway 10 MiB, the most it holds in memory (its limit is 20 MiB, spooled to disk past 10). Every second kep's RSS and open file
# descriptors are read from /proc, and one ordinary authenticated call per listener is made
# and timed. Each configuration in CONFIGS gets a fresh kep:
#   off       no connection cap, no head or body timeouts, no body memory, hyper's own head
#             limit of 408 KiB (how kep served before the limits);
#   defaults  the settings' defaults.
#
#   bench/limits.sh       # needs curl, jq; SLOW=800 FAT=200 STALLED=50 BODIES=2 DURATION_S=90
set -euo pipefail
cd "$(dirname "$0")/.."
SLOW=${SLOW:-800}
FAT=${FAT:-200}
STALLED=${STALLED:-50}
BODIES=${BODIES:-2}
SECONDS_=${DURATION_S:-90}
CONFIGS=${CONFIGS:-off defaults}

source bench/lib.sh
bench_init kep kep-bench
echo "== machine: $(machine)"
echo "== flood per listener: $SLOW slowloris, $FAT fat heads, $STALLED stalled bodies, $BODIES body senders; ${SECONDS_} s"
[ "${WAIT_QUIET:-1}" = 1 ] && wait_for_quiet

LISTENERS=(admin live adapter messaging gateway)

run_config() {
  local config=$1 data=$WORK/$1 env=(KEP_LOG=warn KEP_ADMIN_TOKEN=bench-operator)
  if [ "$config" = off ]; then
    for l in "${LISTENERS[@]}"; do
      local L=${l^^}
      env+=("KEP_${L}_MAX_CONNECTIONS=0" "KEP_${L}_HEADER_READ_TIMEOUT_S=0" "KEP_${L}_BODY_READ_TIMEOUT_S=0"
        "KEP_${L}_BODY_MEMORY_BYTES=0" "KEP_${L}_MAX_HEADER_BYTES=417792")
    done
  fi
  env "${env[@]}" "$KEP" serve --data-dir "$data" --admin-addr 127.0.0.1:0 --live-addr 127.0.0.1:0 --media-addr 127.0.0.1:0 \
    --adapter-addr 127.0.0.1:0 --messaging-addr 127.0.0.1:0 --gateway-addr 127.0.0.1:0 \
    >"$data.log" 2>&1 &
  local kep=$!
  pids+=("$kep")
  local admin live adapter messaging gateway
  admin=$(kep_url "$data" admin); live=$(kep_url "$data" live); adapter=$(kep_url "$data" adapter)
  messaging=$(kep_url "$data" messaging); gateway=$(kep_url "$data" gateway)
  api() { curl -sf -H "Authorization: Bearer bench-operator" -H 'content-type: application/json' "$@"; }

  # One client of each API, with its credentials.
  local svc token org org_id org_key client msg_token key
  svc=$(api -XPOST "$admin/admin/v1/live/services" -d '{"serviceId":"bench"}')
  token=$(curl -sf -H 'content-type: application/json' "$live/api/rpc" \
    -d '{"jsonrpc":"2.0","id":"1","method":"Provision","params":{"serviceId":"bench","scheme":"internal"}}' | jq -r .error.data.nonce)
  token=$(curl -sf -H 'content-type: application/json' "$live/api/rpc" -d "$(jq -nc --arg n "$token" \
    --arg v "$(printf '%s' "$(printf '%s' "bench:$(jq -r .adminSecret <<<"$svc")" | sha256sum | cut -d' ' -f1):$token" | sha256sum | cut -d' ' -f1)" \
    '{jsonrpc:"2.0",id:"1",method:"Provision",params:{serviceId:"bench",scheme:"internal",auth:{key:"bench",nonce:$n,value:$v}}}')" | jq -r .result.token)
  org=$(api -XPOST "$admin/admin/v1/adapter/org-login-types" -d '{"method":"OAUTH2","adapter_agent":"127.0.0.1:9"}')
  org_id=$(jq -r .id <<<"$org"); org_key=$(jq -r .secret_key <<<"$org")
  client=$(api -XPOST "$admin/admin/v1/messaging/clients" -d '{}')
  msg_token=$(curl -sf -u "$(jq -r .client_id <<<"$client"):$(jq -r .client_secret <<<"$client")" \
    -d grant_type=client_credentials "$messaging/v2/oauth/token" | jq -r .access_token)
  api -XPOST "$admin/admin/v1/serving/images" \
    -d "$(jq -nc --arg b "$BENCH" '{name: "upstream", command: [$b, "upstream"]}')" >/dev/null
  key=$(api -XPOST "$admin/admin/v1/serving/endpoints" -d '{"name":"bench","instance_count":1}' | jq -r .api_key)
  api -XPOST "$admin/admin/v1/serving/endpoints/bench/deployments" \
    -d '{"name":"d1","type":"custom-image","image":"upstream"}' >/dev/null
  deployment_when "$admin" bench d1 '.state == "Available"' >/dev/null
  local MiB=1048576
  local hostport
  # listener → flood arguments: the request, its credentials, the body at its limit.
  declare -A flood=(
    [admin]="--request 'PUT /admin/v1/adapter/org-login-types/999999' --header 'Authorization: Bearer bench-operator' --body-bytes $((2 * MiB))"
    [live]="--request 'POST /api/rpc' --header 'Authorization: Bearer $token' --body-bytes $MiB"
    [adapter]="--request 'POST /api/trust/drm/v0/uploadResult' --header 'Authorization: Secret $org_key' --header 'Kep-OrgLoginType: ID $org_id' --header 'Kep-AgentSession: DSID none' --header 'Kep-File-Id: f' --header 'Kep-File-Type: DRM' --body-bytes $((2 * MiB))"
    [messaging]="--request 'POST /v2/send/xms' --header 'Authorization: Bearer $msg_token' --body-bytes $MiB"
    [gateway]="--request 'POST /endpoints/bench/flood' --header 'Authorization: Bearer $key' --body-bytes $((10 * MiB))"
  )
  # listener → an ordinary call: curl arguments.
  declare -A probe=(
    [admin]="-H 'Authorization: Bearer bench-operator' $admin/admin/v1/live/services"
    [live]="-H 'Authorization: Bearer $token' -H 'content-type: application/json' -d '{\"jsonrpc\":\"2.0\",\"id\":\"1\",\"method\":\"Room.ListRooms\",\"params\":{}}' $live/api/rpc"
    [adapter]="-H 'Authorization: Secret $org_key' -H 'Kep-OrgLoginType: ID $org_id' $adapter/api/trust/login/v0/getOrgLoginType"
    [messaging]="-H 'Authorization: Bearer $msg_token' $messaging/v2/info/rcs/results"
    [gateway]="-H 'Authorization: Bearer $key' -H 'content-type: application/json' -d '{}' $gateway/endpoints/bench/probe"
  )
  local rss0 fds0
  rss0=$(awk '/VmRSS/ {print $2}' "/proc/$kep/status"); fds0=$(ls "/proc/$kep/fd" | wc -l)

  local floods=()
  for l in "${LISTENERS[@]}"; do
    hostport=$(jq -r ".$l" "$data/addresses.json")
    eval "\"$BENCH\" flood --addr $hostport ${flood[$l]} --slowloris $SLOW --fat-heads $FAT --stalled $STALLED --bodies $BODIES --seconds $SECONDS_" \
      >"$data.flood-$l.json" 2>"$data.flood-$l.err" &
    floods+=($!)
  done
  : >"$data.samples"; : >"$data.probes"
  local t probes=()
  for t in $(seq "$SECONDS_"); do
    echo "$(awk '/VmRSS/ {print $2}' "/proc/$kep/status") $(ls "/proc/$kep/fd" | wc -l)" >>"$data.samples"
    for l in "${LISTENERS[@]}"; do
      ( out=$(eval "curl -s -o /dev/null -m 30 -w '%{http_code} %{time_total}' ${probe[$l]}") || true
        echo "$l $t ${out:-000 30}" >>"$data.probes" ) &
      probes+=($!)
    done
    sleep 1
  done
  wait "${floods[@]}" "${probes[@]}" || true
  sleep 1

  echo "== $config: idle RSS $((rss0 / 1024)) MiB, $fds0 fds"
  awk '{ if ($1 > r) r = $1; if ($2 > f) f = $2 } END { printf "   peak during the flood: RSS %d MiB, %d open fds\n", r / 1024, f }' "$data.samples"
  awk 'NR % 10 == 0 { s = s sprintf(" %d/%d", $1 / 1024, $2) } END { print "   every 10 s, RSS MiB/fds:" s }' "$data.samples"
  for l in "${LISTENERS[@]}"; do
    # Ordinary calls during the flood: answered (2xx), and their latency.
    local lat n ok
    lat=$(awk -v l="$l" '$1 == l { printf "%.1f\n", $4 * 1000 }' "$data.probes" | sort -n)
    n=$(wc -l <<<"$lat"); ok=$(awk -v l="$l" '$1 == l && $3 ~ /^2/' "$data.probes" | wc -l)
    printf '   %-9s ordinary calls: %d/%d answered 2xx, p50 %s ms, max %s ms\n' "$l" "$ok" "$n" \
      "$(sed -n "$(((n + 1) / 2))p" <<<"$lat")" "$(tail -1 <<<"$lat")"
    jq -r 'to_entries | map("\(.key) \(.value.opened) (kep closed \(.value.closed_by_server)\(
        .value.statuses | to_entries | map(", \(.value)× \(.key)") | join("")))") | "      flood: " + join("; ")' \
      "$data.flood-$l.json"
  done
  cleanup
}

for c in $CONFIGS; do run_config "$c"; done
