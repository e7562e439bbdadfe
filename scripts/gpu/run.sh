#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with .gpu/ staged by scripts/gpu/prepare.sh:
# every test binary (CUDA tests included), optionally under compute-sanitizer, then prints a
# summary table. Logs go to $OUT when set (the device tool), else to ./gpu-logs.
#   scripts/gpu/run.sh [--sanitize]
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
stage=$root/.gpu
out=${OUT:-$root/gpu-logs}
mkdir -p "$out"
cuda_libs=$(python3 -c "import nvidia, os; d=os.path.dirname(nvidia.__path__[0]); print(':'.join(os.path.join(r) for r, _, f in os.walk(d) if any(x.endswith('.so') or '.so.' in x for x in f)))" 2>/dev/null || true)
export LD_LIBRARY_PATH="$stage/lib:/usr/local/cuda/lib64:${cuda_libs}:${LD_LIBRARY_PATH:-}"
export MANTISSA_SOURCE_DIR=$stage
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
summary=()
for t in "$stage"/bin/test_*; do
  name=$(basename "$t")
  "$t" --gtest_brief=1 >"$out/$name.log" 2>&1
  rc=$?
  passed=$(grep -c '^\[       OK \]' "$out/$name.log")
  failed=$(grep -c '^\[  FAILED  \].*(' "$out/$name.log")
  skipped=$(grep -c '^\[  SKIPPED \]' "$out/$name.log")
  summary+=("$(printf '%-28s %6s %6s %6s %4s' "$name" "$passed" "$failed" "$skipped" "$rc")")
done
if [ "${1:-}" = "--sanitize" ] && command -v compute-sanitizer >/dev/null; then
  for t in "$stage"/bin/test_cuda*; do
    for tool in memcheck racecheck; do
      compute-sanitizer --tool "$tool" --error-exitcode 1 "$t" --gtest_brief=1 \
        >"$out/$(basename "$t").$tool.log" 2>&1
      summary+=("$(printf '%-28s %s: %s' "$(basename "$t")" "$tool" "$([ $? -eq 0 ] && echo clean || echo ERRORS)")")
    done
  done
fi
printf '%-28s %6s %6s %6s %4s\n' test passed failed skipped rc | tee "$out/summary.txt"
printf '%s\n' "${summary[@]}" | tee -a "$out/summary.txt"
