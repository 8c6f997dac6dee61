#!/usr/bin/env bash
# Container instances against process instances (BENCHMARKS.md, issue #24): the same busybox
# httpd serving the same page, run by kep as a local process (an image with a command) and
# as a container of a local OCI image (Podman's Docker-compatible API, its own service and
# storage in $WORK, runc, no registry), in the same run:
#   - time from the deployment's creation to Available, ROUNDS times each;
#   - the gateway's throughput to each (wrk, CONNS connections), and straight to each
#     instance's port for reference: the difference is the published port's cost. busybox
#     httpd answers one request per connection and forks for each, so every call is a new
#     connection to the instance; at 32 its small listen backlog overflowed now and then and
#     SYN retransmits (1 s) made the p99, hence 8 by default.
#
#   bench/containers.sh                 # needs podman, runc, busybox-static, wrk, jq, curl
#   ROUNDS=10 DURATION=10s bench/containers.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-10s}
CONNS=${CONNS:-8}

source bench/lib.sh
bench_init kep

# Podman on a socket of its own, as the tests' fixture (crates/kep-serving/tests/it/podman.rs).
PM=$WORK/podman
mkdir -p "$PM/rootfs/bin" "$PM/rootfs/www"
cat >"$PM/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[engine]
runtime = "runc"
tmp_dir = "$PM/tmp"
[network]
network_config_dir = "$PM/networks"
EOF
printf '[storage]\ndriver = "overlay"\ngraphroot = "%s/graph"\nrunroot = "%s/run"\n' "$PM" "$PM" \
  >"$PM/storage.conf"
export CONTAINERS_CONF=$PM/containers.conf CONTAINERS_STORAGE_CONF=$PM/storage.conf
podman system service --time 0 "unix://$PM/podman.sock" 2>"$PM/service.log" &
pids+=($!)
for _ in $(seq 100); do [ -S "$PM/podman.sock" ] && break; sleep 0.1; done
cp /bin/busybox "$PM/rootfs/bin/"
ln -s busybox "$PM/rootfs/bin/sh"
ln -s busybox "$PM/rootfs/bin/httpd"
echo "kep bench page" >"$PM/rootfs/www/index.html"
tar -C "$PM/rootfs" -cf "$PM/rootfs.tar" .
podman import --quiet --change 'CMD ["/bin/httpd","-f","-p","8080","-h","/www"]' \
  "$PM/rootfs.tar" kep-bench/httpd:1 >/dev/null
# Containers kep leaves (none, unless it is killed) go with the service's storage.
trap 'cleanup; podman rm --all --force --time 0 >/dev/null 2>&1; rm -rf "$WORK"' EXIT

export KEP_SERVING_CONTAINER_SOCKET=unix://$PM/podman.sock
serving_start
json -XPOST "$admin/admin/v1/serving/images" \
  -d '{"name":"container","reference":"kep-bench/httpd:1"}' >/dev/null
json -XPOST "$admin/admin/v1/serving/images" -d "{\"name\":\"process\",\"command\":[\"sh\",\"-c\",
  \"exec /bin/busybox httpd -f -p 127.0.0.1:\$PORT -h $PM/rootfs/www\"]}" >/dev/null

echo "== machine: $(machine), $(podman --version), runc $(runc --version | head -1 | cut -d' ' -f3)"
wait_for_quiet

now_ms() { date +%s%3N; }
# deploy KIND NAME [PROBE] → the milliseconds from the creation request to Available. The
# timed deployments are probed every 50 ms; under the throughput run's load such a probe
# fails now and then and takes the instance out (503s), so those keep the default probe.
deploy() {
  local t0 probe=${3:-'"interval_s":0.05,"failure_threshold":1'}
  t0=$(now_ms)
  json -XPOST "$admin/admin/v1/serving/endpoints/$2/deployments" \
    -d "{\"name\":\"d1\",\"type\":\"custom-image\",\"image\":\"$1\",
         \"readiness\":{\"http\":{\"path\":\"/\"}${probe:+,$probe}}}" >/dev/null
  deployment_when "$admin" "$2" d1 '.state == "Available"' >/dev/null
  echo $(($(now_ms) - t0))
}

echo "== creation to Available, $ROUNDS rounds (ms)"
for kind in process container; do
  times=()
  for r in $(seq "$ROUNDS"); do
    json -XPOST "$admin/admin/v1/serving/endpoints" -d "{\"name\":\"t-$kind-$r\"}" >/dev/null
    times+=("$(deploy "$kind" "t-$kind-$r")")
    api -XDELETE "$admin/admin/v1/serving/endpoints/t-$kind-$r" >/dev/null
  done
  sorted=$(printf '%s\n' "${times[@]}" | sort -n)
  printf '   %-9s min %5s  median %5s  max %5s\n' "$kind" "$(head -1 <<<"$sorted")" \
    "$(sed -n "$(((ROUNDS + 1) / 2))p" <<<"$sorted")" "$(tail -1 <<<"$sorted")"
done

echo "== throughput, GET / at c=$CONNS for $DURATION"
for kind in process container; do
  ep=$(json -XPOST "$admin/admin/v1/serving/endpoints" -d "{\"name\":\"w-$kind\"}")
  deploy "$kind" "w-$kind" '"failure_threshold":3' >/dev/null
  port=$(api "$admin/admin/v1/serving/endpoints/w-$kind/deployments/d1" | jq -r '.instances[0].port')
  for via in direct gateway; do
    if [ "$via" = direct ]; then
      url=http://127.0.0.1:$port/ auth=()
    else
      url=$(jq -r .url <<<"$ep")/ auth=(-H "Authorization: Bearer $(jq -r .api_key <<<"$ep")")
    fi
    read -r rps p50 p99 _ < <(wrk -t2 -c"$CONNS" -d"$DURATION" --latency "${auth[@]}" "$url" | awk "$WRK_AWK")
    printf '   %-9s %-7s %9s req/s  p50 %6s us  p99 %6s us\n' "$kind" "$via" "$rps" "$p50" "$p99"
  done
done
