#!/usr/bin/env bash
# Builds mantissa for one GPU architecture here and stages everything a GPU machine without
# package access needs into .gpu/ (ignored by git): the test binaries, libmantissa, the
# non-system shared libraries they load, and the test data. Then run scripts/gpu/run.sh there
# (carrying .gpu).
#   scripts/gpu/prepare.sh [ARCH]     ARCH defaults to 90 (H100/H200)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
arch=${1:-90}
build=$root/build-gpu-sm$arch
stage=$root/.gpu
"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMANTISSA_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" >/dev/null
cmake --build "$build" -j "$(nproc)"
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib"
cp "$build"/tests/test_* "$stage/bin/"
cp "$build"/examples/* "$stage/bin/" 2>/dev/null || true
find "$stage/bin" -type f ! -perm -u+x -delete
cp -L "$build"/libmantissa.so* "$stage/lib/" 2>/dev/null || true
# Shared libraries from Debian packages the GPU machine does not have (CUDA libraries are
# taken from the machine itself).
for bin in "$stage"/bin/* "$stage"/lib/libmantissa.so*; do
  ldd "$bin" 2>/dev/null | awk '/=> \// {print $3}'
done | sort -u | grep -E 'libfmt|libspdlog|libopenblas|libgfortran|libquadmath|libyaml-cpp|libgtest|libgomp|libbenchmark' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
mkdir -p "$stage/tests" && cp -r "$root/tests/golden" "$stage/tests/"
du -sh "$stage"
