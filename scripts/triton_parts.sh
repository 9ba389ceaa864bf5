#!/usr/bin/env bash
# Here (no GPU): pack a newer Triton for the GPU machine, which has no package index and takes at most 64 MiB per
# call (../shared/DEVICE_TRITON.md). The wheel is slimmed to what an H100 run needs (no AMD backend, no Blackwell
# ptxas, no profiler libraries: 272 MB of wheel -> ~105 MB of tar.xz), then split into .tw/part_* (git-excluded).
# On the device, carry one part per call into /tmp/tw, then: TRITON_PARTS=/tmp/tw bash scripts/gpu.sh test
#     bash scripts/triton_parts.sh 3.9.0
set -euo pipefail
V=${1:-3.9.0}
cd "$(dirname "$0")/.."
mkdir -p ~/.cache/wl-triton
ls ~/.cache/wl-triton/triton-"$V"-*.whl >/dev/null 2>&1 || python3 -m pip download -q --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  -d ~/.cache/wl-triton "triton==$V"
tree=$(mktemp -d)
python3 -m zipfile -e ~/.cache/wl-triton/triton-"$V"-*.whl "$tree"
t="$tree/triton"
rm -rf "$t/backends/amd" "$t/backends/nvidia/bin/ptxas-blackwell" "$t/backends/nvidia/lib/cupti-blackwell" \
  "$t/backends/nvidia/lib/cupti" "$t/_C/libproton.so" "$t"/instrumentation/*.so
# Backends are found through the dist-info's entry points; 3.9 asks for ptxas-blackwell even for sm_90a, and zip
# extraction drops the executable bits.
sed -i '/amd/d' "$tree"/triton-*.dist-info/entry_points.txt
chmod +x "$t"/backends/nvidia/bin/*
ln -sf ptxas "$t/backends/nvidia/bin/ptxas-blackwell"
grep -qx '/.tw/' .git/info/exclude || echo '/.tw/' >> .git/info/exclude
rm -rf .tw && mkdir .tw
tar -C "$tree" -cf - . | xz -6 -T0 | split -b 50M - .tw/part_
rm -rf "$tree"
ls -la .tw
