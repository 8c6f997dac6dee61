#!/usr/bin/env bash
# ResNet-50 on a GPU (BENCHMARKS.md, issue #23; not run by CI): a `triton` deployment on one
# `gpu-small` instance running ONNX Runtime's CUDA execution provider (KEP_ENGINE=onnxruntime,
# onnxruntime-gpu's library), called through the gateway, against the same ONNX Runtime
# in-process in Python on the same GPU, at batch 1 and 32. The same callers on each side
# (1 and 4, each making one call at a time: kep-bench's connections, Python threads on one
# session), the same input bytes, the same session defaults; the kep side over REST (binary
# tensor extension) and over gRPC (raw contents), by `kep-bench infer`. It also checks that
# kep's answer is the in-process one.
#
#   bench/gpu_resnet.sh        # needs nvidia-smi, python3 with onnx and numpy, jq, curl;
#                              # onnxruntime-gpu (or PyPI); cargo unless KEP_BIN_DIR
#   SECONDS_EACH=10 BATCHES="1 32" CONNS="1 4" KEP_BIN_DIR=/tmp/bins bench/gpu_resnet.sh
#   DEVICE=cpu bench/gpu_resnet.sh   # the same steps on the CPU provider (a dry run), on a
#                                    # cpu-large instance (INSTANCE= another CPU type)
#   MODEL=mean bench/gpu_resnet.sh    # a ReduceMean of the same input: the transport alone
#   MODEL_INSTANCES=4 bench/gpu_resnet.sh  # four sessions per instance (KEP_MODEL_INSTANCES)
#
# Each kep row is measured twice: the input carried in the call, and the input in system
# shared memory (`kep-bench infer --shared-memory`, Triton's extension, written once and
# named by each call, as `perf_analyzer --shared-memory system` does; `SHM=0` leaves these
# rows out). `STREAM=1` adds gRPC rows of the calls on one ModelStreamInfer stream per
# connection (`kep-bench infer --stream`). `gw`/`inst ms` are the CPU time (user + system,
# all threads) per call of kep serve (the gateway, as nothing else is at work) and of the
# instance, over the warm-up and the counted seconds alike: on a shared machine, steadier
# than calls/s. ONNX Runtime's intra-op threads spin a while after each call (its default),
# which `inst ms` counts too; `DEVICE=cpu INSTANCE=cpu-small` runs one thread, which does
# not spin.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${SECONDS_EACH:-10}
WARMUP_S=${WARMUP_S:-5}
BATCHES=${BATCHES:-1 32}
CONNS=${CONNS:-1 4}
DEVICE=${DEVICE:-gpu}
MODEL=${MODEL:-resnet50}
MODEL_INSTANCES=${MODEL_INSTANCES:-1}
SHMS=("")
[ "${SHM:-1}" = 1 ] && SHMS+=(--shared-memory)
source bench/lib.sh
BENCH_FEATURES=kep/nvml bench_init kep kep-bench
if [ "$DEVICE" = gpu ]; then
  onnxruntime_gpu || { echo "gpu_resnet: no onnxruntime with a CUDA provider" >&2; exit 1; }
  INSTANCE=gpu-small
  echo "== $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
else
  PY=python3
  ORT_LIB=${ORT_LIB:-$("$PY" -c 'import onnxruntime, os, glob; print(glob.glob(os.path.dirname(onnxruntime.__file__) + "/capi/libonnxruntime.so*")[0])')}
  NV_LIBS=
  INSTANCE=${INSTANCE:-cpu-large}
