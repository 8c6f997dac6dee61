#!/usr/bin/env bash
# The other half of bench/gpu_bundle.sh, on the GPU machine: keeps each part it is given
# in DEST (after checking its digest), and once DEST has them all, unpacks the bundle
# there and writes DEST/env.sh, which points the benchmarks at it (KEP_BIN_DIR, PYTHONPATH).
# Needs nothing but bash, coreutils and python3 (the xz stream is read by Python's lzma).
#
#   bench/gpu_unbundle.sh DEST PART_FOLDER…     # e.g. /tmp/gpu .gpu/1, then .gpu/2 …
#   . DEST/env.sh && bench/gpu_resnet.sh
set -euo pipefail
DEST=${1:?usage: bench/gpu_unbundle.sh DEST PART_FOLDER...}
shift
mkdir -p "$DEST/parts"
for d in "$@"; do
  cp "$d"/part.* "$d/SHA256SUMS" "$DEST/parts/"
done
cd "$DEST/parts"
have=$(ls part.* 2>/dev/null | wc -l)
want=$(wc -l <SHA256SUMS)
if [ "$have" -lt "$want" ]; then
  sha256sum --quiet -c --ignore-missing SHA256SUMS
  echo "gpu_unbundle: $have of $want parts in $DEST"
  exit 0
fi
sha256sum --quiet -c SHA256SUMS
cat part.* | python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer, 1 << 20)' |
  tar -C "$DEST" -xf -
rm -rf "$DEST/parts"
cat >"$DEST/env.sh" <<EOF
export KEP_BIN_DIR=$DEST/bin
export PYTHONPATH=$DEST/site\${PYTHONPATH:+:\$PYTHONPATH}
EOF
for tool in jq curl nvidia-smi; do
  command -v "$tool" >/dev/null || echo "gpu_unbundle: $tool is missing here; the benchmarks need it" >&2
done
echo "gpu_unbundle: unpacked in $DEST ($(du -sh "$DEST" | cut -f1)); . $DEST/env.sh"
