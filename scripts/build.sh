#!/usr/bin/env bash
# Configures and builds mantissa. Settings (environment variables):
#   BUILD_DIR                    build directory (default: build, or build-cpu with --cpu-only)
#   MANTISSA_CUDA                AUTO (default: CUDA backend when nvcc is found), ON or OFF
#   MANTISSA_CUDA_ARCHITECTURES  CUDA architectures (default 80;86;89;90)
#   MANTISSA_WERROR              ON to treat warnings as errors
#   MANTISSA_SANITIZE            ON for an AddressSanitizer + UndefinedBehaviorSanitizer build
#   MANTISSA_UNITY_BUILD         OFF to compile every C++ file alone (default ON: in batches,
#                                faster from scratch; OFF rebuilds less after editing one file;
#                                --sanitize defaults to OFF, so every file compiles on its own too)
#   CMAKE_BUILD_TYPE             Release (default), Debug, RelWithDebInfo
#   MANTISSA_BUILD_TARGETS       build only these targets (space-separated; default: all)
# Options: --cpu-only (same as MANTISSA_CUDA=OFF).
#          --sanitize: the CPU-only AddressSanitizer + UndefinedBehaviorSanitizer build with clang
#          (MANTISSA_SANITIZE_CXX, default clang++-19), with the libFuzzer targets of fuzz/ (in
#          build-asan/; what CI tests and fuzzes).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cuda=${MANTISSA_CUDA:-AUTO}
unity=${MANTISSA_UNITY_BUILD:-ON}
sanitize=${MANTISSA_SANITIZE:-OFF}
default_dir=build
extra=()
for arg in "$@"; do
  case "$arg" in
    --cpu-only) cuda=OFF; default_dir=build-cpu ;;
    --sanitize)
      cuda=OFF; sanitize=ON; default_dir=build-asan; unity=${MANTISSA_UNITY_BUILD:-OFF}
      extra=(-DCMAKE_CXX_COMPILER="${MANTISSA_SANITIZE_CXX:-clang++-19}" -DMANTISSA_FUZZ=ON) ;;
    *) echo "build.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done
build_dir=${BUILD_DIR:-$root/$default_dir}
# ccache (used when installed) sees paths relative to the checkout, so a second clone of the same
# sources (another folder, a CI checkout) reuses what the first compiled.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
[ "$sanitize" = ON ] && [ "$default_dir" != build-asan ] && [ -z "${BUILD_DIR:-}" ] &&
  build_dir=$root/build-sanitize
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S "$root" -B "$build_dir" -G Ninja \
  -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-Release}" \
  -DMANTISSA_CUDA="$cuda" \
  -DMANTISSA_CUDA_ARCHITECTURES="${MANTISSA_CUDA_ARCHITECTURES:-80;86;89;90}" \
  -DMANTISSA_WERROR="${MANTISSA_WERROR:-OFF}" \
  -DMANTISSA_SANITIZE="$sanitize" \
  -DMANTISSA_UNITY_BUILD="$unity" "${extra[@]}" >&2
targets=()
for t in ${MANTISSA_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build_dir" -j "$jobs" "${targets[@]}" >&2
echo "$build_dir"
