#!/usr/bin/env bash
# Runs one phase of the GPU checks on the GPU machine, from the repository root, with the stage
# made by scripts/gpu/prepare.sh in .gpu/stage.tar.xz. Each phase fits in one 10-minute command
# and prints a one-screen summary last; logs go to $OUT (else ./gpu-logs) as at most three files
# per phase: <phase>-summary.txt, <phase>-logs.tar.gz and, for bench, bench.md.
#
#   scripts/gpu/run.sh tests [BINARY...]       every test binary (or those named), each under
#                                              `timeout`; all of them within a 7-minute budget
#   scripts/gpu/run.sh sanitize [memcheck|racecheck|all] [BINARY...]
#                                              compute-sanitizer on the CUDA test binaries, the
#                                              caching allocator bypassed so overruns are seen
#   scripts/gpu/run.sh peer                    builds the libtorch peer against the PyTorch here
#   scripts/gpu/run.sh bench [--quick]         the benchmark rows on cpu and cuda, PyTorch eager
#                                              and CUDA-graphed, the libtorch peer when built
#   scripts/gpu/run.sh preflight               only the library check every phase starts with
#
# A binary passes only when it exits 0 and ran at least one test: a crash, an abort, a binary
# that cannot load or one that runs past its time fails, whatever its output said. The run exits
# non-zero when anything failed or did not run. Settings (environment):
#   MANTISSA_GPU_STAGE           the stage archive (default .gpu/stage.tar.xz)
#   MANTISSA_GPU_TEST_BUDGET     seconds for all test binaries of a phase (tests 420, sanitize 540)
#   MANTISSA_GPU_BINARY_TIMEOUT  seconds for one binary (tests 300, sanitize 400)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; }
phase=${1:-}
[ $# -gt 0 ] && shift
case "$phase" in
  tests | sanitize | peer | bench | preflight) ;;
  -h | --help) usage; exit 0 ;;
  *) usage >&2; echo "run.sh: expected a phase: tests, sanitize, peer, bench or preflight" >&2; exit 2 ;;
esac
out=${OUT:-$root/gpu-logs}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
logs=$work/logs
mkdir -p "$logs"

# ---- the stage and its libraries ----------------------------------------------------------------
stage_tar=${MANTISSA_GPU_STAGE:-$root/.gpu/stage.tar.xz}
stage=$work/stage
mkdir -p "$stage"
tar -C "$stage" -xJf "$stage_tar" 2>"$work/untar.err" || {
  echo "run.sh: cannot unpack $stage_tar ($(head -c 300 "$work/untar.err")); run scripts/gpu/prepare.sh on a build machine and carry .gpu" >&2
  exit 2
}
commit=$(cat "$stage/commit.txt" 2>/dev/null || echo unknown)
arch=$(cat "$stage/arch.txt" 2>/dev/null || echo unknown)

# The PyTorch environment's own python knows where its nvidia-* wheels put cuBLAS, cuDNN, NCCL:
# those folders go before /usr/local/cuda/lib64, which may hold other versions.
py=/opt/torch/.venv/bin/python3
[ -x "$py" ] || py=$(command -v python3 || true)
wheel_libs=""
if [ -n "$py" ]; then
  wheel_libs=$("$py" - 2>/dev/null <<'PY'
import glob, os
try:
    import nvidia
except ImportError:
    raise SystemExit(0)
dirs = set()
for base in nvidia.__path__:
    for root, _, files in os.walk(base):
        if any(".so" in f for f in files):
            dirs.add(root)
print(":".join(sorted(dirs)))
PY
)
fi
base_path="$stage/lib${wheel_libs:+:$wheel_libs}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH=$base_path

