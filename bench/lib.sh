# What the benchmark scripts share; sourced, from the repository root. It builds the
# release binaries named (`bench_init kep kep-bench`) and copies them into $WORK, so that a
# build running beside a benchmark cannot swap them under it; every pid pushed to `pids`
# gets SIGTERM (kep then stops its instances), then SIGKILL after 5 s, on exit.
# BENCH_FEATURES: cargo features of that build (`kep/nvml` on a GPU machine). KEP_BIN_DIR:
# a folder of those binaries built elsewhere, gzipped or not, for a machine with no Rust or
# no network (the GPU machines); nothing is built then.

bench_init() {
  [ -n "${KEP_BIN_DIR:-}" ] ||
    cargo build --release -q $(printf -- '-p %s ' "$@") ${BENCH_FEATURES:+--features "$BENCH_FEATURES"}
  WORK=$(mktemp -d)
  local b
  for b in "$@"; do
    if [ -z "${KEP_BIN_DIR:-}" ]; then
      cp "${CARGO_TARGET_DIR:-target}/release/$b" "$WORK/"
    elif [ -f "$KEP_BIN_DIR/$b.gz" ]; then
      gunzip -c "$KEP_BIN_DIR/$b.gz" >"$WORK/$b" && chmod +x "$WORK/$b"
    else
      cp "$KEP_BIN_DIR/$b" "$WORK/"
    fi
  done
  KEP=$WORK/kep
  BENCH=$WORK/kep-bench
  pids=()
  trap 'cleanup; rm -rf "$WORK"' EXIT
  ulimit -n "$(ulimit -Hn)"
}

cleanup() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  pids=()
}

free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 40000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
}

TICK_US=$((1000000 / $(getconf CLK_TCK)))
cpu_ticks() { # user+system ticks of the given processes (all their threads)
  local t=0 p
  for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
  echo "$t"
}

# wrk → "rps p50_us p99_us requests"; fails on errors or non-2xx answers.
WRK_AWK='
function us(v) { if (v ~ /us$/) return v + 0; if (v ~ /ms$/) return v * 1000; if (v ~ /s$/) return v * 1000000; return v }
/^ +50%/ { p50 = us($2) } /^ +99%/ { p99 = us($2) }
/requests in/ { n = $1 } /Requests\/sec/ { rps = $2 }
/Non-2xx|Socket errors/ { bad = bad $0 }
END { if (bad != "") { print "wrk: " bad > "/dev/stderr"; exit 1 } printf "%.1f %.0f %.0f %d\n", rps, p50, p99, n }'

# A compilation beside a benchmark would take the cores it is measured on.
compiling() { pgrep -x rustc >/dev/null || pgrep -x cc >/dev/null || pgrep -x cargo >/dev/null; }
wait_for_quiet() {
  while compiling; do
    echo "   waiting: a compilation is running"; sleep 10
  done
}

# kep_url DATA_DIR LISTENER → the URL of that listener (https where it speaks TLS), once
# `kep serve --data-dir DATA_DIR` has written its addresses.
kep_url() {
  local f=$1/addresses.json
  for _ in $(seq 200); do [ -s "$f" ] && break; sleep 0.1; done
  [ -s "$f" ] || { echo "kep serve on $1 did not start" >&2; exit 1; }
  jq -r ".$2" "$1/urls.json"
}

# deployment_when ADMIN ENDPOINT DEPLOYMENT JQ_CONDITION → the deployment, once the condition
# holds (two minutes at most). The operator token is the scripts' `bench-operator`.
deployment_when() {
  local dep=""
  for _ in $(seq 1200); do
    dep=$(curl -sf -H "Authorization: Bearer bench-operator" "$1/admin/v1/serving/endpoints/$2/deployments/$3") &&
      [ "$(jq -r "$4" <<<"$dep")" = true ] && { echo "$dep"; return; }
    sleep 0.1
  done
  echo "deployment $2/$3 never met $4: $dep" >&2
  exit 1
}

machine() {
  local wrk=""
  command -v wrk >/dev/null && wrk=", $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2)"
  echo "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)$wrk"
}

