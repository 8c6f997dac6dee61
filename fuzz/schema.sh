#!/usr/bin/env bash
# Schema fuzzing: schemathesis against the OpenAPI document of every REST surface of a real
# `kep serve` (RELIABILITY.md, "Schema fuzzing"): no 5xx, no answer outside its documented
# statuses, content types and schemas, no hang. Needs python3 with schemathesis 4
# (`python3 -m pip install schemathesis`); nothing outside this machine.
#
#   bash fuzz/schema.sh                       # the default budget
#   SCHEMA_EXAMPLES=500 SCHEMA_SEED=42 bash fuzz/schema.sh
#
# KEP_BIN          the kep binary (default: $CARGO_TARGET_DIR/debug/kep, or target/debug/kep;
#                  built with `cargo build -p kep` when that default is missing)
# SCHEMA_EXAMPLES  cases generated per operation in each phase (default 200: about 2.5 minutes
#                  on a 2-core VM)
# SCHEMA_SEED      schemathesis' random seed (default: a new one, printed)
# SCHEMA_SURFACES  which documents, in order (default: live adapter messaging admin; the
#                  operator document goes last, since it may delete what the others use)
# SCHEMA_KEEP      set: keep the work dir (server log, schemathesis logs and reports)
# SCHEMA_EXTRA     more `schemathesis run` options, e.g. "--report har"
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

if [[ -n ${KEP_BIN:-} ]]; then
  kep=$KEP_BIN
else
  kep=${CARGO_TARGET_DIR:-$root/target}/debug/kep
  if [[ ! -x $kep ]]; then
    echo "schema: building $kep" >&2
    cargo build --quiet -p kep
  fi
fi
[[ -x $kep ]] || { echo "schema: no kep binary at $kep" >&2; exit 2; }
command -v schemathesis >/dev/null || {
  echo "schema: schemathesis is not installed (python3 -m pip install schemathesis)" >&2
  exit 2
}
examples=${SCHEMA_EXAMPLES:-200}
seed=${SCHEMA_SEED:-$((RANDOM * 32768 + RANDOM))}
surfaces=${SCHEMA_SURFACES:-live adapter messaging admin}

