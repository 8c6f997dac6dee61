#!/usr/bin/env bash
# What the GPU benchmarks (bench/gpu_resnet.sh, bench/gpu_check.sh) need on a GPU machine
# that has no Rust and no network (an air-gapped node, a lent machine): kep built with
# `nvml` and kep-bench, stripped, and onnxruntime-gpu's Python package (its libonnxruntime
# and CUDA provider, 345 MB unpacked). The machine brings Python with numpy and onnx, jq,
# curl, and NVIDIA's CUDA 13 and cuDNN 9 libraries (the `nvidia` wheels PyTorch installs).
# One xz stream (220 MiB), split into parts of PART_MIB each in a folder of its own (OUT/1,
# OUT/2 …), for a transfer that takes so much at a time (56 MiB and a 6 MB checkout fit in
# 64 MiB: four parts); bench/gpu_unbundle.sh puts them together.
#
#   bench/gpu_bundle.sh OUT                 # here: builds, downloads the wheel from PyPI
#   PART_MIB=56 ORT_VERSION=1.31.1 PYTHON_VERSION=3.12 bench/gpu_bundle.sh .gpu
#
# onnxruntime-gpu 1.31.1 is built for CUDA 13, which the PyTorch 2.11 wheels bring.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bench/gpu_bundle.sh OUT}
PART_MIB=${PART_MIB:-56}
ORT_VERSION=${ORT_VERSION:-1.31.1}
PYTHON_VERSION=${PYTHON_VERSION:-3.12}

cargo build --release -q -p kep -p kep-bench --features kep/nvml
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bundle/bin" "$STAGE/bundle/site"
for b in kep kep-bench; do
  strip -o "$STAGE/bundle/bin/$b" "${CARGO_TARGET_DIR:-target}/release/$b"
done
python3 -m pip download -q --no-deps --only-binary=:all: --implementation cp \
  --python-version "$PYTHON_VERSION" --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  -d "$STAGE/wheel" "onnxruntime-gpu==$ORT_VERSION"
# The package itself; its dependencies (numpy, protobuf, flatbuffers …) are the machine's.
python3 -m zipfile -e "$STAGE"/wheel/*.whl "$STAGE/bundle/site"
rm -rf "$STAGE"/bundle/site/*.dist-info

rm -rf "$OUT"
mkdir -p "$OUT"
tar -C "$STAGE/bundle" -cf - . | xz -T0 -6 | split -d -a 2 -b "${PART_MIB}M" - "$STAGE/part."
n=0
for part in "$STAGE"/part.*; do
  n=$((n + 1))
  mkdir "$OUT/$n"
  mv "$part" "$OUT/$n/"
done
# Every folder holds the whole list, so that any one of them says what is still missing.
(cd "$OUT" && sha256sum */part.* | sed 's| [^ ]*/| |' >"$STAGE/SHA256SUMS")
for d in "$OUT"/*/; do cp "$STAGE/SHA256SUMS" "$d"; done
echo "$OUT: $n parts, $(du -sh "$OUT" | cut -f1); each folder goes over by itself"
