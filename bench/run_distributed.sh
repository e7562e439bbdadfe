#!/usr/bin/env bash
# Builds mantissa_dist_bench, runs it and the PyTorch peer (bench/peers/torch_distributed.py,
# torch.distributed on Gloo) interleaved, and prints one table of ratios
# (bench/collect_distributed.py): allreduce bus bandwidth per message size at 2 ranks, and MLP 512
# training samples/s at 1 rank without DDP, 1 rank with DDP and 2 ranks with DDP.
#
#   bench/run_distributed.sh [--markdown FILE] [--rounds N] [--reps N] [--min-time S]
#                            [--threads T] [--sizes B,B,...] [--quick]
#
# --threads: intra-op threads per rank on both sides (default 1: 2 ranks x 1 thread fill 2 cores).
# Needs Gloo (libgloo-dev) and python3-torch; builds in $BUILD_DIR (default build-bench).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build-bench}"
markdown="" rounds=3 reps=3 min_time=0.2 threads=1 sizes=""
while [ $# -gt 0 ]; do
  case "$1" in
    --markdown) markdown="$(realpath -m "$2")"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --min-time) min_time="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    --quick) rounds=1 reps=2 min_time=0.05; shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "bench/run_distributed.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

"$root/scripts/install-deps.sh"
if ! dpkg-query -W -f='${Status}' python3-torch 2>/dev/null | grep -q "install ok installed"; then
  echo "bench/run_distributed.sh: installing python3-torch" >&2
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends python3-torch
fi

jobs="${JOBS:-$(nproc)}"
settings=()
[ -f "$build/CMakeCache.txt" ] || settings=(-DCMAKE_BUILD_TYPE=Release -DMANTISSA_BUILD_TESTS=OFF
                                            -DMANTISSA_BUILD_EXAMPLES=OFF -DMANTISSA_CUDA=AUTO)
[ -n "${MANTISSA_CUDA:-}" ] && settings+=(-DMANTISSA_CUDA="$MANTISSA_CUDA")
cmake -S "$root" -B "$build" -G Ninja "${settings[@]}" -DMANTISSA_BUILD_BENCHMARKS=ON >&2
ninja -C "$build" -j"$jobs" mantissa_dist_bench >&2

# Debian's python3-torch lives in the system interpreter, not in a pyenv/venv one.
python="${PYTHON:-/usr/bin/python3}"
"$python" -c "import torch.distributed" 2>/dev/null || python="$(command -v python3)"

commit="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
git -C "$root" diff --quiet HEAD 2>/dev/null || commit="$commit+dirty"
args=(--dist-bench "$build/bin/mantissa_dist_bench" --python "$python"
      --peer "$root/bench/peers/torch_distributed.py" --rounds "$rounds" --reps "$reps"
      --min-time "$min_time" --threads "$threads" --commit "$commit")
[ -n "$sizes" ] && args+=(--sizes "$sizes")
[ -n "$markdown" ] && args+=(--markdown "$markdown")
exec python3 "$root/bench/collect_distributed.py" "${args[@]}"
