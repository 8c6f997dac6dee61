#!/usr/bin/env bash
# Models as their frameworks save them against the framework in-process (BENCHMARKS.md,
# issue #46): the same MLP as a SavedModel and as TorchScript (bench/frameworks.py make),
# served through the gateway by a `triton` deployment's `kep model-server` instance, which
# runs it in the framework's own runtime (a worker process in the framework's Python), and
# called in the calling Python process as a user of the framework calls it.
#
#   bench/frameworks.sh                  # needs wrk, jq, curl, python3 with tensorflow-cpu,
#                                        # torch, numpy
#   DURATION=10s BATCHES="1 32" FRAMEWORKS="tensorflow pytorch" bench/frameworks.sh
#
# kep: one instance of `cpu-medium` (2 CPUs, the machine's: the framework's threads are
# bounded to the instance's CPUs as a container's would be), called with KServe v2 binary
# tensors (JSON header, the input's little-endian FP32 bytes, binary output) with keep-alive,
# wrk -t1 at 1 and 4 connections, DURATION each after a 2 s warm-up. In-process: 1 and 4
# caller threads, the framework's default threads (both use the 2 cores). Nothing is pinned.
# "kep ÷ in-process" = kep's inferences/s at c1 (c4) ÷ in-process at 1 (4) callers. The
# issue's goal: ≥ 0.8× on CPU. Last, the model's call alone inside the instance (its
# statistics' compute_infer over the c1 run) beside the in-process call's mean.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10s}
BATCHES=${BATCHES:-1 32}
FRAMEWORKS=${FRAMEWORKS:-tensorflow pytorch}

source bench/lib.sh
bench_init kep
PY=bench/frameworks.py

python3 "$PY" make "$WORK" 2>/dev/null
echo "== machine: $(machine), $(python3 -c 'import tensorflow as tf, torch; print("tensorflow", tf.__version__, "torch", torch.__version__)' 2>/dev/null)"
wait_for_quiet
serving_start
api -XPOST "$admin/admin/v1/serving/models" -F name=mlp-tf -F framework=tensorflow \
  -F file=@"$WORK/mlp.tar.gz" >/dev/null
api -XPOST "$admin/admin/v1/serving/models" -F name=mlp-pt -F framework=pytorch \
  -F file=@"$WORK/mlp.pt" -F 'inputs=[{"name":"x","datatype":"FP32","shape":[-1,256]}]' >/dev/null

for framework in $FRAMEWORKS; do
  m=mlp-pt
  [ "$framework" = tensorflow ] && m=mlp-tf
  read -r url KEY < <(triton_deployment "{\"name\":\"$m\",\"instance_type\":\"cpu-medium\"}" "$m" tract)
  url=$url/v2/models/$m/infer
  for batch in $BATCHES; do
    body=$WORK/$m-$batch.body
    hlen=$(python3 "$PY" body "$batch" "$body")
    cat >"$WORK/$m.lua" <<LUA
wrk.method = "POST"
wrk.body = io.open("$body", "rb"):read("*a")
wrk.headers["Content-Type"] = "application/octet-stream"
wrk.headers["Inference-Header-Content-Length"] = "$hlen"
LUA
    curl -sf -XPOST -H "Authorization: Bearer $KEY" -H "Inference-Header-Content-Length: $hlen" \
      -H 'content-type: application/octet-stream' --data-binary @"$body" \
      -D "$WORK/$m.headers" -o "$WORK/$m.answer" "$url" || { echo "no 200 from $url" >&2; exit 1; }
    echo "== $framework, batch $batch: $(python3 "$PY" check "$framework" "$WORK" "$batch" "$WORK/$m.answer" "$WORK/$m.headers" 2>/dev/null)"
    res=$WORK/$m-$batch.results
    : >"$res"
    wrk_run() { wrk -t1 -c"$1" -d"$2" --latency -s "$WORK/$m.lua" -H "Authorization: Bearer $KEY" "$url"; }
    wrk_run 4 2s >/dev/null
    # The instance's own statistics (Triton's compute_infer) around the c1 run: the model's
    # call inside kep's process alone, without HTTP and the gateway.
    compute() { curl -sf -H "Authorization: Bearer $KEY" "${url%/infer}/stats" |
      jq -r '.model_stats[0].inference_stats.compute_infer | "\(.count) \(.ns)"'; }
    read -r n0 ns0 < <(compute)
    for c in 1 4; do
      echo "kep-c$c $(wrk_run "$c" "$DURATION" | awk "$WRK_AWK")" >>"$res"
      [ "$c" = 1 ] && read -r n1 ns1 < <(compute)
    done
    python3 "$PY" inproc "$framework" "$WORK" "$batch" "$DURATION" 2>/dev/null >>"$res"
    printf '   %-36s %10s %9s %9s %16s\n' "path ($DURATION each)" "inf/s" "p50 ms" "p99 ms" "kep ÷ in-process"
    awk '
      { ips[$1] = $2; p50[$1] = $3; p99[$1] = $4; order[NR] = $1 }
      END {
        label["kep-c1"] = "kep gateway, wrk -c1"; label["kep-c4"] = "kep gateway, wrk -c4"
        label["inproc-c1"] = "in-process, 1 caller"; label["inproc-c4"] = "in-process, 4 callers"
        for (i = 1; i <= NR; i++) {
          k = order[i]; r = ""
          if (k ~ /^inproc/) r = sprintf("%.2f", ips["kep-" substr(k, 8)] / ips[k])
          printf "   %-36s %10.1f %9.3f %9.3f %16s\n", label[k], ips[k], p50[k] / 1000, p99[k] / 1000, r
        }
      }' "$res"
    awk -v n="$((n1 - n0))" -v ns="$((ns1 - ns0))" '$1 == "inproc-c1" {
      printf "   the call inside the instance (c1): %.3f ms mean; in-process, 1 caller: %.3f ms mean\n",
        ns / n / 1e6, 1000 / $2 }' "$res"
  done
  api -XDELETE "$admin/admin/v1/serving/endpoints/$m" >/dev/null
done
cleanup
