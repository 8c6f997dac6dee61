#!/usr/bin/env bash
# Model-serving gateway against nginx (BENCHMARKS.md, issue #5): the same upstream instance
# (`kep-bench upstream`, started by kep as a custom-image deployment) called directly,
# through nginx's proxy_pass and through kep's gateway, with the same wrk and keep-alive.
#
#   bench/serving.sh                       # needs wrk, nginx, jq, curl, taskset
#   DURATION=10s ROUNDS=2 LAT_DURATION=10s bench/serving.sh
#   PERF=1 bench/serving.sh                # also `perf record` kep in each layout's first kep run
#   TLS=1 bench/serving.sh                 # kep and nginx terminate TLS (one ECDSA P-256
#                                          # certificate), and new-handshake rates are measured
#
# Two layouts, each with its own kep, nginx and upstream:
#   pinned: the proxy alone on CPU 1 (kep with one tokio worker, nginx with worker_processes
#           1); wrk (-t1) and the upstream share CPU 0;
#   shared: nothing pinned; kep with its default worker count (one per core), nginx with
#           worker_processes auto, wrk -t2.
# In each: ROUNDS throughput runs at CONNS connections (direct, nginx, kep in turn), then one
# latency run at LAT_CONNS connection(s) each. "cpu" is the proxy's own CPU time (user +
# system, all threads or worker processes, from /proc) per request.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10s}
LAT_DURATION=${LAT_DURATION:-10s}
ROUNDS=${ROUNDS:-2}
CONNS=${CONNS:-64}
LAT_CONNS=${LAT_CONNS:-1}
LAYOUTS=${LAYOUTS:-pinned shared}
NGINX=${NGINX:-/usr/sbin/nginx}
PERF=${PERF:-0}
TLS=${TLS:-0}

source bench/lib.sh
bench_init kep kep-bench

