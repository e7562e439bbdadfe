#!/usr/bin/env bash
# Builds mantissa for one GPU architecture on this machine (no GPU needed) and packs everything a
# GPU machine without package access needs into .gpu/stage.tar.xz (ignored by git), laid out by
# scripts/gpu/stage.sh: the test binaries, the examples, the `mantissa` command, the benchmark
# binary, libmantissa and libmantissa_runner, and every shared library they load except glibc's,
# the C++ runtime (shipped in lib/compat for an older machine) and the CUDA libraries. The stage
# is built without MPI (the GPU machine has no mpiexec). scripts/gpu/check-stage.sh then proves
# from the ELF headers that the stage carries its closure; the archive is written only if so.
# CUDA code is built with -lineinfo so compute-sanitizer reports source lines, and with the cuDNN
# frontend (fetched from PyPI into the build directory) for cuDNN's fused attention. commit.txt says
# "-dirty" when the tree had changes. Run this before asking for a GPU, never on the lease; then
# `scripts/gpu/run.sh first-light` there with .gpu/ carried (docs/gpu-runs.md).
#   scripts/gpu/prepare.sh [ARCH]     ARCH defaults to 90 (H100/H200)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
arch=${1:-90}
build=${BUILD_DIR:-$root/build-gpu-sm$arch}
out=$root/.gpu
"$root/scripts/install-deps.sh"
# cuDNN's fused attention: the cuDNN frontend's headers from PyPI, in a venv of the build's own
# (header-only: nothing of it is staged).
frontend=$build/cudnn-frontend
if [ ! -f "$frontend/include/cudnn_frontend.h" ]; then
  python3 -m venv "$build/frontend-venv" >&2
  "$build/frontend-venv/bin/pip" install -q --target "$frontend" nvidia-cudnn-frontend >&2
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMANTISSA_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" -DMANTISSA_CUDA_ARCHITECTURES="$arch" \
  -DMANTISSA_BUILD_BENCHMARKS=ON -DMANTISSA_MPI=OFF -DCMAKE_CUDA_FLAGS=-lineinfo \
  -DCUDNN_FRONTEND_ROOT="$frontend" >&2
cmake --build "$build" -j "$(nproc)" >&2

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
"$root/scripts/gpu/stage.sh" "$build" "$stage/s" "$arch"
"$root/scripts/gpu/check-stage.sh" "$stage/s" >&2
mkdir -p "$out"
tar -C "$stage/s" -cJf "$out/stage.tar.xz" .
du -h "$out/stage.tar.xz" >&2
echo "$out/stage.tar.xz"
