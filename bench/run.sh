#!/usr/bin/env bash
# Builds mantissa with its benchmarks and the libtorch peer, runs them and today's PyTorch (eager
# and torch.compile) on the same workloads, interleaved, and prints one table (bench/collect.py).
# From a fresh clone:
#
#   bench/run.sh [--markdown FILE] [--rounds N] [--reps N] [--min-time S] [--workloads a,b]
#                [--quick] [--no-peers] [--no-compile]
#
# Installs what is missing with apt (mantissa's build dependencies, libbenchmark-dev,
# libtorch-dev: the libtorch peer is Debian's 1.13). The PyTorch peer is PyPI's current torch (and
# torchao for the float8 rows), in
# a virtual environment this script creates once in $TORCH_VENV (default $BUILD_DIR/torch-venv;
# several GiB: PyPI's wheel is the CUDA build, whose CPU use is what runs here). Builds in
# $BUILD_DIR (default build-bench), Release, with the CUDA backend when nvcc is found; CUDA rows
# are printed when a GPU is present (gpt2_124m runs on the GPU only, gpt_tiny on the CPU only).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build-bench}"
markdown="" rounds=3 reps=3 min_time=0.2 workloads="add,linear_fb,toy,mlp512,mlp4096,gpt_tiny,gpt2_124m" peers=1
compile=1
while [ $# -gt 0 ]; do
  case "$1" in
    --markdown) markdown="$(realpath -m "$2")"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --min-time) min_time="$2"; shift 2 ;;
    --workloads) workloads="$2"; shift 2 ;;
    --quick) rounds=1 reps=2 min_time=0.05; shift ;;
    --no-peers) peers=0; shift ;;
    --no-compile) compile=0; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "bench/run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

# ---- dependencies -------------------------------------------------------------------------------
"$root/scripts/install-deps.sh"
if [ "$peers" = 1 ]; then
  missing=()
  for p in libbenchmark-dev libtorch-dev python3-venv; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "bench/run.sh: installing missing packages: ${missing[*]}" >&2
    sudo_cmd=()
    [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
    export DEBIAN_FRONTEND=noninteractive
    "${sudo_cmd[@]}" apt-get update -qq
    "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
fi

# ---- build --------------------------------------------------------------------------------------
jobs="${JOBS:-$(nproc)}"
# A new build directory: Release, no tests or examples, the CUDA backend when nvcc is found. An
# existing one keeps its settings (MANTISSA_CUDA=ON/OFF in the environment still applies).
settings=()
[ -f "$build/CMakeCache.txt" ] || settings=(-DCMAKE_BUILD_TYPE=Release -DMANTISSA_BUILD_TESTS=OFF
                                            -DMANTISSA_BUILD_EXAMPLES=OFF -DMANTISSA_CUDA=AUTO)
[ -n "${MANTISSA_CUDA:-}" ] && settings+=(-DMANTISSA_CUDA="$MANTISSA_CUDA")
cmake -S "$root" -B "$build" -G Ninja "${settings[@]}" -DMANTISSA_BUILD_BENCHMARKS=ON >&2
ninja -C "$build" -j"$jobs" mantissa_bench >&2
devices=cpu  # CUDA rows when a GPU is visible (mantissa_bench registers them if its build has CUDA)
if nvidia-smi -L >/dev/null 2>&1; then devices=cpu,cuda; fi
peer_args=()
if [ "$peers" = 1 ]; then
  # The CMake package of Debian's libtorch-dev; elsewhere, point Torch_DIR at yours.
  torch_dir="${Torch_DIR:-/usr/lib/x86_64-linux-gnu/cmake/Torch}"
  cmake -S "$root/bench/peers/libtorch" -B "$build/peers-libtorch" -G Ninja \
        -DCMAKE_BUILD_TYPE=Release -DTorch_DIR="$torch_dir" >&2
  ninja -C "$build/peers-libtorch" -j"$jobs" >&2
  # Today's PyTorch from PyPI, in its own virtual environment (Debian's python3-torch 1.13 stays
  # for the golden files of scripts/golden/).
  venv="${TORCH_VENV:-$build/torch-venv}"
  if ! "$venv/bin/python" -c "import sys, torch; sys.exit(int(torch.__version__.split('.')[0]) < 2)" \
       2>/dev/null; then
    echo "bench/run.sh: installing PyTorch 2.x from PyPI into $venv (once)" >&2
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install -q --upgrade pip >&2
    "$venv/bin/pip" install -q torch numpy >&2
  fi
  # torchao: the float8 rows' peer (its float8 training, Float8LinearConfig recipes).
  if ! "$venv/bin/python" -c "import torchao" 2>/dev/null; then
    echo "bench/run.sh: installing torchao from PyPI into $venv (once)" >&2
    "$venv/bin/pip" install -q torchao >&2
  fi
  python="$venv/bin/python"
  peer_args=(--libtorch-peer "$build/peers-libtorch/libtorch_peer"
             --python "$python" --pytorch-peer "$root/bench/peers/pytorch_eager.py")
  [ "$compile" = 1 ] && peer_args+=(--compile-peer)
  versions="libtorch $(dpkg-query -W -f='${Version}' libtorch-dev 2>/dev/null || echo '?') (Debian)"
  versions+=", PyTorch $("$python" -c 'import torch; print(torch.__version__)') (PyPI)"
  peer_args+=(--peer-versions "$versions")
fi

commit="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
git -C "$root" diff --quiet HEAD 2>/dev/null || commit="$commit+dirty"
args=(--mantissa-bench "$build/bin/mantissa_bench" "${peer_args[@]}" --rounds "$rounds"
      --reps "$reps" --min-time "$min_time" --workloads "$workloads" --devices "$devices"
      --commit "$commit")
[ -n "$markdown" ] && args+=(--markdown "$markdown")
exec python3 "$root/bench/collect.py" "${args[@]}"
