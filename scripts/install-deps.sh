#!/usr/bin/env bash
# Installs the Debian packages mantissa needs, if any are missing. The CUDA toolkit (with cuBLAS,
# cuBLASLt and cuDNN 9) is optional and is not installed here: when nvcc is present in
# /usr/local/cuda or on PATH, the CUDA backend is built too.
#   (no option)  everything the whole test suite uses: the build's libraries, GoogleTest, Google
#                Benchmark, Gloo with hiredis and redis-server (data-parallel ranks and their
#                Redis rendezvous), Open MPI (ranks started by mpirun meet through MPI)
#   --build      only what building the library, the `mantissa` command and the examples needs
#                (what scripts/run-example.sh installs); the rest is optional for a build
#   --sanitize   also clang 19 (Debian 12's newest; clang 14 lacks __builtin_cpu_supports
#                ("f16c")) with its sanitizer and libFuzzer runtimes, its OpenMP and
#                llvm-symbolizer (file:line in reports), for `scripts/test.sh --sanitize` and
#                scripts/fuzz.sh
# apt's own output goes to a log file; one line says what is installed and why, and a failure
# prints the end of the log.
set -euo pipefail

build_packages=(build-essential cmake ninja-build ccache pkg-config libspdlog-dev libfmt-dev
                libopenblas-dev libdnnl-dev libyaml-cpp-dev libcli11-dev nlohmann-json3-dev
                libprotobuf-dev protobuf-compiler)
test_packages=(libgtest-dev googletest libbenchmark-dev libgloo-dev libhiredis-dev redis-server
               openmpi-bin libopenmpi-dev)
sanitize_packages=(clang-19 libclang-rt-19-dev libomp-19-dev llvm-19)
packages=("${build_packages[@]}" "${test_packages[@]}")
why="the test suite"
for arg in "$@"; do
  case "$arg" in
    --build) packages=("${build_packages[@]}"); why="building mantissa" ;;
    --sanitize)
      packages+=("${sanitize_packages[@]}")
      why="the test suite under AddressSanitizer and UBSan (clang 19)" ;;
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
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "mantissa: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
log=${TMPDIR:-/tmp}/mantissa-apt-$(id -u).log
echo "mantissa: installing ${#missing[@]} Debian packages for $why (apt's output: $log):" \
  "${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
if ! { "${sudo_cmd[@]}" apt-get update -qq &&
       "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
     >"$log" 2>&1; then
  echo "mantissa: installing packages failed; the end of $log:" >&2
  tail -n 20 "$log" >&2
  exit 1
fi
