#!/usr/bin/env bash
# Runs the GPU checks on the GPU machine, from the repository root, with the stage made by
# scripts/gpu/prepare.sh in .gpu/stage.tar.xz (docs/gpu-runs.md has the plan for one lease).
# Each phase fits in one 10-minute command and prints a one-screen summary last; files go to
# $OUT (else ./gpu-logs): <phase>-summary.txt first, <phase>-logs.tar.gz, and for some phases
# bench.md and first-light-failed.txt. At most 5 files a phase.
#
#   scripts/gpu/run.sh first-light             THE FIRST COMMAND OF A LEASE (at most about 8.5
#                                              minutes): preflight, every test binary that touches
#                                              CUDA (280 s), the short cuda bench against PyTorch
#                                              eager (100 s), and, when a test failed, follow-up on
#                                              what failed (120 s); one verdict, from the tests
#   scripts/gpu/run.sh follow-up [BIN:FILTER...]
#                                              the tests first-light failed (or those named) again
#                                              with CUDA_LAUNCH_BLOCKING=1, then compute-sanitizer
#                                              memcheck on them; when none failed, memcheck and
#                                              racecheck on the attention, AMP, softmax and
#                                              reduction tests. The failed list is first-light's on
#                                              this machine (MANTISSA_GPU_STATE), or, on a fresh
#                                              machine, .gpu/first-light-failed.txt carried there
#   scripts/gpu/run.sh tests [BINARY...]       every test binary (or those named)
#   scripts/gpu/run.sh sanitize [memcheck|racecheck|all] [BINARY...]
#                                              compute-sanitizer on the CUDA test binaries
#   scripts/gpu/run.sh peer                    builds the libtorch peer against the PyTorch here
#   scripts/gpu/run.sh bench [--quick]         the benchmark rows on cpu and cuda
#   scripts/gpu/run.sh preflight               only the library check every phase starts with
#
# A binary passes only when it exits 0 and ran at least one test. A crash, an abort, a binary that
# cannot load or one that runs past its time fails, whatever its output said; so does a binary
# that skipped a test for lack of a CUDA device while nvidia-smi sees a GPU (the tests are also
# run with MANTISSA_REQUIRE_GPU=1 there, which turns such a skip into a failure). One binary that
# fails or cannot load fails alone: the others still run. Tests whose suite name contains
# LibraryBehaviour (what a vendor library does where its documentation is silent) run apart and
# are reported after the verdict, not in it; so are the lines a test prints as "[ LIBRARY  ]" when
# a vendor library declined a fast path (the test then checked the composed path instead). The
# bench never decides the verdict: a bench process past its time or a peer that fails is a note.
# CUDA modules load lazily, except in the binaries that cuda-tests.txt marks eager (their tests
# hold a stream, and a module loaded inside the hold would wait for it). The run exits 0 only
# when everything passed; with no GPU visible, first-light says so and exits 3.
# Settings (environment):
#   MANTISSA_GPU_STAGE           the stage: an archive or an unpacked folder (.gpu/stage.tar.xz)
#   MANTISSA_GPU_TEST_BUDGET     seconds for all test binaries of a phase
#                                (first-light 280, tests 420, sanitize 540, follow-up 220)
#   MANTISSA_GPU_BINARY_TIMEOUT  seconds for one binary (first-light 120, tests 300, sanitize 400)
#   MANTISSA_GPU_BENCH_TIMEOUT   seconds for first-light's bench (100)
#   MANTISSA_GPU_BENCH_PROCESS_TIMEOUT  seconds for one of its processes (40)
#   MANTISSA_GPU_FOLLOW_UP_BUDGET seconds for the follow-up first-light chains when a test
#                                failed (120; 0: none)
#   MANTISSA_GPU_STATE           where first-light leaves its failed tests for follow-up (gpu-logs)
#   MANTISSA_GPU_PYTHON          the python with PyTorch (/opt/torch/.venv/bin/python3)
#   MANTISSA_GPU_PEER            the PyTorch peer script (bench/peers/pytorch_eager.py)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
usage() { sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; }
phase=${1:-}
[ $# -gt 0 ] && shift
case "$phase" in
  first-light | follow-up | tests | sanitize | peer | bench | preflight) ;;
  -h | --help) usage; exit 0 ;;
  *)
    usage >&2
    echo "run.sh: expected a phase: first-light, follow-up, tests, sanitize, peer, bench or preflight" >&2
    exit 2
    ;;
