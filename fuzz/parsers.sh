#!/usr/bin/env bash
# Parser fuzzing (RELIABILITY.md): runs the cargo-fuzz targets of fuzz/fuzz_targets, every
# one or those named as arguments, for FUZZ_SECONDS each (default 60), one process each,
# starting from a copy of the committed seed corpus (fuzz/corpus/<target>), so the
# checkout stays clean. Prints per target the inputs libFuzzer tried, the corpus it ended
# with and the result; exits non-zero on any crash, panic, timeout or out-of-memory.
# A failing input and the run's log are kept in fuzz/artifacts/<target>/.
#
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`). Not part of
# .ci/run, which only checks that the targets build.
#
#   bash fuzz/parsers.sh                          # every target, 60 s each
#   FUZZ_SECONDS=300 bash fuzz/parsers.sh jsonrpc  # one target, 5 minutes
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${FUZZ_SECONDS:-60}"
if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for f in fuzz/fuzz_targets/*.rs; do
    targets+=("$(basename "$f" .rs)")
  done
fi

# Without a sanitizer: the crates deny unsafe code, and what the runs look for (panics,
# overflows, hangs, allocations out of proportion) the debug assertions, libFuzzer and the
# targets' allocator (at most 1 GiB of heap, src/lib.rs) catch themselves; AddressSanitizer
# would only halve the inputs tried. Release code with debug assertions and overflow
# checks on (cargo-fuzz's default), as a debug build of the server has them.
fuzz=(cargo +nightly fuzz)
build=(--sanitizer none)
# Seconds per input before it counts as a hang; resident memory before it counts as
# out-of-memory. The JSON targets get a dictionary of JSON's tokens and edge numbers.
libfuzzer=(-max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048)

work="$(mktemp -d "${TMPDIR:-/tmp}/kep-parsers.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# The targets that start a service put its data dir under TMPDIR: in the work dir, removed
# with it.
export TMPDIR="$work/tmp"
mkdir -p "$TMPDIR"

echo "building ${#targets[@]} target(s)"
if [ "$#" -eq 0 ]; then
  "${fuzz[@]}" build "${build[@]}"
else
  for t in "${targets[@]}"; do
    "${fuzz[@]}" build "${build[@]}" "$t"
  done
fi

failed=0
summary=()
for t in "${targets[@]}"; do
  corpus="$work/corpus/$t"
  mkdir -p "$corpus"
  cp -R "fuzz/corpus/$t/." "$corpus/"
  seeds=$(find "$corpus" -type f | wc -l)
  log="$work/$t.log"
  echo "== $t: ${seconds} s from ${seeds} seeds"
  start=$(date +%s)
  rc=0
  case "$t" in
    jsonrpc | participant_ws | traffic_ratio | tfserving_request | kserve_request)
      dict=(-dict=fuzz/json.dict) ;;
    *) dict=() ;;
  esac
  "${fuzz[@]}" run "${build[@]}" "$t" "$corpus" -- "${libfuzzer[@]}" "${dict[@]}" >"$log" 2>&1 || rc=$?
  took=$(($(date +%s) - start))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  files=$(find "$corpus" -type f | wc -l)
  bytes=$(du -sb "$corpus" | cut -f1)
  if [ "$rc" -eq 0 ]; then
    result=ok
  else
    failed=1
    if grep -q 'ERROR: libFuzzer: timeout' "$log"; then
      result="FAILED: timeout"
    elif grep -qE 'out-of-memory|memory allocation of [0-9]+ bytes failed' "$log"; then
      result="FAILED: out of memory"
    elif grep -q 'panicked at' "$log"; then
      result="FAILED: panic"
    else
      result="FAILED: crash (exit $rc)"
    fi
    mkdir -p "fuzz/artifacts/$t"
    cp "$log" "fuzz/artifacts/$t/fuzz.log"
    tail -n 40 "$log"
  fi
  line="$t: ${took} s, ${execs:-?} inputs tried, corpus ${files} files (${bytes} bytes), ${result}"
  echo "$line"
  summary+=("$line")
done

echo
echo "== parser fuzzing, ${seconds} s per target"
printf '%s\n' "${summary[@]}"
if [ "$failed" -ne 0 ]; then
  echo "failures: inputs and logs in fuzz/artifacts/" >&2
  exit 1
fi