# A wrk script of `POST /v2/send/xms` with $TOKEN, each request a new cid made of the run's
# name (wrk's first argument after `--`), the thread and a counter.
write_send_lua() {
  cat >"$1" <<'LUA'
local counter = 0
local threads = 0
function setup(thread) thread:set("tid", threads); threads = threads + 1 end
function init(args) run = args[1] end
function request()
  counter = counter + 1
  local body = '{"cid":"' .. run .. '-' .. tid .. '-' .. counter .. '","message_type":"SM","phone_number":"821012345678","message":"bench","sender_no":"0212345678"}'
  return wrk.format("POST", "/v2/send/xms", {["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. os.getenv("TOKEN")}, body)
end
LUA
}

# Starts `kep serve --only live,messaging` on port 0 with its data in $DATA (the arguments
# given go to it too: `--tls-self-signed`), then makes an API client (its token exported as
# TOKEN) and the live service `bench`. Sets SERVER, ADMIN, LIVE, MSG (https where the
# listener speaks TLS; the admin listener stays plain), CA (the data dir's, for curl), OP
# (the operator token) and SVC (the service's secrets, JSON).
serve_live_messaging() {
  KEP_LOG=warn KEP_SIMULATOR_DELAY_MS=200 KEP_ADMIN_TLS=false "$KEP" serve --data-dir "$DATA" \
    --only live,messaging --admin-addr 127.0.0.1:0 --live-addr 127.0.0.1:0 \
    --media-addr 127.0.0.1:0 --messaging-addr 127.0.0.1:0 "$@" >/dev/null 2>&1 &
  SERVER=$!
  pids+=("$SERVER")
  ADMIN=$(kep_url "$DATA" admin)
  LIVE=$(kep_url "$DATA" live)
  MSG=$(kep_url "$DATA" messaging)
  CA=()
  [ -f "$DATA/tls/ca.pem" ] && CA=(--cacert "$DATA/tls/ca.pem")
  OP=$(cat "$DATA/admin-token")
  local c
  c=$(curl -sf -XPOST -H "Authorization: Bearer $OP" -H 'content-type: application/json' \
    "$ADMIN/admin/v1/messaging/clients" -d '{}')
  TOKEN=$(curl -sf "${CA[@]}" -u "$(jq -r .client_id <<<"$c"):$(jq -r .client_secret <<<"$c")" \
    -d grant_type=client_credentials "$MSG/v2/oauth/token" | jq -r .access_token)
  export TOKEN
  SVC=$(curl -sf -XPOST -H "Authorization: Bearer $OP" -H 'content-type: application/json' \
    "$ADMIN/admin/v1/live/services" -d '{"serviceId":"bench"}')
}

# serving_start: `kep serve --only serving` with its data in $WORK/data/kep, on free ports;
# sets $admin and $gateway. `api` and `json` call the admin API as the scripts' operator.
serving_start() {
  mkdir -p "$WORK/data"
  KEP_LOG=warn KEP_ADMIN_TOKEN=bench-operator "$KEP" serve --only serving \
    --data-dir "$WORK/data/kep" --admin-addr 127.0.0.1:0 --gateway-addr 127.0.0.1:0 \
    >"$WORK/data/kep.log" 2>&1 &
  pids+=($!)
  admin=$(kep_url "$WORK/data/kep" admin)
  gateway=$(kep_url "$WORK/data/kep" gateway)
}
api() { curl -sS --fail-with-body -H "Authorization: Bearer bench-operator" "$@"; }
json() { api -H 'content-type: application/json' "$@"; }

# triton_deployment ENDPOINT_JSON MODEL ENGINE [FIELDS] → "URL KEY" of a new endpoint (its
# creation body) with one `triton` deployment d1 of MODEL in ENGINE (and the deployment's
# JSON FIELDS, e.g. `"model_config":{…}`), once it is Available.
triton_deployment() {
  local ep name
  ep=$(json -XPOST "$admin/admin/v1/serving/endpoints" -d "$1")
  name=$(jq -r .name <<<"$ep")
  json -XPOST "$admin/admin/v1/serving/endpoints/$name/deployments" \
    -d "{\"name\":\"d1\",\"type\":\"triton\",\"model\":\"$2\",\"env\":{\"KEP_ENGINE\":\"$3\"}${4:+,$4}}" >/dev/null
  deployment_when "$admin" "$name" d1 '.state == "Available"' >/dev/null
  echo "$(jq -r .url <<<"$ep") $(jq -r .api_key <<<"$ep")"
}

# onnxruntime_gpu: a Python whose onnxruntime has ONNX Runtime's CUDA execution provider
# (python3's own, or onnxruntime-gpu from PyPI into a venv in $WORK). Sets PY, ORT_LIB (its
# libonnxruntime, for KEP_SERVING_ONNXRUNTIME) and NV_LIBS (the folders of the CUDA and
# cuDNN libraries of the `nvidia` wheels, which the provider loads); fails where there is
# none.
ort_cuda() { "$1" -c 'import onnxruntime as o, sys; sys.exit("CUDAExecutionProvider" not in o.get_available_providers())' 2>/dev/null; }
onnxruntime_gpu() {
  PY=python3
  if ! ort_cuda "$PY"; then
    python3 -m venv --system-site-packages "$WORK/venv"
    # The extras bring the CUDA and cuDNN libraries the provider loads.
    "$WORK/venv/bin/python" -m pip install -q --retries 0 --timeout 10 \
      "onnxruntime-gpu[cuda,cudnn]" numpy onnx >/dev/null 2>&1 && PY=$WORK/venv/bin/python
  fi
  ort_cuda "$PY" || return 1
  local capi
  capi=$("$PY" -c 'import onnxruntime, os; print(os.path.dirname(onnxruntime.__file__))')/capi
  ORT_LIB=$(ls "$capi"/libonnxruntime.so* | head -1)
  NV_LIBS=$("$PY" -c 'import nvidia; print("\n".join(nvidia.__path__))' 2>/dev/null |
    xargs -r -I{} find {} -name 'lib*.so*' -printf '%h\n' | sort -u | paste -sd: -)
  echo "   onnxruntime $("$PY" -c 'import onnxruntime as o; print(o.__version__, o.get_available_providers())')"
}
