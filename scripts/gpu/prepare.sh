#!/usr/bin/env bash
# Builds mantissa for one GPU architecture on this machine and packs everything a GPU machine
# without package access needs into .gpu/stage.tar.xz (ignored by git): the test binaries, the
# examples, the `mantissa` command, the benchmark binary, libmantissa and libmantissa_runner, and
# the non-system shared libraries they load. Binaries are stripped and the archive compressed so
# it stays small to copy. Then run scripts/gpu/run.sh on the GPU machine with .gpu/ alongside.
#   scripts/gpu/prepare.sh [ARCH]     ARCH defaults to 90 (H100/H200)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
arch=${1:-90}
build=${BUILD_DIR:-$root/build-gpu-sm$arch}
out=$root/.gpu
"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMANTISSA_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" -DMANTISSA_CUDA_ARCHITECTURES="$arch" \
  -DMANTISSA_BUILD_BENCHMARKS=ON >&2
cmake --build "$build" -j "$(nproc)" >&2

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
cp "$build"/tests/test_* "$stage/bin/"
cp "$build"/examples/* "$stage/bin/" 2>/dev/null || true
cp "$build"/bin/mantissa "$build"/bin/mantissa_bench "$stage/bin/"
find "$stage/bin" -type f ! -perm -u+x -delete
cp -L "$build"/libmantissa.so.0 "$build"/libmantissa_runner.so.0 "$stage/lib/"
# Shared libraries from Debian packages the GPU machine does not have (the CUDA libraries are
# the machine's own).
for bin in "$stage"/bin/* "$stage"/lib/*.so*; do
  ldd "$bin" 2>/dev/null | awk '/=> \// {print $3}'
done | sort -u |
  grep -E 'libfmt|libspdlog|libopenblas|libgfortran|libquadmath|libyaml-cpp|libgtest|libgomp|libbenchmark' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
strip --strip-unneeded "$stage"/bin/* "$stage"/lib/*.so* 2>/dev/null || true
git -C "$root" rev-parse --short HEAD > "$stage/commit.txt"
echo "$arch" > "$stage/arch.txt"
mkdir -p "$out"
tar -C "$stage" -cJf "$out/stage.tar.xz" .
du -h "$out/stage.tar.xz" >&2
echo "$out/stage.tar.xz"