fi
export LD_LIBRARY_PATH=${NV_LIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# IR version 8, as bench/resnet50_onnx.py writes: onnx's newest is more than older ONNX
# Runtimes load.
if [ "$MODEL" = mean ]; then # input [N, 3, 224, 224] → logits [N]: almost no work
  "$PY" -c "import onnx.helper as h, onnx; f=onnx.TensorProto.FLOAT; onnx.save(h.make_model(h.make_graph([h.make_node('ReduceMean', ['input'], ['logits'], axes=[1, 2, 3], keepdims=0)], 'mean', [h.make_tensor_value_info('input', f, ['N', 3, 224, 224])], [h.make_tensor_value_info('logits', f, ['N'])]), opset_imports=[h.make_opsetid('', 13)], ir_version=8), '$WORK/$MODEL.onnx')"
else
  "$PY" bench/resnet50_onnx.py "$WORK/$MODEL.onnx"
fi

echo "== ONNX Runtime in-process ($DEVICE)"
printf '   %-22s %5s %5s %10s %10s %9s %9s %8s %8s\n' side batch conns "calls/s" "images/s" "p50 ms" "p99 ms" "gw ms" "inst ms"
row() { # side batch callers kep-bench-style-JSON [gateway-ticks instance-ticks]
  local ips
  ips=$(jq -r .inferences_per_s <<<"$4")
  printf '   %-22s %5s %5s %10.1f %10.1f %9.3f %9.3f' "$1" "$2" "$3" "$ips" \
    "$(awk -v a="$ips" -v b="$2" 'BEGIN { print a * b }')" "$(jq -r .p50_ms <<<"$4")" "$(jq -r .p99_ms <<<"$4")"
  [ -z "${5:-}" ] || awk -v g="$5" -v i="$6" -v us="$TICK_US" -v ips="$ips" -v s="$SECONDS_EACH" -v w="$WARMUP_S" \
    'BEGIN { n = ips * (s + w); printf " %8.3f %8.3f", g * us / n / 1000, i * us / n / 1000 }'
  echo
}
declare -A IPS
for b in $BATCHES; do
  "$PY" -c "import numpy as np; np.random.default_rng($b).standard_normal(($b, 3, 224, 224), dtype=np.float32).tofile('$WORK/in-$b.raw')"
  for c in $CONNS; do
  out=$("$PY" - "$WORK/$MODEL.onnx" "$WORK/in-$b.raw" "$b" "$DEVICE" "$WARMUP_S" "$SECONDS_EACH" "$WORK/out-$b.npy" "$c" <<'PYTHON'
import json, sys, threading, time
import numpy as np, onnxruntime as ort
path, raw, b, device, warm, secs, out, conns = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5]), float(sys.argv[6]), sys.argv[7], int(sys.argv[8])
providers = [("CUDAExecutionProvider", {"device_id": 0})] if device == "gpu" else []
s = ort.InferenceSession(path, providers=providers + ["CPUExecutionProvider"])
assert device != "gpu" or s.get_providers()[0] == "CUDAExecutionProvider", s.get_providers()
x = np.fromfile(raw, dtype=np.float32).reshape(b, 3, 224, 224)
np.save(out, s.run(None, {"input": x})[0])
t = time.perf_counter()
while time.perf_counter() - t < warm:
    s.run(None, {"input": x})
took = []
def caller(end):  # as many callers as kep-bench's connections; run() lets go of the GIL
    while time.perf_counter() < end:
        t = time.perf_counter()
        s.run(None, {"input": x})
        took.append(time.perf_counter() - t)
end = time.perf_counter() + secs
threads = [threading.Thread(target=caller, args=(end,)) for _ in range(conns)]
[t.start() for t in threads]
[t.join() for t in threads]
took.sort()
print(json.dumps({"inferences_per_s": len(took) / secs, "p50_ms": took[len(took) // 2] * 1e3,
                  "p99_ms": took[int(len(took) * 0.99)] * 1e3}))
PYTHON
)
  IPS[inproc-$b-$c]=$(jq -r .inferences_per_s <<<"$out")
  row "onnxruntime in-process" "$b" "$c" "$out"
  done
done

echo "== kep: one $INSTANCE instance through the gateway"
export KEP_SERVING_ONNXRUNTIME=$ORT_LIB
# A batch of 32 is an 18.4 MiB request: held in memory rather than spooled to disk.
export KEP_GATEWAY_BODY_BUFFER_BYTES=$((32 << 20))
export KEP_SERVING_ALLOW_CLIENT_SHM=true
serving_start
api -XPOST "$admin/admin/v1/serving/models" -F name="$MODEL" -F framework=pytorch -F file=@"$WORK/$MODEL.onnx" >/dev/null
env=$(jq -nc --arg l "$NV_LIBS" --arg n "$MODEL_INSTANCES" \
  '{KEP_ENGINE: "onnxruntime", LD_LIBRARY_PATH: $l, KEP_MODEL_INSTANCES: $n}')