# measure NAME URL THREADS CONNS DURATION CPUSET PROXY_PIDS... → appends to $RESULTS
measure() {
  local name=$1 url=$2 threads=$3 conns=$4 dur=$5 cpus=$6; shift 6
  local pin=() t0 t1 out
  [ -n "$cpus" ] && pin=(taskset -c "$cpus")
  t0=$(cpu_ticks "$@")
  out=$("${pin[@]}" wrk -t"$threads" -c"$conns" -d"$dur" --latency -s "$WORK/post.lua" \
    -H "Authorization: Bearer $KEY" "${WRK_ARGS[@]}" "$url" | awk "$WRK_AWK")
  t1=$(cpu_ticks "$@")
  read -r rps p50 p99 n <<<"$out"
  local cpu=-
  [ $# -gt 0 ] && cpu=$(((t1 - t0) * TICK_US * 100 / n))   # hundredths of a µs
  [ "$cpu" != - ] && cpu=$(printf '%d.%02d' $((cpu / 100)) $((cpu % 100)))
  printf '   %-7s c=%-3s %9s req/s  p50 %6s us  p99 %6s us  proxy cpu %s us/req\n' \
    "$name" "$conns" "$rps" "$p50" "$p99" "$cpu"
  echo "$LAYOUT $name $conns $rps $p50 $p99 $cpu" >>"$RESULTS"
}

cat >"$WORK/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"inputs":[[1.0,2.0,3.0,4.0]]}'
wrk.headers["Content-Type"] = "application/json"
LUA
RESULTS=$WORK/results
: >"$RESULTS"
WRK_ARGS=()
# TLS: one certificate for kep and nginx; the admin listener stays plain for the setup.
KEP_TLS=() NGINX_SSL="" SCHEME=http CURL_TLS=()
if [ "$TLS" = 1 ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
    -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null
  KEP_TLS=(--tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem")
  NGINX_SSL=" ssl;
    ssl_certificate $WORK/cert.pem;
    ssl_certificate_key $WORK/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3"
  SCHEME=https CURL_TLS=(--cacert "$WORK/cert.pem")
fi

echo "== machine: $(machine), $($NGINX -v 2>&1 | cut -d' ' -f3)"
wait_for_quiet

run_layout() {
  LAYOUT=$1
  local proxy_cpus="" load_cpus="" threads=2 workers=auto kep_env=() up_cpus=""
  if [ "$LAYOUT" = pinned ]; then
    proxy_cpus=1 load_cpus=0 up_cpus=0 threads=1 workers=1 kep_env=(TOKIO_WORKER_THREADS=1)
  fi
  local pin_proxy=()
  [ -n "$proxy_cpus" ] && pin_proxy=(taskset -c "$proxy_cpus")
  local data=$WORK/$LAYOUT
  mkdir -p "$data/nginx"

  # kep, its upstream instance
  env "${kep_env[@]}" KEP_LOG=warn KEP_ADMIN_TOKEN=bench-operator KEP_ADMIN_TLS=false \
    "${pin_proxy[@]}" "$KEP" serve "${KEP_TLS[@]}" \
    --only serving --data-dir "$data/kep" --admin-addr 127.0.0.1:0 --gateway-addr 127.0.0.1:0 \
    >"$data/kep.log" 2>&1 &
  local kep_pid=$!
  pids+=("$kep_pid")
  local admin gateway
  admin=$(kep_url "$data/kep" admin)
  gateway=$(kep_url "$data/kep" gateway)
  api() { curl -sf -H "Authorization: Bearer bench-operator" -H 'content-type: application/json' "$@"; }
  api -XPOST "$admin/admin/v1/serving/images" \
    -d "$(jq -nc --arg b "$BENCH" '{name: "upstream", command: [$b, "upstream"]}')" >/dev/null
  KEY=$(api -XPOST "$admin/admin/v1/serving/endpoints" -d '{"name":"bench","instance_count":1}' | jq -r .api_key)
  api -XPOST "$admin/admin/v1/serving/endpoints/bench/deployments" \
    -d '{"name":"d1","type":"custom-image","image":"upstream"}' >/dev/null
  local dep
  dep=$(deployment_when "$admin" bench d1 '.state == "Available"')
  local port up_pid
  port=$(jq -r '.instances[0].port' <<<"$dep")
  up_pid=$(jq -r '.instances[0].pid' <<<"$dep")
  pids+=("$up_pid")
  # The instance inherits kep's CPU; in the pinned layout it goes to wrk's.
  [ -n "$up_cpus" ] && taskset -a -p -c "$up_cpus" "$up_pid" >/dev/null

  # nginx proxying to the same instance; it checks the same key as kep does.
  local nport
  nport=$(free_port)
  cat >"$data/nginx/nginx.conf" <<NGINX
daemon off;
master_process on;
worker_processes $workers;
pid $data/nginx/nginx.pid;
error_log $data/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $data/nginx/body;
  proxy_temp_path $data/nginx/proxy;
  fastcgi_temp_path $data/nginx/fastcgi;
  uwsgi_temp_path $data/nginx/uwsgi;
  scgi_temp_path $data/nginx/scgi;
  keepalive_requests 1000000;
  upstream instance {
    server 127.0.0.1:$port;
    keepalive 64;
    keepalive_requests 1000000;
  }
  server {
    listen 127.0.0.1:$nport$NGINX_SSL;
    location /endpoints/bench/ {
      if (\$http_authorization != "Bearer $KEY") { return 401; }
      proxy_pass http://instance/;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
NGINX
  "${pin_proxy[@]}" "$NGINX" -p "$data/nginx" -c "$data/nginx/nginx.conf" -e "$data/nginx/error.log" &
  local nginx_pid=$!
  pids+=("$nginx_pid")
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$nport") 2>/dev/null && break; sleep 0.1; done

  local direct_url="http://127.0.0.1:$port/v1/predict"
  local nginx_url="$SCHEME://127.0.0.1:$nport/endpoints/bench/v1/predict"
  local kep_url="$gateway/endpoints/bench/v1/predict"
  for u in "$direct_url" "$nginx_url" "$kep_url"; do
    curl -sf "${CURL_TLS[@]}" -XPOST -H "Authorization: Bearer $KEY" -H 'content-type: application/json' \
      -d '{"inputs":[[1.0,2.0,3.0,4.0]]}' "$u" >/dev/null || { echo "no answer from $u" >&2; exit 1; }
  done
  sleep 0.5 # the master listens before it forks its workers
  local nginx_all
  nginx_all=("$nginx_pid" $(pgrep -P "$nginx_pid"))
  echo "== layout $LAYOUT: kep pid $kep_pid$([ -n "$proxy_cpus" ] && echo ", 1 tokio worker"), nginx worker_processes $workers ($((${#nginx_all[@]} - 1)) workers)$([ -n "$proxy_cpus" ] && echo ", proxies on CPU $proxy_cpus, wrk and upstream on CPU $load_cpus"); upstream port $port"
  # Warm both pools of upstream connections.
  wrk -t1 -c"$CONNS" -d2s -s "$WORK/post.lua" -H "Authorization: Bearer $KEY" "$nginx_url" >/dev/null
  wrk -t1 -c"$CONNS" -d2s -s "$WORK/post.lua" -H "Authorization: Bearer $KEY" "$kep_url" >/dev/null

  echo "   throughput: wrk -t$threads -c$CONNS -d$DURATION --latency (keep-alive), $ROUNDS rounds"
  for r in $(seq "$ROUNDS"); do
    measure direct "$direct_url" "$threads" "$CONNS" "$DURATION" "$load_cpus"
    measure nginx "$nginx_url" "$threads" "$CONNS" "$DURATION" "$load_cpus" "${nginx_all[@]}"
    if [ "$PERF" = 1 ] && [ "$r" = 1 ]; then
      perf record -q -F 999 -p "$kep_pid" -o "$data/perf.data" -- sleep "${DURATION%s}" 2>/dev/null &
      local perf_pid=$!
    fi
    measure kep "$kep_url" "$threads" "$CONNS" "$DURATION" "$load_cpus" "$kep_pid"
    if [ "$PERF" = 1 ] && [ "$r" = 1 ]; then
      wait "$perf_pid" || true
      { perf report -i "$data/perf.data" --no-children --sort dso --stdio 2>/dev/null
        perf report -i "$data/perf.data" --no-children --percent-limit 0.4 --stdio 2>/dev/null; } \
        | grep -v '^#' | grep -v '^$' | head -60 >"$data/perf.txt" || true
    fi
  done
  if [ "$TLS" = 1 ]; then
    # A new connection, so a full handshake, for each call: wrk resumes no session.
    echo "   new handshakes: wrk -t$threads -c$CONNS -d$DURATION, Connection: close"
    WRK_ARGS=(-H "Connection: close")
    for r in $(seq "$ROUNDS"); do
      measure nginx-hs "$nginx_url" "$threads" "$CONNS" "$DURATION" "$load_cpus" "${nginx_all[@]}"
      measure kep-hs "$kep_url" "$threads" "$CONNS" "$DURATION" "$load_cpus" "$kep_pid"
    done
    WRK_ARGS=()
  fi
  echo "   latency: wrk -t1 -c$LAT_CONNS -d$LAT_DURATION --latency"
  measure direct "$direct_url" 1 "$LAT_CONNS" "$LAT_DURATION" "$load_cpus"
  measure nginx "$nginx_url" 1 "$LAT_CONNS" "$LAT_DURATION" "$load_cpus" "${nginx_all[@]}"
  measure kep "$kep_url" 1 "$LAT_CONNS" "$LAT_DURATION" "$load_cpus" "$kep_pid"
  [ -f "$data/perf.txt" ] && { echo "   perf, kep in the first throughput run (self time):"; sed 's/^/     /' "$data/perf.txt"; }
  cleanup
}

for l in $LAYOUTS; do run_layout "$l"; done

echo "== summary (req/s summed over rounds; latencies in µs; added = proxy − direct)"
awk -v conns="$CONNS" -v lconns="$LAT_CONNS" '
  $3 == conns { rps[$1, $2] += $4; n[$1, $2]++; p50[$1, $2] += $5; p99[$1, $2] += $6; layouts[$1] = 1 }
  $3 == lconns && lconns != conns { l50[$1, $2] = $5; l99[$1, $2] = $6 }
  END {
    for (l in layouts) {
      printf "   %s: kep/nginx throughput %.2f (kep %.0f, nginx %.0f, direct %.0f req/s mean)\n", l,
        rps[l, "kep"] / rps[l, "nginx"], rps[l, "kep"] / n[l, "kep"], rps[l, "nginx"] / n[l, "nginx"], rps[l, "direct"] / n[l, "direct"]
      if (n[l, "kep-hs"])
        printf "     new handshakes: kep/nginx %.2f (kep %.0f, nginx %.0f per s mean)\n",
          rps[l, "kep-hs"] / rps[l, "nginx-hs"], rps[l, "kep-hs"] / n[l, "kep-hs"], rps[l, "nginx-hs"] / n[l, "nginx-hs"]
      printf "     c=%s  p99 added: kep %+.0f, nginx %+.0f (mean p99 kep %.0f, nginx %.0f, direct %.0f)\n", conns,
        (p99[l, "kep"] - p99[l, "direct"]) / n[l, "kep"], (p99[l, "nginx"] - p99[l, "direct"]) / n[l, "nginx"],
        p99[l, "kep"] / n[l, "kep"], p99[l, "nginx"] / n[l, "nginx"], p99[l, "direct"] / n[l, "direct"]
      if (lconns != conns)
        printf "     c=%s   p50 added: kep %+.0f, nginx %+.0f; p99 added: kep %+.0f, nginx %+.0f\n", lconns,
          l50[l, "kep"] - l50[l, "direct"], l50[l, "nginx"] - l50[l, "direct"],
          l99[l, "kep"] - l99[l, "direct"], l99[l, "nginx"] - l99[l, "direct"]
    }
  }' "$RESULTS"