# Lists what the dynamic loader cannot find for every staged binary and library.
missing_libraries() {
  local f
  for f in "$stage"/bin/* "$stage"/lib/*.so*; do
    [ -f "$f" ] || continue
    ldd "$f" 2>&1 | grep -E 'not found' | sed "s|^[[:space:]]*|$(basename "$f"): |"
  done | sort -u
}
# Binaries built on a newer Debian need a newer libstdc++/libgcc_s than the machine may have:
# prepare.sh ships the build machine's in lib/compat, used only when the machine's are too old.
preflight() {
  local missing
  missing=$(missing_libraries)
  if [ -n "$missing" ] && [ -d "$stage/lib/compat" ] && grep -qE 'GLIBCXX|CXXABI|GCC_' <<<"$missing"; then
    export LD_LIBRARY_PATH="$stage/lib/compat:$base_path"
    echo "preflight: the machine's libstdc++/libgcc_s are older than the build's; using the staged ones"
    missing=$(missing_libraries)
  fi
  if [ -n "$missing" ]; then
    echo "preflight FAILED: the dynamic loader cannot find, for these staged files:"
    echo "$missing" | head -40
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    return 1
  fi
  echo "preflight: every staged binary and library loads ($(ls "$stage/bin" | wc -l) binaries)"
}

gpu_line=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null |
  head -n 1)
[ -n "$gpu_line" ] || gpu_line="no GPU visible (nvidia-smi found none): CUDA tests will skip"
header="GPU: $gpu_line | stage: commit $commit, sm_$arch | $(date -u '+%Y-%m-%d %H:%M UTC')"

preflight >"$work/preflight.txt" 2>&1
preflight_rc=$?
if [ "$phase" = preflight ] || [ $preflight_rc -ne 0 ]; then
  { echo "$header"; cat "$work/preflight.txt"; } | tee "$out/$phase-summary.txt"
  exit $preflight_rc
fi
export MANTISSA_SOURCE_DIR=$root MANTISSA_CLI=$stage/bin/mantissa

# ---- running binaries ---------------------------------------------------------------------------
rows=()
n_pass=0 n_fail=0 n_skip=0 bad=0
now() { date +%s; }

# Why a binary that exited with `rc` failed, or "" when it did not.
verdict() {
  local rc=$1 log=$2 ran=$3
  case $rc in
    0) [ "$ran" -gt 0 ] && echo "" || echo "ran no test" ;;
    124) echo "timed out" ;;
    137) echo "timed out or killed (SIGKILL)" ;;
    127) echo "cannot load: $(grep -m1 -E 'error while loading|symbol lookup error|not found' "$log" | cut -c1-80)" ;;
    126) echo "cannot execute" ;;
    *)
      if [ "$rc" -gt 128 ]; then
        echo "killed by signal $((rc - 128)) ($(kill -l $((rc - 128)) 2>/dev/null || echo ?))"
      else
        echo "exit $rc"
      fi
      ;;
  esac
}

# run_binary NAME TIMEOUT LOG CMD... : runs CMD in a scratch folder, appends a summary row.
run_binary() {
  local name=$1 limit=$2 log=$3
  shift 3
  local start rc passed failed skipped ran why crashed_in
  start=$(now)
  # The braces take the shell's own "Aborted" notice, so the summary stays the last output.
  { (cd "$(mktemp -d -p "$work")" && exec timeout --kill-after=15 "$limit" "$@") >"$log" 2>&1; } 2>/dev/null
  rc=$?
  passed=$(grep -c '^\[       OK \]' "$log")
  failed=$(grep -c '^\[  FAILED  \].*(' "$log")
  skipped=$(grep -c '^\[  SKIPPED \].*(' "$log")
  ran=$((passed + failed + skipped))
  why=$(verdict "$rc" "$log" "$ran")
  # A test that started and never finished is the one the crash or the timeout hit.
  crashed_in=$(awk '/^\[ RUN      \]/ {t=$4} /^\[       OK \]|^\[  FAILED  \]|^\[  SKIPPED \]/ {t=""} END {print t}' "$log")
  [ -n "$why" ] && [ -n "$crashed_in" ] && why="$why in $crashed_in"
  n_pass=$((n_pass + passed)) n_fail=$((n_fail + failed)) n_skip=$((n_skip + skipped))
  local status=ok
  if [ -n "$why" ] || [ "$failed" -gt 0 ]; then
    status=FAILED
    bad=$((bad + 1))
  fi
  rows+=("$(printf '%-28s %6s %6s %7s %4s %5ss  %s%s' "$name" "$passed" "$failed" "$skipped" "$rc" \
    "$(($(now) - start))" "$status" "${why:+: $why}")")
}

not_run() {
  rows+=("$(printf '%-28s %6s %6s %7s %4s %6s  %s' "$1" - - - - - "NOT RUN: $2")")
  bad=$((bad + 1))
}

# pick_binaries PATTERN [NAMES...]: the staged binaries to run, in order.
pick_binaries() {
  local pattern=$1
  shift
  if [ $# -gt 0 ]; then
    local n
    for n in "$@"; do
      if [ -x "$stage/bin/$n" ]; then echo "$stage/bin/$n"; else echo "MISSING:$n"; fi
    done
  else
    ls "$stage"/bin/$pattern 2>/dev/null
  fi
}

finish() {
  local title=$1 extra=${2:-}
  tar -C "$logs" -czf "$out/$phase-logs.tar.gz" . 2>/dev/null
  {
    echo "$header"
    echo "$title"
    printf '%-28s %6s %6s %7s %4s %6s  %s\n' binary passed failed skipped rc time verdict
    printf '%s\n' "${rows[@]}"
    [ -n "$extra" ] && echo "$extra"
    echo "logs: $phase-logs.tar.gz (one log per binary)"
    echo "$phase: $n_pass passed, $n_fail failed, $n_skip skipped; $bad binaries failed or did not run"
  } | tee "$out/$phase-summary.txt"
  [ "$bad" -eq 0 ]
  exit $?
}

case "$phase" in
  tests)
    budget=${MANTISSA_GPU_TEST_BUDGET:-420} limit=${MANTISSA_GPU_BINARY_TIMEOUT:-300}
    deadline=$(($(now) + budget))
    for t in $(pick_binaries 'test_*' "$@"); do
      if [[ $t == MISSING:* ]]; then not_run "${t#MISSING:}" "not in the stage"; continue; fi
      name=$(basename "$t")
      left=$((deadline - $(now)))
      if [ "$left" -le 5 ]; then not_run "$name" "the ${budget}s budget was spent"; continue; fi
      run_binary "$name" "$((left < limit ? left : limit))" "$logs/$name.log" \
        "$t" --gtest_output="xml:$logs/$name.xml"
    done
    finish "tests (budget ${budget}s, ${limit}s a binary)"
    ;;

  sanitize)
    tools=(memcheck racecheck)
    case "${1:-}" in
      memcheck | racecheck) tools=("$1"); shift ;;
      all) shift ;;
    esac
    if ! command -v compute-sanitizer >/dev/null; then
      not_run compute-sanitizer "compute-sanitizer is not on PATH"
      finish "sanitize"
    fi
    # Every block from cudaMalloc, freed with cudaFree: memcheck sees an overrun past a tensor
    # instead of a read inside a larger cached segment.
    export MANTISSA_CUDA_ALLOCATOR_BYPASS=1
    budget=${MANTISSA_GPU_TEST_BUDGET:-540} limit=${MANTISSA_GPU_BINARY_TIMEOUT:-400}
    deadline=$(($(now) + budget))
    for t in $(pick_binaries 'test_cuda*' "$@"); do
      if [[ $t == MISSING:* ]]; then not_run "${t#MISSING:}" "not in the stage"; continue; fi
      for tool in "${tools[@]}"; do
        name="$(basename "$t") $tool"
        left=$((deadline - $(now)))
        if [ "$left" -le 5 ]; then not_run "$name" "the ${budget}s budget was spent"; continue; fi
        slog="$logs/$(basename "$t").$tool.sanitizer.log"
        run_binary "$name" "$((left < limit ? left : limit))" "$logs/$(basename "$t").$tool.log" \
          compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 200 \
          --log-file "$slog" "$t"
        errors=$(grep -m1 -E 'ERROR SUMMARY: [0-9]+' "$slog" 2>/dev/null | grep -oE '[0-9]+ error' || true)
        [ -n "$errors" ] && rows[-1]="${rows[-1]} [$errors(s)]"
      done
    done
    finish "sanitize (${tools[*]}; allocator bypassed; budget ${budget}s, ${limit}s a binary)"
    ;;

  peer)
    torch_cmake=$("$py" -c "import torch; print(torch.utils.cmake_prefix_path)" 2>/dev/null || true)
    peer_dir=$root/.gpu/peer
    if [ -z "$torch_cmake" ]; then
      not_run libtorch_peer "no PyTorch with a cmake prefix in $py"
    elif ! command -v cmake >/dev/null; then
      not_run libtorch_peer "cmake is not on PATH"
    else
      start=$(now)
      if cmake -S "$root/bench/peers/libtorch" -B "$peer_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
           -DCMAKE_PREFIX_PATH="$torch_cmake" >"$logs/peer-build.log" 2>&1 &&
         cmake --build "$peer_dir" >>"$logs/peer-build.log" 2>&1; then
        rows+=("$(printf '%-28s built in %ss: %s' libtorch_peer "$(($(now) - start))" "$peer_dir/libtorch_peer")")
      else
        not_run libtorch_peer "build failed: $(grep -m1 -iE 'error' "$logs/peer-build.log" | cut -c1-100)"
      fi
    fi
    finish "peer (the libtorch benchmark peer, kept in .gpu/peer for the bench phase)"
    ;;

  bench)
    bench_args=()
    [ "${1:-}" = --quick ] && bench_args+=(--rounds 1 --reps 2 --min-time 0.05)
    peer_args=() notes=""
    if [ -x "$root/.gpu/peer/libtorch_peer" ]; then
      peer_args+=(--libtorch-peer "$root/.gpu/peer/libtorch_peer")
    else
      notes="libtorch peer: skipped (not built on this machine: run 'scripts/gpu/run.sh peer' first)"
    fi
    if "$py" -c "import torch" 2>/dev/null; then
      peer_args+=(--python "$py" --pytorch-peer "$root/bench/peers/pytorch_eager.py")
    else
      notes="$notes${notes:+; }PyTorch peer: skipped ($py cannot import torch)"
    fi
    devices=cpu
    nvidia-smi -L >/dev/null 2>&1 && devices=cpu,cuda
    start=$(now)
    timeout 540 "${py:-python3}" "$root/bench/collect.py" --mantissa-bench "$stage/bin/mantissa_bench" \
      "${peer_args[@]}" --devices "$devices" --commit "$commit" --markdown "$out/bench.md" \
      "${bench_args[@]}" >"$logs/bench.txt" 2>"$logs/bench.err"
    rc=$?
    if [ $rc -ne 0 ]; then
      rows+=("$(printf '%-28s rc %s after %ss: %s' collect.py "$rc" "$(($(now) - start))" "$(tail -n 1 "$logs/bench.err")")")
      bad=$((bad + 1))
    fi
    cat "$logs/bench.txt"
    finish "bench (devices $devices)" "$notes"
    ;;
esac