for proto in http grpc; do
  ep=$(json -XPOST "$admin/admin/v1/serving/endpoints" -d "{\"name\":\"r-$proto\",\"protocol\":\"$proto\",\"instance_type\":\"$INSTANCE\"}")
  KEY=$(jq -r .api_key <<<"$ep")
  target=$(jq -r .url <<<"$ep")
  [ "$proto" = grpc ] && target=$gateway
  json -XPOST "$admin/admin/v1/serving/endpoints/r-$proto/deployments" \
    -d "{\"name\":\"d1\",\"type\":\"triton\",\"model\":\"$MODEL\",\"env\":$env}" >/dev/null
  dep=$(deployment_when "$admin" "r-$proto" d1 '.state == "Available"')
  log=$WORK/data/kep/serving/logs/r-$proto/d1/$(jq -r '.instances[0].id' <<<"$dep").log
  instance_pid=$(jq -r '.instances[0].pid' <<<"$dep")
  if [ "$DEVICE" = gpu ] && ! grep -q "runs on ONNX Runtime's CUDA execution provider" "$log"; then
    echo "gpu_resnet: the instance is not on the CUDA provider:" >&2
    tail -5 "$log" >&2
    exit 1
  fi
  if [ "$proto" = http ]; then # kep's answer against the in-process one
    b=${BATCHES%% *}
    "$PY" - "$(jq -r .url <<<"$ep")" "$KEY" "$WORK/in-$b.raw" "$b" "$WORK/out-$b.npy" "$MODEL" <<'PYTHON'
import json, sys, urllib.request
import numpy as np
url, key, raw, b, want, model = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), np.load(sys.argv[5]), sys.argv[6]
x = np.fromfile(raw, dtype=np.float32)
body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [b, 3, 224, 224], "data": x.tolist()}]})
req = urllib.request.Request(url + f"/v2/models/{model}/infer", body.encode(),
                             {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
got = np.array(json.load(urllib.request.urlopen(req))["outputs"][0]["data"]).reshape(want.shape)
diff = float(np.abs(got - want).max())
print(f"   kep's answer against in-process: max |diff| {diff:.2e}")
sys.exit(0 if diff < 1e-2 * max(1.0, float(np.abs(want).max())) else 1)
PYTHON
  fi
  for b in $BATCHES; do
    for c in $CONNS; do
      ways=("")
      [ "$proto" = grpc ] && [ "${STREAM:-0}" = 1 ] && ways+=(--stream)
      for shm in "${SHMS[@]}"; do
        for way in "${ways[@]}"; do
          g0=$(cpu_ticks "${pids[0]}")
          i0=$(cpu_ticks "$instance_pid")
          out=$("$BENCH" infer --protocol "$proto" --url "$target" --key "$KEY" --model "$MODEL" \
            --input input --datatype FP32 --shape "$b,3,224,224" --data "$WORK/in-$b.raw" \
            --output logits --connections "$c" --seconds "$SECONDS_EACH" --warmup-seconds "$WARMUP_S" $shm $way)
          row "kep $proto${way:+ stream}${shm:+ shm}" "$b" "$c" "$out" \
            "$(($(cpu_ticks "${pids[0]}") - g0))" "$(($(cpu_ticks "$instance_pid") - i0))"
          printf '   %-22s %5s %5s %10s\n' "  ÷ in-process" "$b" "$c" \
            "$(awk -v k="$(jq -r .inferences_per_s <<<"$out")" -v p="${IPS[inproc-$b-$c]}" 'BEGIN { printf "%.2f", k / p }')"
        done
      done
    done
  done
  # One instance at a time on the GPU.
  api -XDELETE "$admin/admin/v1/serving/endpoints/r-$proto" >/dev/null
done
