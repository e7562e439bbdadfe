#!/usr/bin/env bash
# Installs the Debian packages mantissa needs, if any are missing. The CUDA toolkit (with cuBLAS,
# cuBLASLt and cuDNN 9) is optional and is not installed here: when nvcc is present in
# /usr/local/cuda or on PATH, the CUDA backend is built too.
# --sanitize also installs clang 19 (Debian 12's newest; clang 14 lacks __builtin_cpu_supports
# ("f16c")) with its sanitizer and libFuzzer runtimes, its OpenMP and llvm-symbolizer (file:line
# in reports), for `scripts/test.sh --sanitize` and scripts/fuzz.sh.
# Open MPI is optional for a build (without it, ranks meet only through a store directory) and is
# installed here so that ranks started by mpirun meet through MPI and the suite tests that path.
set -euo pipefail

packages=(build-essential cmake ninja-build ccache pkg-config libgtest-dev googletest
          libspdlog-dev libfmt-dev libopenblas-dev libdnnl-dev libyaml-cpp-dev libcli11-dev
          nlohmann-json3-dev libprotobuf-dev protobuf-compiler libbenchmark-dev
          libgloo-dev libhiredis-dev redis-server openmpi-bin libopenmpi-dev)
for arg in "$@"; do
  case "$arg" in
    --sanitize) packages+=(clang-19 libclang-rt-19-dev libomp-19-dev llvm-19) ;;
    *) echo "install-deps.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "mantissa: installing missing packages: ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "mantissa: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
