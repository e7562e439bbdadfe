#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with .gpu/stage.tar.xz made by
# scripts/gpu/prepare.sh: every test binary (CUDA tests included; optionally the CUDA ones again
# under compute-sanitizer), then the benchmarks (mantissa on cpu and cuda, PyTorch eager and
# CUDA-graphed with the PyTorch installed there), and prints a summary table. Logs and tables go
# to $OUT when set, else to ./gpu-logs.
#   scripts/gpu/run.sh [--sanitize] [--no-bench] [--quick-bench]
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$root/gpu-logs}
sanitize=0 bench=1 bench_args=()
for arg in "$@"; do
  case "$arg" in
    --sanitize) sanitize=1 ;;
    --no-bench) bench=0 ;;
    --quick-bench) bench_args+=(--rounds 1 --reps 2 --min-time 0.05) ;;
    *) echo "run.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
stage=$(mktemp -d)
tar -C "$stage" -xJf "$root/.gpu/stage.tar.xz" || { echo "run.sh: no .gpu/stage.tar.xz" >&2; exit 2; }

# CUDA libraries: the toolkit's, or the nvidia-* Python packages that come with PyTorch.
cuda_libs=$(python3 -c "import nvidia, os; d=os.path.dirname(nvidia.__path__[0]); print(':'.join(r for r, _, f in os.walk(d) if any('.so' in x for x in f)))" 2>/dev/null || true)
export LD_LIBRARY_PATH="$stage/lib:/usr/local/cuda/lib64:${cuda_libs}:${LD_LIBRARY_PATH:-}"
export MANTISSA_SOURCE_DIR=$root MANTISSA_CLI=$stage/bin/mantissa
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
echo "build: commit $(cat "$stage/commit.txt"), sm_$(cat "$stage/arch.txt")" | tee -a "$out/gpu.txt"

# gtest's own summary lines are the source of truth; one log per binary in tests.log.
summary=()
total_pass=0 total_fail=0 total_skip=0
: >"$out/tests.log"
for t in "$stage"/bin/test_*; do
  name=$(basename "$t")
  log=$(mktemp)
  (cd "$(mktemp -d)" && "$t") >"$log" 2>&1
  rc=$?
  passed=$(grep -c '^\[       OK \]' "$log")
  failed=$(grep -c '^\[  FAILED  \].*(' "$log")
  skipped=$(grep -c '^\[  SKIPPED \].*(' "$log")
  total_pass=$((total_pass + passed)) total_fail=$((total_fail + failed))
  total_skip=$((total_skip + skipped))
  { echo "==== $name (rc $rc)"; grep -E '^\[  (FAILED|SKIPPED) \]|Failure|error' "$log" | head -200; } >>"$out/tests.log"
  summary+=("$(printf '%-30s %6s %6s %7s %4s' "$name" "$passed" "$failed" "$skipped" "$rc")")
  rm -f "$log"
done
if [ "$sanitize" = 1 ] && command -v compute-sanitizer >/dev/null; then
  for t in "$stage"/bin/test_cuda*; do
    for tool in memcheck racecheck; do
      compute-sanitizer --tool "$tool" --error-exitcode 1 "$t" >"$out/sanitizer.log" 2>&1
      rc=$?
      summary+=("$(printf '%-30s %s: %s' "$(basename "$t")" "$tool" "$([ $rc -eq 0 ] && echo clean || echo ERRORS)")")
    done
  done
fi
{
  printf '%-30s %6s %6s %7s %4s\n' test passed failed skipped rc
  printf '%s\n' "${summary[@]}"
  printf '%-30s %6s %6s %7s\n' TOTAL "$total_pass" "$total_fail" "$total_skip"
} | tee "$out/summary.txt"

if [ "$bench" = 1 ]; then
  # The libtorch peer is built here against the PyTorch package's own libtorch when cmake finds it.
  peer_args=()
  torch_cmake=$(python3 -c "import torch; print(torch.utils.cmake_prefix_path)" 2>/dev/null || true)
  if [ -n "$torch_cmake" ] && command -v cmake >/dev/null; then
    pdir=$(mktemp -d)
    if cmake -S "$root/bench/peers/libtorch" -B "$pdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
         -DCMAKE_PREFIX_PATH="$torch_cmake" >"$out/peer-build.log" 2>&1 &&
       cmake --build "$pdir" >>"$out/peer-build.log" 2>&1; then
      peer_args+=(--libtorch-peer "$pdir/libtorch_peer")
    fi
  fi
  python3 -c "import torch" 2>/dev/null &&
    peer_args+=(--python python3 --pytorch-peer "$root/bench/peers/pytorch_eager.py")
  devices=cpu
  nvidia-smi -L >/dev/null 2>&1 && devices=cpu,cuda
  python3 "$root/bench/collect.py" --mantissa-bench "$stage/bin/mantissa_bench" "${peer_args[@]}" \
    --devices "$devices" --commit "$(cat "$stage/commit.txt")" --markdown "$out/bench.md" \
    "${bench_args[@]}" 2>"$out/bench.err" | tee "$out/bench.txt"
fi
echo "tests: $total_pass passed, $total_fail failed, $total_skip skipped"
[ "$total_fail" -eq 0 ]
