#!/usr/bin/env bash
# Builds mantissa for one GPU architecture on this machine (no GPU needed) and packs everything a
# GPU machine without package access needs into .gpu/stage.tar.xz (ignored by git), laid out by
# scripts/gpu/stage.sh: the test binaries, the examples, the `mantissa` command, the benchmark
# binary, libmantissa and libmantissa_runner, and every shared library they load except glibc's,
# the C++ runtime (shipped in lib/compat for an older machine) and the CUDA libraries. The stage
# is built without MPI (the GPU machine has no mpiexec). scripts/gpu/check-stage.sh then proves
# from the ELF headers that the stage carries its closure; the archive is written only if so.
# CUDA code is built with -lineinfo so compute-sanitizer reports source lines, and with the cuDNN
# frontend for cuDNN's fused attention: version $frontend_version below, installed from PyPI into
# the build directory with nothing else (it is header-only: nothing of it is staged). A build
# that does not find it stops here, after configuring: a stage without fused attention would
# skip the test of it. commit.txt says "-dirty" when the tree had changes. Run this before asking
# for a GPU, never on the lease; then `scripts/gpu/run.sh first-light` there with .gpu/ carried
# (docs/gpu-runs.md). The packed stage must stay under 40 MiB (the carry limit is 64 MiB).
#   scripts/gpu/prepare.sh [ARCH]     ARCH defaults to 90 (H100/H200)
# Settings: BUILD_DIR (build-gpu-smARCH); MANTISSA_CUDNN_FRONTEND, a folder holding
# include/cudnn_frontend.h to use instead of the pinned one from PyPI.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
arch=${1:-90}
build=${BUILD_DIR:-$root/build-gpu-sm$arch}
out=$root/.gpu
frontend_version=1.32.0
max_packed_mib=40
"$root/scripts/install-deps.sh"
frontend=${MANTISSA_CUDNN_FRONTEND:-$build/cudnn-frontend-$frontend_version}
if [ -z "${MANTISSA_CUDNN_FRONTEND:-}" ] && [ ! -f "$frontend/include/cudnn_frontend.h" ]; then
  python3 -m venv "$build/frontend-venv" >&2
  "$build/frontend-venv/bin/pip" install -q --no-deps --target "$frontend" \
    "nvidia-cudnn-frontend==$frontend_version" >&2
fi
mkdir -p "$build"
if ! cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMANTISSA_CUDA=ON \
       -DCMAKE_CUDA_ARCHITECTURES="$arch" -DMANTISSA_CUDA_ARCHITECTURES="$arch" \
       -DMANTISSA_BUILD_BENCHMARKS=ON -DMANTISSA_MPI=OFF -DCMAKE_CUDA_FLAGS=-lineinfo \
       -DCUDNN_FRONTEND_ROOT="$frontend" -UCUDNN_FRONTEND_INCLUDE_DIR >"$build/configure.log" 2>&1; then
  tail -n 20 "$build/configure.log" >&2
  echo "prepare.sh: configuring failed (the whole log: $build/configure.log)" >&2
  exit 1
fi
found=$(sed -n 's/^CUDNN_FRONTEND_INCLUDE_DIR:[A-Z]*=//p' "$build/CMakeCache.txt")
if [ -z "$found" ] || [[ $found == *NOTFOUND ]]; then
  echo "prepare.sh: no cuDNN fused attention in this build: cudnn_frontend.h is not under $frontend/include, so the stage would skip its test; install nvidia-cudnn-frontend==$frontend_version there (or unset MANTISSA_CUDNN_FRONTEND)" >&2
  exit 1
fi
cmake --build "$build" -j "$(nproc)" >&2

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
"$root/scripts/gpu/stage.sh" "$build" "$stage/s" "$arch"
"$root/scripts/gpu/check-stage.sh" "$stage/s" >&2
mkdir -p "$out"
tar -C "$stage/s" -cJf "$out/stage.tar.xz" .
packed=$(du -m "$out/stage.tar.xz" | cut -f1)
if [ "$packed" -ge "$max_packed_mib" ]; then
  echo "prepare.sh: the packed stage is $packed MiB, over its $max_packed_mib MiB limit" >&2
  exit 1
fi
# A failed list from an earlier lease would make a later follow-up rerun the wrong tests.
rm -f "$out/first-light-failed.txt"
echo "prepare.sh: $out/stage.tar.xz ($packed MiB packed; cuDNN frontend $frontend_version)" >&2
echo "$out/stage.tar.xz"
