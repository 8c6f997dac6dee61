#!/usr/bin/env bash
# GPU serving on a machine with an NVIDIA GPU and driver (not run by CI): kep built with
# `--features nvml`, a `triton` deployment of a MatMul-heavy ONNX model on a `gpu-small`
# instance with KEP_ENGINE=onnxruntime and onnxruntime-gpu's library from pip, beside the
# same model on a CPU instance. It checks, and prints as a summary:
#   - the GPU instance got a GPU of its own (CUDA_VISIBLE_DEVICES, the API's `gpus`) and the
#     CPU one none; ONNX Runtime's CUDA execution provider ran the model;
#   - GPU and CPU answers agree;
#   - under load, the instance's gpu_percent (0..100 of its one GPU), gpu_memory_bytes
#     (against nvidia-smi's figure for its pid) and gpu_memory_percent, in the endpoint's
#     metrics and in Prometheus;
#   - a gpu_upper alert reaches a webhook (a Python receiver);
#   - the instance's memory figure beside its process's VmRSS, RssAnon, RssFile, RssShmem
#     and Pss, for the memory-counting question (README, Monitoring).
#
#   bench/gpu_check.sh        # needs nvidia-smi, python3, jq, curl; cargo unless KEP_BIN_DIR
#   LOAD_S=40 KEP_BIN_DIR=/tmp/bins bench/gpu_check.sh   # kep or kep.gz built elsewhere
set -euo pipefail
cd "$(dirname "$0")/.."
LOAD_S=${LOAD_S:-30}
for tool in nvidia-smi python3 jq curl; do
  command -v "$tool" >/dev/null || { echo "gpu_check: $tool is missing" >&2; exit 1; }
done
nvidia-smi -L

source bench/lib.sh
BENCH_FEATURES=kep/nvml bench_init kep
results=()
check() { # name, then a command: PASS when it succeeds
  local name=$1
  shift
  if "$@"; then results+=("PASS  $name"); else results+=("FAIL  $name"); fi
}
note() { results+=("      $*"); }

# With onnxruntime-gpu the GPU instance is a `triton` deployment on ONNX Runtime's CUDA
# provider, compared with a CPU one. Without it, a `custom-image` instance loads its GPU
# with PyTorch, and the allocation, NVML figures and alert are checked all the same.
if onnxruntime_gpu; then
  MODE=ort
else
  MODE=torch
  ORT_LIB=
  PY=python3
  "$PY" -c 'import torch; assert torch.cuda.is_available()' ||
    { echo "gpu_check: neither onnxruntime-gpu nor a CUDA PyTorch" >&2; exit 1; }
  echo "   no onnxruntime-gpu: a PyTorch process loads the GPU instance"
fi

# x FP32 [n, 64] → 16 × (MatMul 4096×4096, Tanh) → y FP32 [n, 8]: seconds of work per call
# on a CPU at n=512, milliseconds on a GPU; one 64 MiB weight shared by the 16 layers.
"$PY" - "$WORK/heavy.onnx" <<'PYTHON'
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
rng = np.random.default_rng(7)
w = lambda *s: numpy_helper.from_array((rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32))
inits = [w(64, 4096), w(4096, 4096), w(4096, 8)]
inits[0].name, inits[1].name, inits[2].name = "w_in", "w", "w_out"
nodes = [helper.make_node("MatMul", ["x", "w_in"], ["h0"])]
for i in range(16):
    nodes.append(helper.make_node("MatMul", [f"h{i}", "w"], [f"m{i}"]))
    nodes.append(helper.make_node("Tanh", [f"m{i}"], [f"h{i + 1}"]))
nodes.append(helper.make_node("MatMul", ["h16", "w_out"], ["y"]))
graph = helper.make_graph(nodes, "heavy",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])], inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
onnx.save(model, sys.argv[1])
PYTHON

echo "== webhook receiver and kep serve"
HOOK_PORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$PY" - "$HOOK_PORT" "$WORK/hook.jsonl" <<'PYTHON' &
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
port, out = int(sys.argv[1]), sys.argv[2]
class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with open(out, "ab") as f:
            f.write(body + b"\n")
        self.send_response(200)
        self.end_headers()
    def log_message(self, *a):
        pass
HTTPServer(("127.0.0.1", port), Hook).serve_forever()
PYTHON
pids+=($!)
DATA=$WORK/data
# `env`, so that the ONNX Runtime setting is given only in ort mode.
env KEP_LOG=info KEP_ADMIN_TOKEN=bench-operator ${ORT_LIB:+"KEP_SERVING_ONNXRUNTIME=$ORT_LIB"} \
  KEP_SERVING_MONITOR_INTERVAL_MS=500 \
  "$KEP" serve --only serving --data-dir "$DATA" --admin-addr 127.0.0.1:0 \
  --gateway-addr 127.0.0.1:0 >"$WORK/kep.log" 2>&1 &
pids+=($!)
ADMIN=$(kep_url "$DATA" admin)
S=$ADMIN/admin/v1/serving