esac
out=${OUT:-$root/gpu-logs}
mkdir -p "$out"
# What first-light found, for follow-up on the same (warm) machine: kept outside $OUT, which the
# GPU tool empties for every command.
state=${MANTISSA_GPU_STATE:-$root/gpu-logs}
mkdir -p "$state"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
logs=$work/logs
mkdir -p "$logs"
started=$(date +%s)
now() { date +%s; }

# ---- the stage and its libraries ----------------------------------------------------------------
stage_src=${MANTISSA_GPU_STAGE:-$root/.gpu/stage.tar.xz}
if [ -d "$stage_src" ]; then
  stage=$stage_src
else
  stage=$work/stage
  mkdir -p "$stage"
  tar -C "$stage" -xJf "$stage_src" 2>"$work/untar.err" || {
    echo "run.sh: cannot unpack $stage_src ($(head -c 300 "$work/untar.err")); run scripts/gpu/prepare.sh on a build machine and carry .gpu" >&2
    exit 2
  }
fi
commit=$(cat "$stage/commit.txt" 2>/dev/null || echo unknown)
arch=$(cat "$stage/arch.txt" 2>/dev/null || echo unknown)

# The PyTorch environment's own python knows where its nvidia-* wheels put cuBLAS, cuDNN, NCCL:
# those folders go before /usr/local/cuda/lib64, which may hold other versions.
py=${MANTISSA_GPU_PYTHON:-/opt/torch/.venv/bin/python3}
[ -x "$py" ] || py=$(command -v python3 || true)
wheel_libs=""
if [ -n "$py" ]; then
  wheel_libs=$("$py" - 2>/dev/null <<'PY'
import os
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
# compute-sanitizer: on PATH, or in the CUDA toolkit's bin/.
sanitizer=$(command -v compute-sanitizer || true)
[ -z "$sanitizer" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ] &&
  sanitizer=/usr/local/cuda/bin/compute-sanitizer
base_path="$stage/lib${wheel_libs:+:$wheel_libs}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH=$base_path

# "file: library => not found" for every staged binary and library the loader cannot complete.
missing_libraries() {
  local f
  for f in "$stage"/bin/* "$stage"/lib/*.so*; do
    [ -f "$f" ] || continue
    ldd "$f" 2>&1 | grep -E 'not found' | sed "s|^[[:space:]]*|$(basename "$f"): |"
  done | sort -u
}
# Binaries built on a newer Debian need a newer libstdc++/libgcc_s than the machine may have:
# prepare.sh ships the build machine's in lib/compat, used only when the machine's are too old.
# What is still missing afterwards fails the binaries it concerns (cannot_load), not the phase.
preflight() {
  local missing
  missing=$(missing_libraries)
  if [ -n "$missing" ] && [ -d "$stage/lib/compat" ] && grep -qE 'GLIBCXX|CXXABI|GCC_' <<<"$missing"; then
    export LD_LIBRARY_PATH="$stage/lib/compat:$base_path"
    echo "preflight: the machine's libstdc++/libgcc_s are older than the build's; using the staged ones"
    missing=$(missing_libraries)
  fi
  printf '%s\n' "$missing" | sed '/^$/d' >"$work/missing.txt"
  if [ -s "$work/missing.txt" ]; then
    echo "preflight FAILED for $(cut -d: -f1 "$work/missing.txt" | sort -u | wc -l) staged files; the loader cannot find:"
    head -40 "$work/missing.txt"
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    return 1
  fi
  echo "preflight: every staged binary and library loads ($(ls "$stage/bin" | wc -l) binaries)"
}
# Why staged binary NAME cannot load ("" when it can).
cannot_load() {
  grep -m1 -E "^$1: " "$work/missing.txt" 2>/dev/null | sed "s|^$1: *||; s| *=> *not found| not found|"
}

gpu_count=$(timeout 20 nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
gpu_line=$(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
  2>/dev/null | head -n 1)
if [ "$gpu_count" -gt 0 ]; then
  # A CUDA test that finds no device fails instead of skipping (tests/test_util.h).
  export MANTISSA_REQUIRE_GPU=1
else
  gpu_line="no GPU visible (nvidia-smi found none): CUDA tests will skip"
fi
# Modules load lazily (each process pays only for the kernels it runs); the binaries that hold a
# stream load theirs eagerly (run_tests); a single-GPU NCCL group talks over loopback.
export CUDA_MODULE_LOADING=LAZY NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1
header="GPU: $gpu_line | stage: commit $commit, sm_$arch | $(date -u '+%Y-%m-%d %H:%M UTC')"

preflight >"$work/preflight.txt" 2>&1
preflight_rc=$?
if [ "$phase" = preflight ]; then
  { echo "$header"; cat "$work/preflight.txt"; } | tee "$out/$phase-summary.txt"
  exit $preflight_rc
fi
export MANTISSA_SOURCE_DIR=$root MANTISSA_CLI=$stage/bin/mantissa

# ---- running binaries ---------------------------------------------------------------------------
rows=() lib_rows=() failed_tests=()
n_pass=0 n_fail=0 n_skip=0 bad=0

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
# With ROW_KIND=library the row goes to the library-behaviour list and never fails the run.
run_binary() {
  local name=$1 limit=$2 log=$3
  shift 3
  local start rc passed failed skipped ran why crashed_in gpu_skips
  start=$(now)
  # The braces take the shell's own "Aborted" notice, so the summary stays the last output.
  { (cd "$(mktemp -d -p "$work")" &&
     CUDA_MODULE_LOADING=${MODULE_LOADING:-$CUDA_MODULE_LOADING} exec timeout --kill-after=15 "$limit" "$@") >"$log" 2>&1; } 2>/dev/null
  rc=$?
  # A test's own result line ends in its time; gtest's closing lists repeat the names (with
  # ", where GetParam() = ..." for parameterized tests) but no time.
  passed=$(grep -cE '^\[       OK \] .* \([0-9]+ ms\)$' "$log")
  failed=$(grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$log")
  skipped=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$log")
  ran=$((passed + failed + skipped))
  why=$(verdict "$rc" "$log" "$ran")
  # A test that started and never finished is the one the crash or the timeout hit.
  crashed_in=$(awk '/^\[ RUN      \]/ {t=$4} /^\[       OK \]|^\[  FAILED  \]|^\[  SKIPPED \]/ {t=""} END {print t}' "$log")
  [ -n "$why" ] && [ -n "$crashed_in" ] && why="$why in $crashed_in"
  # On a GPU machine a skip for want of a device is the CUDA runtime failing to start.
  if [ "$gpu_count" -gt 0 ]; then
    gpu_skips=$(grep -c 'no CUDA device' "$log")
    if [ "$gpu_skips" -gt 0 ]; then
      why="${why:+$why; }$gpu_skips tests found no CUDA device while nvidia-smi sees $gpu_count GPU(s)"
      why="$why: $(grep -m1 -oE 'no CUDA device.*' "$log" | cut -c1-160)"
    fi
  fi
  local status=ok
  if [ -n "$why" ] || [ "$failed" -gt 0 ]; then status=FAILED; fi
  local row
  row=$(printf '%-34s %6s %6s %7s %4s %5ss  %s%s' "$name" "$passed" "$failed" "$skipped" "$rc" \
    "$(($(now) - start))" "$status" "${why:+: $why}")
  if [ "${ROW_KIND:-}" = library ]; then
    lib_rows+=("$row")
    return
  fi
  # A vendor library that declined a fast path, as the test reported it (the composed path ran
  # and was checked instead): news about the library, listed with the library rows.
  local declined
  while IFS= read -r declined; do
    lib_rows+=("$(printf '%-34s %s' "$name" "$declined")")
  done < <(grep -E '^\[ LIBRARY  \] ' "$log" | sort -u | cut -c14-300)
  n_pass=$((n_pass + passed)) n_fail=$((n_fail + failed)) n_skip=$((n_skip + skipped))
  rows+=("$row")
  if [ "$status" = FAILED ]; then
    bad=$((bad + 1))
    local bin=${name%% *} t
    for t in $(sed -nE 's/^\[  FAILED  \] ([^ ,]+).* \([0-9]+ ms\)$/\1/p' "$log") $crashed_in; do
      failed_tests+=("$bin:$t")
    done
    # Failed as a whole (no test named): follow-up reruns what this run ran.
    [ -z "$crashed_in" ] && [ "$failed" -eq 0 ] && failed_tests+=("$bin:${ONLY_FILTER:-*}")
  fi
}

not_run() {
  rows+=("$(printf '%-34s %6s %6s %7s %4s %6s  %s' "$1" - - - - - "NOT RUN: $2")")
  bad=$((bad + 1))
}

# run_sanitized NAME LIMIT LOGBASE TOOL CMD... : CMD under compute-sanitizer's TOOL, with the
# caching allocator bypassed (every block its own cudaMalloc, so an overrun past a tensor is
# seen); the row carries the sanitizer's error count.
run_sanitized() {
  local name=$1 limit=$2 logbase=$3 tool=$4 errors
  shift 4
  MANTISSA_CUDA_ALLOCATOR_BYPASS=1 run_binary "$name" "$limit" "$logbase.$tool.log" \
    "$sanitizer" --tool "$tool" --error-exitcode 99 --print-limit 200 \
    --log-file "$logbase.$tool.sanitizer.log" "$@"
  errors=$(grep -m1 -E 'ERROR SUMMARY: [0-9]+' "$logbase.$tool.sanitizer.log" 2>/dev/null |
    grep -oE '[0-9]+ error' || true)
  [ -n "$errors" ] && rows[-1]="${rows[-1]} [$errors(s)]"
  return 0
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

# The binaries that touch CUDA, in the order prepare.sh listed them (cuda-tests.txt: "NAME
# LOADING [FILTER]": LOADING eager or lazy, the filter naming the GPU tests of a binary that also
# holds CPU tests), as "PATH|FILTER|LOADING"; a stage without the list runs test_cuda*, lazily.
cuda_binaries() {
  if [ -s "$stage/cuda-tests.txt" ]; then
    local n l f
    while read -r n l f; do
      [ -n "$n" ] || continue
      if [ -x "$stage/bin/$n" ]; then echo "$stage/bin/$n|$f|$l"; else echo "MISSING:$n"; fi
    done <"$stage/cuda-tests.txt"
  else
    ls "$stage"/bin/test_cuda* 2>/dev/null
  fi
}
# How cuda-tests.txt says binary NAME loads its modules (lazy when it does not say).
module_loading() {
  local l
  l=$(awk -v n="$1" '$1 == n {print $2; exit}' "$stage/cuda-tests.txt" 2>/dev/null)
  [ "$l" = eager ] && echo EAGER || echo LAZY
}

# run_tests BUDGET LIMIT BINARY... : each binary (its LibraryBehaviour tests apart), in turn.
run_tests() {
  local budget=$1 limit=$2
  shift 2
  local deadline=$(($(now) + budget)) t name left why only loading
  for t in "$@"; do
    if [[ $t == MISSING:* ]]; then not_run "${t#MISSING:}" "not in the stage"; continue; fi
    only="" loading=""
    if [[ $t == *'|'* ]]; then
      IFS='|' read -r t only loading <<<"$t"
    fi
    name=$(basename "$t")
    [ -n "$loading" ] || loading=$(module_loading "$name")
    loading=${loading^^}
    why=$(cannot_load "$name")
    if [ -n "$why" ]; then
      rows+=("$(printf '%-34s %6s %6s %7s %4s %6s  %s' "$name" - - - - - "FAILED: cannot load: $why")")
      bad=$((bad + 1))
      continue
    fi
    left=$((deadline - $(now)))
    if [ "$left" -le 5 ]; then
      not_run "$name" "the ${budget}s budget was spent"
      failed_tests+=("$name:${only:-*}")
      continue
    fi
    ONLY_FILTER=$only MODULE_LOADING=$loading run_binary "$name" "$((left < limit ? left : limit))" \
      "$logs/$name.log" "$t" --gtest_output="xml:$logs/$name.xml" \
      --gtest_filter="${only}-*LibraryBehaviour*"
    # The library-behaviour tests of this binary, if it has any.
    left=$((deadline - $(now)))
    if [ "$left" -gt 25 ] && timeout 20 "$t" --gtest_list_tests --gtest_filter='*LibraryBehaviour*' 2>/dev/null |
         grep -q '^  '; then
      left=$((deadline - $(now)))
      ROW_KIND=library MODULE_LOADING=$loading run_binary "$name" "$((left < limit ? left : limit))" \
        "$logs/$name.library.log" "$t" --gtest_filter='*LibraryBehaviour*'
    fi
  done
}

summary_table() {
  printf '%-34s %6s %6s %7s %4s %6s  %s\n' binary passed failed skipped rc time verdict
  printf '%s\n' "${rows[@]}"
}

library_lines() {
  [ ${#lib_rows[@]} -gt 0 ] || return 0
  echo "vendor-library behaviour (*LibraryBehaviour* tests and the fast paths a library declined; reported, not part of the verdict):"
  printf '%s\n' "${lib_rows[@]}"
}

finish() {
  local title=$1 extra=${2:-}
  tar -C "$logs" -czf "$out/$phase-logs.tar.gz" . 2>/dev/null
  {
    echo "$header"
    grep -q FAILED "$work/preflight.txt" && cat "$work/preflight.txt"
    echo "$title"
    summary_table
    [ -n "$extra" ] && echo "$extra"
    library_lines
    echo "logs: $phase-logs.tar.gz (one log per binary)"
    echo "$phase: $n_pass passed, $n_fail failed, $n_skip skipped; $bad binaries failed or did not run"
  } | tee "$out/$phase-summary.txt"
  [ "$bad" -eq 0 ]
  exit $?
}

# run_collect LIMIT ARGS... : bench/collect.py on the staged mantissa_bench under `timeout LIMIT`
# (ARGS: devices, workloads, rounds, more peers), with the PyTorch peer when this machine's python
# has torch. collect.py rewrites $out/bench.md and appends to $out/bench-rows.jsonl as each
# measurement arrives, so a bench cut short still leaves its rows. Nothing here decides a verdict:
# a bench past its time, a failure of collect.py, a process past its own time or a peer that fails
# becomes a line of bench_note; the table is in $logs/bench.txt.
run_collect() {
  local limit=$1 start rc
  shift
  local args=(--mantissa-bench "$stage/bin/mantissa_bench" --commit "$commit"
    --markdown "$out/bench.md" --rows-out "$out/bench-rows.jsonl" "$@")
  if [ ! -x "$stage/bin/mantissa_bench" ]; then
    bench_note="${bench_note:+$bench_note; }bench: not run (no mantissa_bench in the stage)"
    return 0
  fi
  if "$py" -c "import torch" 2>/dev/null; then
    args+=(--python "$py" --pytorch-peer "${MANTISSA_GPU_PEER:-$root/bench/peers/pytorch_eager.py}"
      --peer-versions "$("$py" -c 'import torch; print(f"PyTorch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()})")' 2>/dev/null || echo PyTorch)")
  else
    bench_note="${bench_note:+$bench_note; }PyTorch peers: skipped ($py cannot import torch)"
  fi
  start=$(now)
  timeout --kill-after=5 "$limit" "${py:-python3}" "$root/bench/collect.py" "${args[@]}" \
    >"$logs/bench.txt" 2>"$logs/bench.err"
  rc=$?
  local rows_done=0
  [ -s "$out/bench-rows.jsonl" ] && rows_done=$(wc -l <"$out/bench-rows.jsonl")
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    bench_note="${bench_note:+$bench_note; }bench: stopped at its ${limit}s limit after $rows_done measurements (those are in bench.md and bench-rows.jsonl)"
    # The table as far as it got.
    [ -s "$out/bench.md" ] && cp "$out/bench.md" "$logs/bench.txt"
  elif [ $rc -ne 0 ]; then
    bench_note="${bench_note:+$bench_note; }bench: collect.py exited $rc after $(($(now) - start))s: $(tail -n 1 "$logs/bench.err" | cut -c1-200)"
  fi
  # Each measurement that failed or ran past its own time, named.
  local e
  while IFS= read -r e; do
    bench_note="${bench_note:+$bench_note; }$e"
  done < <("${py:-python3}" - "$out/bench-rows.jsonl" 2>/dev/null <<'PY'
import json, sys
try:
    rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
except OSError:
    rows = []
for r in rows:
    if "error" in r:
        print(f"{r['workload']}/{r['device']}/{r['precision']} {r['who']}: {r['error']}"[:200])
PY
)
}

case "$phase" in
  first-light)
    budget=${MANTISSA_GPU_TEST_BUDGET:-280} limit=${MANTISSA_GPU_BINARY_TIMEOUT:-120}
    mapfile -t binaries < <(cuda_binaries)
    run_tests "$budget" "$limit" "${binaries[@]}"
    # The failed list first: a run cut short later still leaves it for follow-up.
    printf '%s\n' "${failed_tests[@]}" | sed '/^$/d' >"$state/first-light-failed.txt"
    [ "$state" -ef "$out" ] || cp "$state/first-light-failed.txt" "$out/first-light-failed.txt"
    bench_note=""
    if [ "$gpu_count" -gt 0 ]; then
      # The headline rows: MLP 4096 and the GPT-2-124M step in bfloat16, eager and CUDA-graphed,
      # against PyTorch eager (torch.compile only in the bench phase).
      run_collect "${MANTISSA_GPU_BENCH_TIMEOUT:-100}" --devices cuda --workloads mlp4096,gpt2_124m \
        --precisions bfloat16 --rounds 1 --reps 2 --min-time 0.05 \
        --peer-timeout "${MANTISSA_GPU_BENCH_PROCESS_TIMEOUT:-40}" --no-graphed-peer
    else
      bench_note="bench: not run (no GPU visible)"
    fi
    tar -C "$logs" -czf "$out/$phase-logs.tar.gz" . 2>/dev/null
    if [ "$gpu_count" -eq 0 ]; then
      reason=$(grep -h -m1 -oE '^\[ CUDA     \] .*' "$logs"/*.log 2>/dev/null | head -n 1 | cut -c14-)
      verdict_line="verdict: NO GPU: nvidia-smi sees no GPU, so nothing ran on one (${reason:-no CUDA banner printed}); $((bad)) binaries failed or did not run"
      rc=3
    elif [ "$bad" -eq 0 ]; then
      verdict_line="verdict: PASS: every CUDA test binary passed on $gpu_count GPU(s)"
      rc=0
    else
      verdict_line="verdict: FAIL: $bad binaries failed or did not run"
      rc=1
    fi
    {
      echo "$header"
      cat "$work/preflight.txt"
      echo "first-light: the CUDA test binaries (budget ${budget}s, ${limit}s a binary), then the cuda bench"
      summary_table
      [ -s "$logs/bench.txt" ] && cat "$logs/bench.txt"
      [ -n "$bench_note" ] && echo "bench notes (not part of the verdict): $bench_note" | cut -c1-2000
      library_lines
      [ ${#failed_tests[@]} -gt 0 ] && echo "failed tests (first-light-failed.txt): ${failed_tests[*]}" | cut -c1-1500
      echo "files: first-light-summary.txt, first-light-logs.tar.gz, first-light-failed.txt$([ -s "$out/bench.md" ] && echo ', bench.md, bench-rows.jsonl')"
      echo "tests: $n_pass passed, $n_fail failed, $n_skip skipped; $bad binaries failed or did not run; $(($(now) - started))s"
      echo "$verdict_line"
    } >"$work/summary.txt"
    cp "$work/summary.txt" "$out/first-light-summary.txt"
    cat "$work/summary.txt"
    # On the same (warm) machine, at once: what failed, blocking and under memcheck.
    follow_budget=${MANTISSA_GPU_FOLLOW_UP_BUDGET:-120}
    if [ "$gpu_count" -gt 0 ] && [ ${#failed_tests[@]} -gt 0 ] && [ "$follow_budget" -gt 0 ]; then
      echo
      MANTISSA_GPU_STAGE=$stage MANTISSA_GPU_STATE=$state OUT=$out \
        MANTISSA_GPU_TEST_BUDGET=$follow_budget bash "$0" follow-up 2>&1 | tail -n 40
      echo "$verdict_line (follow-up: follow-up-summary.txt)"
    fi
    exit $rc
    ;;

  follow-up)
    budget=${MANTISSA_GPU_TEST_BUDGET:-220}
    deadline=$(($(now) + budget))
    sanitizer_missing=false
    if [ -z "$sanitizer" ]; then
      sanitizer_missing=true
      not_run compute-sanitizer "no compute-sanitizer (PATH, /usr/local/cuda/bin): only the CUDA_LAUNCH_BLOCKING reruns ran"
    fi
    # What to rerun: the tests named, else what first-light failed on this machine, else the
    # list that came back from a first-light on another machine and was carried here in .gpu/.
    if [ $# -gt 0 ]; then
      targets=("$@")
    elif [ -f "$state/first-light-failed.txt" ]; then
      mapfile -t targets <"$state/first-light-failed.txt"
    elif [ -f "$root/.gpu/first-light-failed.txt" ]; then
      mapfile -t targets <"$root/.gpu/first-light-failed.txt"
      title_from=" (the failed list carried in .gpu/first-light-failed.txt)"
    else
      targets=()
    fi
    # BIN:TEST pairs grouped into BIN -> filter "A:B:C".
    declare -A filters=()
    for t in "${targets[@]}"; do
      bin=${t%%:*} test='*'
      [[ $t == *:* ]] && test=${t#*:}
      filters[$bin]="${filters[$bin]:+${filters[$bin]}:}$test"
    done
    tools=(memcheck)
    title="follow-up: the tests first-light failed${title_from:-}, with CUDA_LAUNCH_BLOCKING=1, then memcheck"
    if [ ${#filters[@]} -eq 0 ]; then
      # Nothing failed: the kernels with shared memory and the most index arithmetic.
      filters=([test_cuda_attention]='*' [test_cuda_amp]='*'
        [test_cuda_ops]='CudaOps.Softmax*:CudaOps.SumAmaxAmin*:CudaOps.MeanVarNorm*:CudaOps.LargeFloat32Sum*:CudaOps.ExtremaPropagateNaN:CudaOps.AllFinite')
      tools=(memcheck racecheck)
      title="follow-up: nothing failed in first-light; memcheck and racecheck on the attention, AMP, softmax and reduction tests"
    fi
    for bin in "${!filters[@]}"; do
      t=$stage/bin/$bin
      if [ ! -x "$t" ]; then not_run "$bin" "not in the stage"; continue; fi
      # Vendor-library behaviour is reported by first-light, never judged here.
      filter="${filters[$bin]}-*LibraryBehaviour*"
      if [ ${#tools[@]} -eq 1 ]; then
        left=$((deadline - $(now)))
        if [ "$left" -le 5 ]; then not_run "$bin blocking" "the ${budget}s budget was spent"; continue; fi
        CUDA_LAUNCH_BLOCKING=1 MODULE_LOADING=$(module_loading "$bin") run_binary "$bin blocking" \
          "$((left < 60 ? left : 60))" "$logs/$bin.blocking.log" "$t" --gtest_filter="$filter"
      fi
      $sanitizer_missing && continue
      for tool in "${tools[@]}"; do
        left=$((deadline - $(now)))
        if [ "$left" -le 5 ]; then not_run "$bin $tool" "the ${budget}s budget was spent"; continue; fi
        MODULE_LOADING=$(module_loading "$bin") run_sanitized "$bin $tool" \
          "$((left < 120 ? left : 120))" "$logs/$bin" "$tool" \
          "$t" --gtest_filter="$filter"
      done
    done
    finish "$title (allocator bypassed; budget ${budget}s)"
    ;;

  tests)
    budget=${MANTISSA_GPU_TEST_BUDGET:-420} limit=${MANTISSA_GPU_BINARY_TIMEOUT:-300}
    mapfile -t binaries < <(pick_binaries 'test_*' "$@")
    run_tests "$budget" "$limit" "${binaries[@]}"
    finish "tests (budget ${budget}s, ${limit}s a binary)"
    ;;

  sanitize)
    tools=(memcheck racecheck)
    case "${1:-}" in
      memcheck | racecheck) tools=("$1"); shift ;;
      all) shift ;;
    esac
    if [ -z "$sanitizer" ]; then
      not_run compute-sanitizer "no compute-sanitizer (PATH, /usr/local/cuda/bin)"
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
        MODULE_LOADING=$(module_loading "$(basename "$t")") run_sanitized "$name" \
          "$((left < limit ? left : limit))" "$logs/$(basename "$t")" "$tool" "$t"
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
        rows+=("$(printf '%-34s built in %ss: %s' libtorch_peer "$(($(now) - start))" "$peer_dir/libtorch_peer")")
      else
        not_run libtorch_peer "build failed: $(grep -m1 -iE 'error' "$logs/peer-build.log" | cut -c1-100)"
      fi
    fi
    finish "peer (the libtorch benchmark peer, kept in .gpu/peer for the bench phase)"
    ;;

  bench)
    bench_args=() bench_note=""
    [ "${1:-}" = --quick ] && bench_args+=(--rounds 1 --reps 2 --min-time 0.05)
    if [ -x "$root/.gpu/peer/libtorch_peer" ]; then
      bench_args+=(--libtorch-peer "$root/.gpu/peer/libtorch_peer")
    else
      bench_note="libtorch peer: skipped (not built on this machine: run 'scripts/gpu/run.sh peer' first)"
    fi
    devices=cpu
    [ "$gpu_count" -gt 0 ] && devices=cpu,cuda
    run_collect 540 --devices "$devices" "${bench_args[@]}"
    cat "$logs/bench.txt"
    finish "bench (devices $devices)" "$bench_note"
    ;;
esac
