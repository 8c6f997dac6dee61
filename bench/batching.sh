#!/usr/bin/env bash
# Triton's dynamic batcher (BENCHMARKS.md, issue #47): many callers at batch 1 of MODEL,
# through the gateway to one `triton` instance without batching and with `model_config`
# {max_batch_size MAX_BATCH, dynamic_batching {max_queue_delay_us DELAY_US}}, in each
# engine; against onnxruntime in the calling Python process with as many caller threads on
# one session. MODEL is `mlp` (bench/batching.py make: x FP32 [N, 256] → 1024 → 1024 → 256;
# 64 callers) or `resnet50` (bench/resnet50_onnx.py, FP32 [N, 3, 224, 224]; 8 callers).
#
#   bench/batching.sh                    # needs wrk, jq, curl, python3 with onnx, onnxruntime, numpy
#   DURATION=10s CALLERS=64 DELAY_US=1000 MAX_BATCH=64 ENGINES="onnxruntime tract" bench/batching.sh
#   MODEL=resnet50 ENGINES=onnxruntime bench/batching.sh
#
# kep is called with Triton's binary tensor extension, keep-alive, wrk -t2 -cCALLERS for
# DURATION after a 2 s warm-up; one instance runs at a time (`cpu-medium`, 2 CPUs). Nothing is
# pinned. The issue's goals: batching ÷ not ≥ 3×, and kep-ort with batching ÷ in-process ≥ 1.0×.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10s}
MODEL=${MODEL:-mlp}
case $MODEL in
  mlp) CALLERS=${CALLERS:-64} ;;
  resnet50) CALLERS=${CALLERS:-8} ;;
  *) echo "MODEL is mlp or resnet50" >&2; exit 2 ;;
esac
MAX_BATCH=${MAX_BATCH:-$CALLERS}
DELAY_US=${DELAY_US:-1000}
ENGINES=${ENGINES:-onnxruntime tract}

source bench/lib.sh
bench_init kep
file=$WORK/$MODEL.onnx
if [ "$MODEL" = mlp ]; then python3 bench/batching.py make "$WORK"; else python3 bench/resnet50_onnx.py "$file"; fi
echo "== machine: $(machine), onnxruntime $(python3 -c 'import onnxruntime; print(onnxruntime.__version__)')"
wait_for_quiet
serving_start
api -XPOST "$admin/admin/v1/serving/models" -F name=$MODEL -F framework=pytorch -F file=@"$file" >/dev/null
hlen=$(python3 bench/model_server.py body "$file" "$WORK/$MODEL.body")
cat >"$WORK/$MODEL.lua" <<LUA
wrk.method = "POST"
wrk.body = io.open("$WORK/$MODEL.body", "rb"):read("*a")
wrk.headers["Content-Type"] = "application/octet-stream"
wrk.headers["Inference-Header-Content-Length"] = "$hlen"
LUA
res=$WORK/results
: >"$res"
config="\"model_config\":{\"max_batch_size\":$MAX_BATCH,\"dynamic_batching\":{\"max_queue_delay_us\":$DELAY_US}}"
for engine in $ENGINES; do
  for batching in no yes; do
    fields=
    [ "$batching" = yes ] && fields=$config
    read -r url KEY < <(triton_deployment "{\"name\":\"$MODEL-$engine-$batching\",\"instance_type\":\"cpu-medium\"}" \
      $MODEL "$engine" "$fields")
    url=$url/v2/models/$MODEL/infer
    curl -sf -XPOST -H "Authorization: Bearer $KEY" -H "Inference-Header-Content-Length: $hlen" \
      -H 'content-type: application/octet-stream' --data-binary @"$WORK/$MODEL.body" \
      -D "$WORK/h" -o "$WORK/a" "$url" || { echo "no 200 from $url" >&2; exit 1; }
    echo "   $engine, batching $batching: $(python3 bench/model_server.py check "$file" "$WORK/a" "$WORK/h")"
    wrk_run() { wrk -t2 -c"$1" -d"$2" --latency -s "$WORK/$MODEL.lua" -H "Authorization: Bearer $KEY" "$url"; }
    wrk_run "$CALLERS" 2s >/dev/null
    before=$(curl -sf -H "Authorization: Bearer $KEY" "${url%/infer}/stats" | jq '.model_stats[0].execution_count')
    echo "$engine-$batching $(wrk_run "$CALLERS" "$DURATION" | awk "$WRK_AWK")" >>"$res"
    stats=$(curl -sf -H "Authorization: Bearer $KEY" "${url%/infer}/stats" | jq -c '.model_stats[0] |
      [.inference_count, .execution_count, (.inference_stats.compute_infer | .ns / .count / 1e6 * 100 | round / 100)]')
    # A call's compute_infer is the run it was in: their mean is a run's mean time.
    echo "     runs during the measure: $(($(jq '.[1]' <<<"$stats") - before)); inferences, runs, mean run ms overall: $stats"
    api -XDELETE "$admin/admin/v1/serving/endpoints/$MODEL-$engine-$batching" >/dev/null
    # The same instance called directly, as Triton is called (no gateway in front): the
    # `kep model-server` command line a `cpu-medium` instance runs.
    port=$(free_port)
    flags=()
    [ "$batching" = yes ] && flags=(--max-batch-size "$MAX_BATCH" --dynamic-batching --max-queue-delay-us "$DELAY_US")
    "$KEP" model-server --protocol kserve --name "$MODEL" --model "$file" --engine "$engine" --threads 2 \
      --port "$port" "${flags[@]}" >"$WORK/direct.log" 2>&1 &
    direct=$!
    pids+=("$direct")
    url=http://127.0.0.1:$port/v2/models/$MODEL/infer
    for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/v2/health/ready" >/dev/null && break; sleep 0.1; done
    wrk_run "$CALLERS" 2s >/dev/null
    echo "$engine-$batching-direct $(wrk_run "$CALLERS" "$DURATION" | awk "$WRK_AWK")" >>"$res"
    kill -TERM "$direct"
    wait "$direct" 2>/dev/null || true
  done
done
(cd bench && python3 batching.py ort "$file" "$DURATION" "$CALLERS") >>"$res"

printf '   %-50s %10s %9s %9s %12s %12s\n' "path (batch 1, $CALLERS callers, $DURATION)" "inf/s" "p50 ms" \
  "p99 ms" "÷ unbatched" "÷ in-process"
awk -v c="$CALLERS" '
  { ips[$1] = $2; p50[$1] = $3; p99[$1] = $4; order[NR] = $1 }
  END {
    ort = "ort-c" c
    for (i = 1; i <= NR; i++) {
      k = order[i]; n = split(k, p, "-"); u = ""; o = ""
      if (k != ort) {
        path = n == 3 ? "kep model-server, " : "kep gateway, "
        label = path p[1] (p[2] == "yes" ? ", dynamic batching" : ", one call per run")
        unbatched = p[1] "-no" (n == 3 ? "-direct" : "")
        if (p[2] == "yes") u = sprintf("%.2f", ips[k] / ips[unbatched])
        o = sprintf("%.2f", ips[k] / ips[ort])
      } else label = "python onnxruntime, " c " threads, one session"
      printf "   %-50s %10.1f %9.3f %9.3f %12s %12s\n", label, ips[k], p50[k] / 1000, p99[k] / 1000, u, o
    }
  }' "$res"
cleanup