api -XPOST "$S/models" -F name=heavy -F framework=pytorch -F file=@"$WORK/heavy.onnx" >/dev/null
# torch mode: the image serves HTTP on $PORT and multiplies matrices on its GPU until stopped.
cat >"$WORK/burn.py" <<'PYTHON'
import os, threading, torch
from http.server import BaseHTTPRequestHandler, HTTPServer
class Ok(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(torch.cuda.get_device_name().encode())
    def log_message(self, *a): pass
threading.Thread(target=HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Ok).serve_forever, daemon=True).start()
a = torch.randn(8192, 8192, device="cuda")
while True:
    (a @ a).sum().item()
PYTHON
json -XPOST "$S/images" -d "$(jq -nc --arg c "$PY $WORK/burn.py" '{name: "burn", command: $c}')" >/dev/null
declare -A URL KEY
for ep in gpu cpu; do
  type=$([ "$ep" = gpu ] && echo gpu-small || echo cpu-large)
  e=$(json -XPOST "$S/endpoints" -d "{\"name\":\"$ep\",\"instance_type\":\"$type\"}")
  URL[$ep]="$(jq -r .url <<<"$e")/v2/models/heavy/infer"
  KEY[$ep]=$(jq -r .api_key <<<"$e")
  if [ "$MODE" = torch ] && [ "$ep" = gpu ]; then
    json -XPOST "$S/endpoints/$ep/deployments" \
      -d '{"name":"d1","type":"custom-image","image":"burn","readiness":{"http":{"path":"/"}}}' >/dev/null
  else
    env=$(jq -nc --arg l "${NV_LIBS:-}" --arg e "$([ "$MODE" = ort ] && echo onnxruntime || echo tract)" \
      '{KEP_ENGINE: $e, LD_LIBRARY_PATH: $l}')
    json -XPOST "$S/endpoints/$ep/deployments" \
      -d "{\"name\":\"d1\",\"type\":\"triton\",\"model\":\"heavy\",\"env\":$env}" >/dev/null
  fi
done
for ep in gpu cpu; do
  for _ in $(seq 1200); do
    dep=$(api "$S/endpoints/$ep/deployments/d1")
    [ "$(jq -r .state <<<"$dep")" = Available ] && break
    sleep 0.1
  done
  echo "   $ep: $(jq -c '{state, instances: [.instances[] | {id, pid, gpus}]}' <<<"$dep")"
done
gpu_dep=$(api "$S/endpoints/gpu/deployments/d1")
cpu_dep=$(api "$S/endpoints/cpu/deployments/d1")
GPU_PID=$(jq -r '.instances[0].pid' <<<"$gpu_dep")
GPU_ID=$(jq -r '.instances[0].id' <<<"$gpu_dep")
check "both deployments Available" test "$(jq -r .state <<<"$gpu_dep")$(jq -r .state <<<"$cpu_dep")" = AvailableAvailable
check "the GPU instance holds one GPU (API gpus)" test "$(jq -c '.instances[0].gpus | length' <<<"$gpu_dep")" = 1
visible=$(tr '\0' '\n' <"/proc/$GPU_PID/environ" | sed -n 's/^CUDA_VISIBLE_DEVICES=//p')
cpu_visible=$(tr '\0' '\n' <"/proc/$(jq -r '.instances[0].pid' <<<"$cpu_dep")/environ" | grep '^CUDA_VISIBLE_DEVICES=' || true)
check "CUDA_VISIBLE_DEVICES=$visible matches the API's gpus" test "[$visible]" = "$(jq -c '.instances[0].gpus' <<<"$gpu_dep")"
check "the CPU instance has an empty CUDA_VISIBLE_DEVICES" test "$cpu_visible" = "CUDA_VISIBLE_DEVICES="
LOG=$DATA/serving/logs/gpu/d1/$GPU_ID.log
# body N SEED: a KServe v2 request of N random rows.
body() { "$PY" -c "import json, numpy as np; r = np.random.default_rng($2); print(json.dumps({'inputs': [{'name': 'x', 'datatype': 'FP32', 'shape': [$1, 64], 'data': r.standard_normal($1 * 64).astype('float32').tolist()}]}))"; }
if [ "$MODE" = ort ]; then
check "ONNX Runtime's CUDA provider runs the model (instance log)" grep -q "runs on ONNX Runtime's CUDA execution provider" "$LOG"
grep -i "warn" "$LOG" | tail -3 | sed 's/^/   log: /' || true

echo "== answers, GPU against CPU"
body 4 1 >"$WORK/small.json"
for ep in gpu cpu; do
  curl -sSf -H "Authorization: Bearer ${KEY[$ep]}" -H 'content-type: application/json' \
    --data-binary @"$WORK/small.json" "${URL[$ep]}" >"$WORK/answer-$ep.json"
