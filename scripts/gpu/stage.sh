#!/usr/bin/env bash
# Lays out a GPU stage from a build tree, unpacked, in DIR (prepare.sh packs it):
#   bin/           the test binaries, the examples, `mantissa`, `mantissa_bench` (stripped)
#   lib/           libmantissa, libmantissa_runner and every shared library they and the binaries
#                  load, found by the loader here, except glibc's, the C++ runtime and the CUDA
#                  libraries (scripts/gpu/system-libs.sh): the GPU machine has no package manager
#   lib/compat/    this machine's libstdc++ and libgcc_s, for a GPU machine whose own are older
#   cuda-tests.txt the test binaries that touch CUDA (their source has MT_REQUIRE_GPU()), in the
#                  order first-light runs them: "NAME LOADING [FILTER]", LOADING eager for the
#                  binaries whose tests hold a stream (their source uses HeldStream: a module
#                  loaded lazily inside the hold would wait for it) and lazy for the rest, and the
#                  gtest filter of its GPU tests when a binary also holds CPU tests
#   commit.txt, arch.txt
#   scripts/gpu/stage.sh BUILD_DIR DIR [ARCH]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -ge 2 ] || { echo "usage: stage.sh BUILD_DIR DIR [ARCH]" >&2; exit 2; }
build=$1 stage=$2 arch=${3:-90}
# shellcheck source=system-libs.sh
. "$root/scripts/gpu/system-libs.sh"
[ -f "$build/libmantissa.so.0" ] || { echo "stage.sh: no libmantissa.so.0 in $build: build first" >&2; exit 2; }
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib/compat"
cp "$build"/tests/test_* "$stage/bin/"
cp "$build"/examples/* "$stage/bin/" 2>/dev/null || true
cp "$build"/bin/mantissa "$stage/bin/"
[ -x "$build/bin/mantissa_bench" ] && cp "$build/bin/mantissa_bench" "$stage/bin/"
find "$stage/bin" -type f ! -perm -u+x -delete
cp -L "$build"/libmantissa.so.0 "$build"/libmantissa_runner.so.0 "$stage/lib/"

# The closure: ldd lists every library the loader maps, direct or not.
for f in "$stage"/bin/* "$stage"/lib/*.so*; do
  { ldd "$f" 2>/dev/null || true; } | awk '/=> \// {print $1, $3}'
done | sort -u | while read -r soname path; do
  if is_glibc "$soname" || is_cuda_library "$soname"; then continue; fi
  if is_cxx_runtime "$soname"; then
    cp -L "$path" "$stage/lib/compat/$soname"
  elif [ ! -e "$stage/lib/$soname" ]; then
    cp -L "$path" "$stage/lib/$soname"
  fi
done
strip --strip-unneeded "$stage"/bin/* "$stage"/lib/*.so* "$stage"/lib/compat/* 2>/dev/null || true

# The binaries that touch CUDA: test_cuda first (device discovery, copies), then the other
# test_cuda* ones whole, then the mixed binaries with a gtest filter of their tests that call
# MT_REQUIRE_GPU() (their CPU tests run in CI), and the one that needs 8 GiB of device memory last.
gpu_tests() {  # the Suite.Name (TEST_P: *Suite.Name/*) of each test whose body requires a GPU
  awk '/^TEST(_F|_P)?\(/ { line = $0; sub(/^TEST(_F|_P)?\(/, "", line); sub(/\).*/, "", line)
         gsub(/ /, "", line); split(line, a, ","); cur = a[1] "." a[2]; p = ($0 ~ /^TEST_P/) }
       /MT_REQUIRE_GPU\(\)/ && cur != "" { print (p ? "*" cur "/*" : cur); cur = "" }' "$1" |
    paste -sd: -
}
for src in "$root"/tests/test_cuda*.cpp "$root"/tests/test_*.cpp; do
  name=$(basename "$src" .cpp)
  grep -q 'MT_REQUIRE_GPU()' "$src" && [ -x "$stage/bin/$name" ] || continue
  loading=lazy
  grep -q 'HeldStream' "$src" && loading=eager
  case "$name" in
    test_cuda*) echo "$name $loading" ;;
    *) echo "$name $loading $(gpu_tests "$src")" ;;
  esac
done | awk '!seen[$1]++' | awk '$1 == "test_cuda_large" {last = $0; next} {print} END {if (last) print last}' \
  >"$stage/cuda-tests.txt"
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -n "$(git -C "$root" status --porcelain 2>/dev/null)" ] && commit="$commit-dirty"
echo "$commit" >"$stage/commit.txt"
echo "$arch" >"$stage/arch.txt"
