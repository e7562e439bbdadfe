#!/usr/bin/env bash
# Builds mantissa for one GPU architecture on this machine and packs everything a GPU machine
# without package access needs into .gpu/stage.tar.xz (ignored by git): the test binaries, the
# examples, the `mantissa` command, the benchmark binary, libmantissa and libmantissa_runner, and
# the non-system shared libraries they load. Binaries are stripped and the archive compressed so
# it stays small to copy. CUDA code is built with -lineinfo so compute-sanitizer reports source
# lines. The build machine's libstdc++ and libgcc_s go to lib/compat, for a GPU machine whose own
# are older (run.sh uses them only then). commit.txt says "-dirty" when the tree had changes.
# Then run scripts/gpu/run.sh on the GPU machine with .gpu/ alongside (docs/gpu-runs.md).
#   scripts/gpu/prepare.sh [ARCH]     ARCH defaults to 90 (H100/H200)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
arch=${1:-90}
build=${BUILD_DIR:-$root/build-gpu-sm$arch}
out=$root/.gpu
"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMANTISSA_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" -DMANTISSA_CUDA_ARCHITECTURES="$arch" \
  -DMANTISSA_BUILD_BENCHMARKS=ON -DCMAKE_CUDA_FLAGS=-lineinfo >&2
cmake --build "$build" -j "$(nproc)" >&2

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib/compat"
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
for lib in libstdc++.so.6 libgcc_s.so.1; do
  path=$(ldd "$stage/lib/libmantissa.so.0" | awk -v l="$lib" '$1 == l {print $3}')
  [ -n "$path" ] && cp -L "$path" "$stage/lib/compat/"
done
strip --strip-unneeded "$stage"/bin/* "$stage"/lib/*.so* "$stage"/lib/compat/* 2>/dev/null || true
commit=$(git -C "$root" rev-parse --short HEAD)
[ -n "$(git -C "$root" status --porcelain)" ] && commit="$commit-dirty"
echo "$commit" > "$stage/commit.txt"
echo "$arch" > "$stage/arch.txt"
mkdir -p "$out"
tar -C "$stage" -cJf "$out/stage.tar.xz" .
du -h "$out/stage.tar.xz" >&2
echo "$out/stage.tar.xz"
