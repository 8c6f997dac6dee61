#!/usr/bin/env bash
# KServe v2 REST against Triton's gRPC through the gateway (BENCHMARKS.md, issue #23): the
# same model, the same batch-1 input and the same client loop (`kep-bench infer`, one call
# at a time per connection), REST (binary tensor extension, HTTP/1.1, an `http` endpoint)
# against gRPC (`ModelInfer` with raw contents, HTTP/2, a `grpc` endpoint named by its key),
# and the same requests on one `ModelStreamInfer` stream per connection. `gw µs/call` is
# kep serve's CPU time (user + system, all threads: the gateway, as nothing else is at work)
# per call, over the warm-up and the counted seconds alike: steadier than calls/s on a
# shared machine.
# Each endpoint has one `triton` deployment of one instance running ONNX Runtime
# (KEP_ENGINE=onnxruntime, the onnxruntime wheel's library); one endpoint runs at a time.
#
#   bench/model_protocols.sh                 # needs jq, curl, python3 with onnx, onnxruntime, numpy
#   SECONDS_EACH=10 MODELS="mlp resnet50" bench/model_protocols.sh
#
# Models: mlp (crates/kep-model-server/tests/make_models.py: x FP32 [1,4] → probs) and
# resnet50 (light_resnet50.onnx of the onnx wheel's backend tests, 1×3×224×224 FP32).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${SECONDS_EACH:-10}
MODELS=${MODELS:-mlp resnet50}
ONNX_DIR=$(python3 -c 'import onnx, os; print(os.path.dirname(onnx.__file__))')

source bench/lib.sh
bench_init kep kep-bench

python3 crates/kep-model-server/tests/make_models.py "$WORK" >/dev/null
declare -A FILE=([mlp]=$WORK/mlp.onnx [resnet50]=$ONNX_DIR/backend/test/data/light/light_resnet50.onnx)

echo "== machine: $(machine), onnxruntime $(python3 -c 'import onnxruntime; print(onnxruntime.__version__)')"
wait_for_quiet

serving_start

printf '   %-10s %-13s %5s %12s %9s %9s %11s %13s\n' model proto conns "inf/s" "p50 ms" "p99 ms" "gw µs/call" "grpc ÷ http"
for m in $MODELS; do
  file=${FILE[$m]}
  api -XPOST "$admin/admin/v1/serving/models" -F name="$m" -F framework=pytorch -F file=@"$file" >/dev/null
  # The input's raw FP32 bytes, its name, shape and the output's name.
  read -r input shape output < <(python3 - "$file" "$WORK/$m.raw" <<'PY'
import sys, numpy as np, onnxruntime as ort
s = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
i = s.get_inputs()[0]
shape = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
np.random.default_rng(6).standard_normal(shape, dtype=np.float32).astype("<f4").tofile(sys.argv[2])
print(i.name, ",".join(map(str, shape)), s.get_outputs()[0].name)
PY
)
  declare -A ips=()
  for proto in http grpc; do
    read -r url KEY < <(triton_deployment "{\"name\":\"$m-$proto\",\"protocol\":\"$proto\"}" "$m" onnxruntime)
    target=$url
    [ "$proto" = grpc ] && target=$gateway
    # gRPC twice: a ModelInfer call each, and the calls on one ModelStreamInfer stream.
    ways=("")
    [ "$proto" = grpc ] && ways+=(--stream)
    for c in 1 4; do
      for way in "${ways[@]}"; do
        t0=$(cpu_ticks "${pids[0]}")
        out=$("$BENCH" infer --protocol "$proto" --url "$target" --key "$KEY" --model "$m" \
          --input "$input" --datatype FP32 --shape "$shape" --data "$WORK/$m.raw" --output "$output" \
          --connections "$c" --seconds "$SECONDS_EACH" --warmup-seconds 2 $way)
        gw_us=$(awk -v t="$(( $(cpu_ticks "${pids[0]}") - t0 ))" -v us="$TICK_US" -v ips="$(jq -r .inferences_per_s <<<"$out")" \
          -v s="$((SECONDS_EACH + 2))" 'BEGIN { printf "%.1f", t * us / (ips * s) }')
        ips[$proto$way-$c]=$(jq -r .inferences_per_s <<<"$out")
        ratio=""
        [ "$proto" = grpc ] && ratio=$(awk -v g="${ips[grpc$way-$c]}" -v h="${ips[http-$c]}" 'BEGIN { printf "%.2f", g / h }')
        printf '   %-10s %-13s %5s %12.1f %9.3f %9.3f %11s %13s\n' "$m" "$proto${way:+ stream}" "$c" \
          "$(jq -r .inferences_per_s <<<"$out")" "$(jq -r .p50_ms <<<"$out")" "$(jq -r .p99_ms <<<"$out")" "$gw_us" "$ratio"
      done
    done
    # One instance at a time on the cores.
    api -XDELETE "$admin/admin/v1/serving/endpoints/$m-$proto" >/dev/null
  done
done
cleanup