work=$(mktemp -d "${TMPDIR:-/tmp}/kep-schema.XXXXXX")
server_pid=
cleanup() {
  local rc=$?
  if [[ -n $server_pid ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  if [[ $rc -ne 0 && -f $work/serve.log ]]; then
    echo "schema: the server log's last lines:" >&2
    tail -n 40 "$work/serve.log" >&2 || true
  fi
  if [[ -n ${SCHEMA_KEEP:-} ]]; then
    echo "schema: kept $work" >&2
  else
    rm -rf "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- a real server, every listener on a free port of 127.0.0.1 -------------------------------
data=$work/data
KEP_ADMIN_ADDR=127.0.0.1:0 KEP_LIVE_ADDR=127.0.0.1:0 KEP_LIVE_MEDIA_ADDR=127.0.0.1:0 KEP_ADAPTER_ADDR=127.0.0.1:0 \
  KEP_MESSAGING_ADDR=127.0.0.1:0 KEP_GATEWAY_ADDR=127.0.0.1:0 \
  KEP_SIMULATOR_DELAY_MS=20 KEP_SERVING_TERMINATION_GRACE_S=1 \
  "$kep" serve --data-dir "$data" >"$work/serve.log" 2>&1 &
server_pid=$!
for _ in $(seq 300); do
  [[ -s $data/addresses.json ]] && break
  kill -0 "$server_pid" 2>/dev/null || { echo "schema: kep serve exited" >&2; exit 1; }
  sleep 0.1
done
[[ -s $data/addresses.json ]] || { echo "schema: kep serve did not start" >&2; exit 1; }

# The value of `key` in the JSON document on stdin.
field() { python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
addr() { field "$1" <"$data/addresses.json"; }
admin=http://$(addr admin)
live=http://$(addr live)
adapter=http://$(addr adapter)
messaging=http://$(addr messaging)
op_token=$(cat "$data/admin-token")

# An operator call; its JSON answer (an HTTP error fails the script).
operator() {
  curl -sSf -X "$1" "$admin$2" -H "Authorization: Bearer $op_token" \
    -H 'content-type: application/json' ${3:+-d "$3"}
}

# --- credentials for each surface, and something to find, made through the operator API -----
# live: a service, then the two-step Provision for an admin token.
admin_secret=$(operator POST /admin/v1/live/services '{"serviceId":"fuzz"}' | field adminSecret)
rpc() { curl -sSf "$live/api/rpc" -H 'content-type: application/json' -d "$1"; }
nonce=$(rpc '{"jsonrpc":"2.0","id":"1","method":"Provision","params":{"serviceId":"fuzz","scheme":"internal"}}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["error"]["data"]["nonce"])')
ha=$(printf 'fuzz:%s' "$admin_secret" | sha256sum | cut -d' ' -f1)
value=$(printf '%s:%s' "$ha" "$nonce" | sha256sum | cut -d' ' -f1)
live_token=$(rpc '{"jsonrpc":"2.0","id":"2","method":"Provision","params":{"serviceId":"fuzz","scheme":"internal","auth":{"nonce":"'"$nonce"'","key":"fuzz","value":"'"$value"'"}}}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["result"]["token"])')

# adapter: an org login type whose agent is a closed port (its notifications fail and are
# retried, as against an agent that is down) and one DRM session of it.
org=$(operator POST /admin/v1/adapter/org-login-types \
  '{"method":"OAUTH2","adapter_agent":"127.0.0.1:9","data_model":{"login":{"oauth2":{"authorization_endpoint":"https://idp.example/authorize","token_endpoint":"https://idp.example/token","response_type":"code","client_id":"kep","client_secret":"s3cret","scopes":["openid"]}}}}')
org_id=$(field id <<<"$org")
org_key=$(field secret_key <<<"$org")
session=$(operator POST /admin/v1/adapter/drm-requests \
  '{"org_login_type_id":'"$org_id"',"file_id":"fuzz-file","file_type":"DRM"}' | field session_id)

# messaging: a client, a token by the client-credentials grant, and one message of each
# channel for the detail calls to find.
client=$(operator POST /admin/v1/messaging/clients '{"name":"fuzz"}')
client_id=$(field client_id <<<"$client")
msg_token=$(curl -sSf "$messaging/v2/oauth/token" -u "$client_id:$(field client_secret <<<"$client")" \
  -d grant_type=client_credentials | field access_token)
send() {
  curl -sSf "$messaging/v2/send/$1" -H "Authorization: Bearer $msg_token" \
    -H 'content-type: application/json' -d "$2" | field uid
}
xms_uid=$(send xms '{"cid":"fuzz-1","message_type":"SM","phone_number":"821012345678","message":"fuzz","sender_no":"0212345678"}')
rcs_uid=$(send rcs '{"cid":"fuzz-2","message_type":"RCSLMS","phone_number":"821012345678","template_code":"OO000000","agency_id":"agency","ad_flag":"N","sender_no":"0212345678","fall_back_yn":false,"body":[{"title":"fuzz","description":"fuzz"}]}')

# serving: an image, an endpoint and a deployment of it, whose instance runs `sleep` (never
# ready: the management calls do not need it to be).
operator POST /admin/v1/serving/images '{"name":"fuzz-img","command":"sleep 60"}' >/dev/null
operator POST /admin/v1/serving/endpoints '{"name":"fuzz-ep"}' >/dev/null
instance=$(operator POST /admin/v1/serving/endpoints/fuzz-ep/deployments \
  '{"name":"fuzz-dep","type":"custom-image","image":"fuzz-img"}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["instances"][0]["id"])')

# The settings, with what was made above as the dictionaries that path parameters draw from
# (fuzz/schemathesis.toml binds them), so that calls reach existing resources.
config=$work/schemathesis.toml
cp fuzz/schemathesis.toml "$config"
cat >>"$config" <<EOF

[dictionaries]
live-services.values = ["fuzz"]
org-login-types.values = [$org_id]
drm-sessions.values = ["$session"]
messaging-clients.values = ["$client_id"]
message-uids.values = ["$xms_uid", "$rcs_uid"]
images.values = ["fuzz-img"]
endpoints.values = ["fuzz-ep"]
deployments.values = ["fuzz-dep"]
instances.values = ["$instance"]
EOF

# --- schemathesis, one document at a time ----------------------------------------------------
echo "schema: $("$kep" --version), $examples examples per operation and phase, seed $seed"
failed=0
summary=()
# Whether a run's only errors are schemathesis' own crashes ("Runtime Error", e.g. a
# hypothesis bug in describing a strategy), with no failed check: nothing kep answered.
tool_crash_only() {
  local log=$1 errors
  errors=$(awk '/^Errors:/ { on = 1; next } on && /^$/ { exit } on' "$log")
  [[ $errors == *"Runtime Error"* ]] && ! grep -v 'Runtime Error' <<<"$errors" | grep -q '[^[:space:]]'
}

fuzz() {
  local name=$1 base=$2 seed=${FUZZ_SEED:-$seed}
  shift 2
  local report=$work/$name.json started=$SECONDS rc=0
  # Every check, bar the exclusions of the settings file. A hang is a failure: an answer
  # slower than --max-response-time, or none within --request-timeout. The outer timeout
  # only bounds the run. Run from the work dir: schemathesis keeps a cache in its cwd.
  (cd "$work" && SCHEMATHESIS_HOOKS=$root/fuzz/hooks.py timeout 600 \
    schemathesis --config-file "$config" run "$admin/openapi/$name.json" --url "$base" \
    --max-examples "$examples" --seed "$seed" --workers 2 \
    --request-timeout 10 --max-response-time 5 \
    --generation-database none --no-color \
    --report json --report-json-path "$report" ${SCHEMA_EXTRA:-} "$@") \
    >"$work/$name.log" 2>&1 || rc=$?
  local counts
  counts=$(python3 - "$report" <<'PY' 2>/dev/null || echo "no report"
import json, sys
r = json.load(open(sys.argv[1]))
ops, cases = r["operations"], r["test_cases"]
failures = sum(f["count"] for f in r["failures"])
print(f"{ops['tested']}/{ops['selected']} operations, {cases['generated']} cases, "
      f"{failures} failures, {len(r['errors'])} errors")
PY
  )
  # Such a crash of the tool itself is tried again (twice at most), with the next seed,
  # and said.
  if [[ $rc -ne 0 && $counts == *" 0 failures"* && ${FUZZ_TRIES:-0} -lt 2 ]] &&
    tool_crash_only "$work/$name.log"; then
    echo "schema: $name: schemathesis crashed (its own Runtime Error, no failed check); again with seed $((seed + 1))"
    grep -m1 -A2 '^Runtime Error' "$work/$name.log" || true
    FUZZ_TRIES=$((${FUZZ_TRIES:-0} + 1)) FUZZ_SEED=$((seed + 1)) fuzz "$name" "$base" "$@"
    return
  fi
  if [[ $rc -ne 0 ]]; then
    failed=1
    cat "$work/$name.log"
  fi
  summary+=("$(printf '%-10s %s, %ss: %s' "$name" "$counts" $((SECONDS - started)) \
    "$([[ $rc -eq 0 ]] && echo ok || echo "FAILED (schemathesis exit $rc)")")")
}

for s in $surfaces; do
  case $s in
  live) fuzz live "$live" -H "Authorization: Bearer $live_token" ;;
  adapter)
    # The session's headers are fixed: the calls are the agent's for that one session.
    fuzz adapter "$adapter" -H "Authorization: Secret $org_key" -H "Kep-OrgLoginType: ID $org_id" \
      -H "Kep-AgentSession: DSID $session" -H "Kep-File-Id: fuzz-file" -H "Kep-File-Type: DRM"
    ;;
  messaging) fuzz messaging "$messaging" -H "Authorization: Bearer $msg_token" ;;
  admin) fuzz admin "$admin" -H "Authorization: Bearer $op_token" ;;
  *) echo "schema: unknown surface $s" >&2; exit 2 ;;
  esac
done

if ! kill -0 "$server_pid" 2>/dev/null; then
  echo "schema: the server died during the run" >&2
  failed=1
fi
if grep -q 'panicked' "$work/serve.log"; then
  echo "schema: the server panicked during the run:" >&2
  grep -A3 'panicked' "$work/serve.log" >&2
  failed=1
fi
echo "schema: results (seed $seed)"
printf '  %s\n' "${summary[@]}"
exit "$failed"
