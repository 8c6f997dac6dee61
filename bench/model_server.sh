#!/usr/bin/env bash
# Model serving against Python onnxruntime in-process (BENCHMARKS.md, issue #6): the same
# ONNX file and the same batch-1 input, served through the gateway by a `triton` deployment's
# `kep model-server` instance in each engine (KEP_ENGINE=tract, the built-in one, then
# KEP_ENGINE=onnxruntime, ONNX Runtime from the onnxruntime wheel's library through `ort`),
# and run by onnxruntime in the calling Python process (bench/model_server.py).
#
#   bench/model_server.sh                  # needs wrk, jq, curl, python3 with onnx, onnxruntime, numpy
#   DURATION=10s MODELS="mlp resnet50" bench/model_server.sh
#
# Models: mlp (crates/kep-model-server/tests/make_models.py: x FP32 [1,4] → probs) and
# resnet50 (light_resnet50.onnx of the onnx wheel's backend tests: gpu_0/data_0 FP32
# [1,3,224,224] → gpu_0/softmax_1). kep is called with Triton's binary tensor extension
# (JSON header, then the input's little-endian FP32 bytes; binary output), with keep-alive:
# wrk -t1 -c2 (throughput) and -c1 (latency), DURATION each, after a 2 s warm-up; one
# instance runs at a time. onnxruntime: 2 and 1 caller threads on one session, intra_op
# threads at the default and at 1, DURATION each. Nothing is pinned. "tract ÷ this" and
# "kep-ort ÷ this" = kep's inferences/s in that engine at the same concurrency (c2 for 2
# threads, c1 for 1) ÷ that row's. The issue's goal: kep-ort ≥ 0.9× in-process.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10s}
MODELS=${MODELS:-mlp resnet50}
ONNX_DIR=$(python3 -c 'import onnx, os; print(os.path.dirname(onnx.__file__))')

source bench/lib.sh
bench_init kep
PY=bench/model_server.py

python3 crates/kep-model-server/tests/make_models.py "$WORK" >/dev/null
declare -A FILE=([mlp]=$WORK/mlp.onnx [resnet50]=$ONNX_DIR/backend/test/data/light/light_resnet50.onnx)

echo "== machine: $(machine), onnxruntime $(python3 -c 'import onnxruntime; print(onnxruntime.__version__)')"
wait_for_quiet

serving_start

for m in $MODELS; do
  file=${FILE[$m]}
  api -XPOST "$admin/admin/v1/serving/models" -F name="$m" -F framework=pytorch -F file=@"$file" >/dev/null
  hlen=$(python3 "$PY" body "$file" "$WORK/$m.body")
  cat >"$WORK/$m.lua" <<LUA
wrk.method = "POST"
wrk.body = io.open("$WORK/$m.body", "rb"):read("*a")
wrk.headers["Content-Type"] = "application/octet-stream"
wrk.headers["Inference-Header-Content-Length"] = "$hlen"
LUA
  echo "== $m: $file, $(stat -c %s "$WORK/$m.body")-byte request ($hlen header)"
  res=$WORK/$m.results
  : >"$res"
  for engine in tract onnxruntime; do
    read -r url KEY < <(triton_deployment "{\"name\":\"$m-$engine\",\"instance_count\":1}" "$m" "$engine")
    url=$url/v2/models/$m/infer
    curl -sf -XPOST -H "Authorization: Bearer $KEY" -H "Inference-Header-Content-Length: $hlen" \
      -H 'content-type: application/octet-stream' --data-binary @"$WORK/$m.body" \
      -D "$WORK/$m.headers" -o "$WORK/$m.answer" "$url" || { echo "no 200 from $url" >&2; exit 1; }
    echo "   $engine check: 200, $(python3 "$PY" check "$file" "$WORK/$m.answer" "$WORK/$m.headers")"
    wrk_run() { wrk -t1 -c"$1" -d"$2" --latency -s "$WORK/$m.lua" -H "Authorization: Bearer $KEY" "$url"; }
    wrk_run 2 2s >/dev/null
    for c in 2 1; do
      out=$(wrk_run "$c" "$DURATION" | awk "$WRK_AWK")
      echo "$engine-c$c $out" >>"$res"
    done
    # One instance at a time on the 2 cores.
    api -XDELETE "$admin/admin/v1/serving/endpoints/$m-$engine" >/dev/null
  done
  python3 "$PY" ort "$file" "$DURATION" >>"$res"

  printf '   %-42s %10s %9s %9s %13s %13s\n' "path (batch 1, $DURATION each)" "inf/s" "p50 ms" "p99 ms" \
    "tract ÷ this" "kep-ort ÷ this"
  awk '
    { ips[$1] = $2; p50[$1] = $3; p99[$1] = $4; order[NR] = $1 }
    END {
      label["tract-c2"] = "kep gateway, tract, wrk -c2"; label["tract-c1"] = "kep gateway, tract, wrk -c1"
      label["onnxruntime-c2"] = "kep gateway, onnxruntime, wrk -c2"
      label["onnxruntime-c1"] = "kep gateway, onnxruntime, wrk -c1"
      label["ort-c2-i0"] = "python ort, 2 threads, intra_op default"; label["ort-c2-i1"] = "python ort, 2 threads, intra_op 1"
      label["ort-c1-i0"] = "python ort, 1 thread, intra_op default"; label["ort-c1-i1"] = "python ort, 1 thread, intra_op 1"
      for (i = 1; i <= NR; i++) {
        k = order[i]; t = ""; o = ""
        if (k ~ /^ort/) {
          c = substr(k, 5, 2)
          t = sprintf("%.3f", ips["tract-" c] / ips[k]); o = sprintf("%.3f", ips["onnxruntime-" c] / ips[k])
        }
        printf "   %-42s %10.1f %9.3f %9.3f %13s %13s\n", label[k], ips[k], p50[k] / 1000, p99[k] / 1000, t, o
      }
    }' "$res"
done
cleanup