done
diff=$("$PY" -c "
import json, numpy as np
a, b = (np.array(json.load(open('$WORK/answer-' + e + '.json'))['outputs'][0]['data']) for e in ('gpu', 'cpu'))
print(float(np.abs(a - b).max()))")
note "largest difference GPU vs CPU: $diff (TF32 matmuls on the GPU)"
check "GPU and CPU answers agree (max |diff| < 0.02)" "$PY" -c "import sys; sys.exit(0 if $diff < 0.02 else 1)"
else
  note "no onnxruntime-gpu: the CUDA provider and GPU-vs-CPU answers were not checked"
fi

echo "== gpu_upper alert on, then ${LOAD_S}s of load on the GPU instance"
json -XPUT "$S/endpoints/gpu/alerts" -d "{\"enabled\":true,\"webhook_url\":\"http://127.0.0.1:$HOOK_PORT/hook\",\"conditions\":{\"gpu_upper\":{\"enabled\":true,\"threshold\":10}}}" >/dev/null
body 512 2 >"$WORK/big.json"
# In torch mode the instance loads its GPU itself: the loader only waits as long.
[ "$MODE" = ort ] || echo "import time; time.sleep($LOAD_S)" >"$WORK/wait.py"
"$PY" - "${URL[gpu]}" "${KEY[gpu]}" "$WORK/big.json" "$LOAD_S" <<'PYTHON' &
import os, sys, threading, time, urllib.request
if os.path.exists(os.path.join(os.path.dirname(sys.argv[3]), "wait.py")):
    time.sleep(float(sys.argv[4]))
    sys.exit()
url, key, path, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
body = open(path, "rb").read()
end = time.time() + seconds
def load():
    while time.time() < end:
        req = urllib.request.Request(url, body, {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
        urllib.request.urlopen(req).read()
threads = [threading.Thread(target=load) for _ in range(2)]
[t.start() for t in threads]
[t.join() for t in threads]
PYTHON
LOADER=$!
pids+=("$LOADER")
: >"$WORK/samples.jsonl"
while kill -0 "$LOADER" 2>/dev/null; do
  api "$S/endpoints/gpu/metrics" | jq -c '.deployments[0].instances[0]' >>"$WORK/samples.jsonl"
  smi=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | awk -F', ' -v p="$GPU_PID" '$1 == p {print $2}')
  [ -n "$smi" ] && echo "$smi" >"$WORK/smi_mib"
  sleep 1
done
wait "$LOADER" || { echo "the load failed" >&2; }
api "$ADMIN/metrics" | grep -E '^kep_serving_instance_(gpu|memory)[a-z_]*\{[^}]*endpoint="gpu"' >"$WORK/prom" || true
last=$(tail -1 "$WORK/samples.jsonl")
max_gpu=$(jq -s 'map(.gpu_percent // 0) | max' "$WORK/samples.jsonl")
note "last sample: $last"
note "highest gpu_percent under load: $max_gpu; nvidia-smi: $(cat "$WORK/smi_mib" 2>/dev/null || echo '?') MiB for pid $GPU_PID"
check "gpu_percent rose under load and stayed within 0..100" "$PY" -c "import sys; sys.exit(0 if 5 <= $max_gpu <= 100.5 else 1)"
mem=$(jq -r '.gpu_memory_bytes // 0' <<<"$last")
smi_bytes=$(( $(cat "$WORK/smi_mib" 2>/dev/null || echo 0) * 1048576 ))
check "gpu_memory_bytes ($mem) is nvidia-smi's figure for the instance (±5%)" "$PY" -c "import sys; sys.exit(0 if $smi_bytes > 0 and abs($mem - $smi_bytes) <= 0.05 * $smi_bytes else 1)"
check "gpu_memory_percent is within 0..100" "$PY" -c "import sys; p = $(jq -r '.gpu_memory_percent // -1' <<<"$last"); sys.exit(0 if 0 < p <= 100 else 1)"
check "Prometheus has the GPU gauges" grep -q kep_serving_instance_gpu_memory_bytes "$WORK/prom"
sed 's/^/   prom: /' "$WORK/prom"
for _ in $(seq 20); do [ -s "$WORK/hook.jsonl" ] && break; sleep 0.5; done
check "a gpu_upper alert reached the webhook" grep -q "GPU use" "$WORK/hook.jsonl"
note "alert: $(head -1 "$WORK/hook.jsonl" 2>/dev/null)"

echo "== the instance's memory, counted in several ways"
tree() { echo "$1"; local c; for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do tree "$c"; done; }
for p in $(tree "$GPU_PID"); do
  s=$(awk '/^(VmRSS|RssAnon|RssFile|RssShmem):/ {printf "%s %s kB  ", $1, $2}' "/proc/$p/status")
  pss=$(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null || echo '?')
  note "pid $p: $s Pss: $pss kB"
done
note "kep's memory_bytes: $(jq -r '.memory_bytes' <<<"$(api "$S/endpoints/gpu/metrics" | jq -c '.deployments[0].instances[0]')")"

echo
echo "== summary ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1))"
printf '%s\n' "${results[@]}"
! printf '%s\n' "${results[@]}" | grep -q '^FAIL'
