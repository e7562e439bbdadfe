#!/usr/bin/env bash
# Checks scripts/gpu/run.sh on a machine without a GPU, with small planted stages. Each of these
# must be named and failed while the others still run, and the phase must exit non-zero: a binary
# that aborts after printing a passing summary, one that cannot load (a library missing), one with
# an unresolved symbol, one that hangs, one that runs no test, and one whose tests all skip "no
# CUDA device" while nvidia-smi (a planted one) reports a GPU. A clean stage passes, with and
# without that GPU; a failing *LibraryBehaviour* test is reported apart and does not fail the run;
# first-light without a GPU gives the "NO GPU" verdict, and follow-up reruns what it failed,
# blocking and under a planted compute-sanitizer. check-stage.sh fails a stage that lacks a
# library one of its files needs. Where a GPU is visible: modules load lazily except in the
# binaries marked eager; a vendor library's declined fast path is reported apart; a bench whose
# processes run past their time still gives the tests' PASS, with the rows measured before in
# $OUT and the timeouts as notes; first-light that fails two tests names exactly those two, a
# follow-up on a fresh machine with only the carried .gpu/ reruns exactly those two, and
# first-light chains that follow-up itself. prepare.sh without the cuDNN frontend stops with one
# line. Registered with CTest (tests/CMakeLists.txt); needs a C compiler. KEEP_WORK=1 keeps the
# scratch folder.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap '[ -n "${KEEP_WORK:-}" ] || rm -rf "$work"' EXIT
cc=${CC:-cc}
fail() { echo "check-run: FAILED: $*" >&2; exit 1; }

# A fake gtest binary: prints what gtest prints for one passing test, then does `body` (which
# sees argc/argv and has(flag): whether an argument starts with flag).
plant() {  # plant DIR NAME C-BODY [LINK-ARGS...]
  local dir=$1 name=$2 body=$3
  shift 3
  cat >"$work/$name.c" <<C
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
void helper_from_lib(void);
static int argc_; static char** argv_;
static const char* has(const char* flag) {
  for (int i = 1; i < argc_; ++i) if (strncmp(argv_[i], flag, strlen(flag)) == 0) return argv_[i];
  return NULL;
}
int main(int argc, char** argv) {
  argc_ = argc; argv_ = argv; (void)has;
  if (has("--gtest_list_tests")) return 0;
  printf("[ RUN      ] Planted.First\n[       OK ] Planted.First (0 ms)\n");
  $body
  return 0;
}
C
  "$cc" -o "$dir/bin/$name" "$work/$name.c" "$@"
}
new_stage() {
  rm -rf "$work/stage" && mkdir -p "$work/stage/bin" "$work/stage/lib"
  echo "abc1234" >"$work/stage/commit.txt" && echo 90 >"$work/stage/arch.txt"
}
pack() { tar -C "$work/stage" -cJf "$work/$1.tar.xz" .; }
run() {  # run ARCHIVE PHASE... : run.sh's exit code; its output in $work/out.txt
  local archive=$1
  shift
  rm -rf "$work/out"
  set +e
  MANTISSA_GPU_STAGE=$work/$archive.tar.xz OUT=$work/out MANTISSA_GPU_BINARY_TIMEOUT=3 \
    MANTISSA_GPU_STATE=$work/state \
    bash "$root/scripts/gpu/run.sh" "$@" >"$work/out.txt" 2>&1
  local rc=$?
  set -e
  return $rc
}
expect_line() {  # expect_line REGEX [FILE]
  grep -qE "$1" "${2:-$work/out/tests-summary.txt}" || {
    cat "$work/out.txt" >&2
    fail "no line matching '$1' in ${2:-the summary}"
  }
}
# A planted nvidia-smi that sees one H200, first on PATH.
mkdir -p "$work/gpu-path"
cat >"$work/gpu-path/nvidia-smi" <<'SH'
#!/bin/sh
case "$*" in
  -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)" ;;
  *--query-gpu*) echo "NVIDIA H200, 580.95.05, 143771 MiB" ;;
  *) echo "planted nvidia-smi" ;;
esac
SH
chmod +x "$work/gpu-path/nvidia-smi"
with_gpu() { PATH="$work/gpu-path:$PATH" "$@"; }
# Otherwise a planted nvidia-smi that finds none, first on PATH, whatever this machine has.
mkdir -p "$work/no-gpu-path"
printf '#!/bin/sh\necho "NVIDIA-SMI has failed: no devices were found" >&2\nexit 9\n' \
  >"$work/no-gpu-path/nvidia-smi"
chmod +x "$work/no-gpu-path/nvidia-smi"
export PATH="$work/no-gpu-path:$PATH"

# 1. A clean stage passes, and the summary counts its tests.
new_stage
plant "$work/stage" test_good 'printf("[ RUN      ] Planted.Skip\n[  SKIPPED ] Planted.Skip (0 ms)\n");'
pack clean
run clean tests || { cat "$work/out.txt" >&2; fail "a clean stage did not pass"; }
expect_line '^test_good +1 +0 +1 +0 .* ok$'
expect_line 'tests: 1 passed, 0 failed, 1 skipped; 0 binaries failed'
# ... also where a GPU is visible (a skip that is not for want of a device is fine).
with_gpu run clean tests || { cat "$work/out.txt" >&2; fail "a clean stage did not pass with a GPU"; }
expect_line '^GPU: NVIDIA H200'

# 2. Binaries that crash, hang, run nothing or cannot load fail the run, each named, and the
#    others still run.
"$cc" -shared -fPIC -o "$work/stage/lib/libplanted.so" -x c - <<<'void helper_from_lib(void) {}'
plant "$work/stage" test_symbol 'helper_from_lib();' -L"$work/stage/lib" -lplanted
"$cc" -shared -fPIC -o "$work/stage/lib/libplanted.so" -x c - <<<'void other_symbol(void) {}'
"$cc" -shared -fPIC -o "$work/libgone.so" -x c - <<<'void helper_from_lib(void) {}'
plant "$work/stage" test_noload 'helper_from_lib();' -L"$work" -lgone
plant "$work/stage" test_abort 'printf("[  PASSED  ] 1 test.\n"); fflush(stdout); abort();'
plant "$work/stage" test_hang 'printf("[ RUN      ] Planted.Hang\n"); fflush(stdout); sleep(60);'
plant "$work/stage" test_zgood ''
cat >"$work/stage/bin/test_empty" <<<'#!/bin/sh'
chmod +x "$work/stage/bin/test_empty"
pack broken
if run broken tests; then cat "$work/out.txt" >&2; fail "a stage with broken binaries passed"; fi
grep -q 'preflight FAILED' "$work/out.txt" || fail "the preflight did not report the missing library"
grep -qE 'test_noload: +libgone.so => not found' "$work/out.txt" || {
  cat "$work/out.txt" >&2
  fail "the missing library is not named"
}
expect_line '^test_good .* ok$'
expect_line '^test_zgood .* ok$'  # after every broken one: they did not stop the run
expect_line '^test_abort .*FAILED: killed by signal 6 \(ABRT\)'
expect_line '^test_hang .*FAILED: timed out.* in Planted.Hang'
expect_line '^test_empty .*FAILED: ran no test'
expect_line '^test_symbol .*FAILED: cannot load'
expect_line '^test_noload .*FAILED: cannot load: libgone.so not found'
expect_line '5 binaries failed or did not run'
[ -f "$work/out/tests-logs.tar.gz" ] || fail "no log archive"
# Listed first: with pipefail, grep -q leaving early would fail the pipe on tar's SIGPIPE.
tar -tzf "$work/out/tests-logs.tar.gz" >"$work/logs.txt"
grep -q 'test_abort.log' "$work/logs.txt" || fail "no log of test_abort"

# 3. On a machine whose nvidia-smi sees a GPU, a binary whose CUDA tests skip "no CUDA device"
#    (the CUDA runtime did not start) fails; without a GPU the same binary passes.
new_stage
plant "$work/stage" test_good ''
plant "$work/stage" test_cuda_skips 'printf("[ RUN      ] Cuda.Op\nx.cpp:1: Skipped\nno CUDA device: cudaGetDeviceCount failed with cudaErrorUnknown (unknown error)\n[  SKIPPED ] Cuda.Op (0 ms)\n");'
pack skips
run skips tests || { cat "$work/out.txt" >&2; fail "CUDA skips without a GPU failed the run"; }
if with_gpu run skips tests; then cat "$work/out.txt" >&2; fail "CUDA skips on a GPU machine passed"; fi
expect_line '^test_cuda_skips .*FAILED: 1 tests found no CUDA device while nvidia-smi sees 1 GPU\(s\): no CUDA device: cudaGetDeviceCount failed with cudaErrorUnknown'
expect_line '^test_good .* ok$'

# 4. A failing *LibraryBehaviour* test is reported apart and does not fail the run; the same
#    binary's other tests decide its verdict.
new_stage
plant "$work/stage" test_cuda_lib '
  const char* f = has("--gtest_filter=");
  if (f && strstr(f, "=*LibraryBehaviour*")) {
    printf("[ RUN      ] VendorLibraryBehaviour.GeluAtInf\n[  FAILED  ] VendorLibraryBehaviour.GeluAtInf (0 ms)\n");
    return 1;
  }'
# It lists one library-behaviour test when asked.
cat >"$work/list.c" <<'C'
#include <stdio.h>
#include <string.h>
int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (strcmp(argv[i], "--gtest_list_tests") == 0) {
      printf("VendorLibraryBehaviour.\n  GeluAtInf\n");
      return 0;
    }
  return 0;
}
C
"$cc" -o "$work/lister" "$work/list.c"
mv "$work/stage/bin/test_cuda_lib" "$work/stage/bin/test_cuda_lib.real"
cat >"$work/stage/bin/test_cuda_lib" <<SH
#!/bin/sh
case "\$*" in *--gtest_list_tests*) exec "$work/lister" --gtest_list_tests ;; esac
exec "\$(dirname "\$0")/test_cuda_lib.real" "\$@"
SH
chmod +x "$work/stage/bin/test_cuda_lib"
plant "$work/stage" test_cuda_param 'printf("[ RUN      ] P/Suite.T/bf16\n[  FAILED  ] P/Suite.T/bf16, where GetParam() = 4-byte object <01-00 00-00> (0 ms)\n[  FAILED  ] 1 test, listed below:\n[  FAILED  ] P/Suite.T/bf16, where GetParam() = 4-byte object <01-00 00-00>\n"); return 1;'
cat >"$work/stage/bin/test_mixed" <<<'#!/bin/sh'
chmod +x "$work/stage/bin/test_mixed"
printf 'test_cuda_lib lazy\ntest_cuda_param lazy\ntest_mixed lazy Gpu.A:Gpu.B\n' >"$work/stage/cuda-tests.txt"
pack library
run library tests test_cuda_lib || { cat "$work/out.txt" >&2; fail "a LibraryBehaviour failure failed the run"; }
expect_line '^test_cuda_lib +1 +0 .* ok$'
expect_line '^vendor-library behaviour'
expect_line '^test_cuda_lib +1 +1 .*FAILED: exit 1'

# 5. first-light without a GPU: the CUDA binaries run (from cuda-tests.txt) and the verdict says
#    that nothing ran on a GPU, exit 3. A failed parameterized test (gtest prints its parameter and
#    repeats the name in its closing list) counts once and is named for follow-up, as is a mixed
#    binary that failed as a whole, with its filter.
rc=0
run library first-light || rc=$?
[ $rc -eq 3 ] || { cat "$work/out.txt" >&2; fail "first-light without a GPU exited $rc, not 3"; }
expect_line '^verdict: NO GPU' "$work/out/first-light-summary.txt"
grep -qx 'test_cuda_param:P/Suite.T/bf16' "$work/out/first-light-failed.txt" || {
  cat "$work/out/first-light-failed.txt" >&2
  fail "the failed parameterized test is not in first-light-failed.txt"
}
grep -qx 'test_mixed:Gpu.A:Gpu.B' "$work/out/first-light-failed.txt" || {
  cat "$work/out/first-light-failed.txt" >&2
  fail "the mixed binary that ran no test is not in first-light-failed.txt with its filter"
}
expect_line '^test_cuda_param +1 +1 +0 ' "$work/out/first-light-summary.txt"
expect_line '^test_cuda_lib .* ok$' "$work/out/first-light-summary.txt"
[ "$(tail -n 1 "$work/out.txt" | cut -c1-15)" = "verdict: NO GPU" ] || fail "the verdict is not the last line"
[ "$(ls "$work/out" | wc -l)" -le 8 ] || fail "first-light wrote more than 8 files"

# 5b. follow-up reruns what first-light failed (kept in the state folder): blocking, then under
#     compute-sanitizer (a planted one that runs the binary and reports no error).
mkdir -p "$work/san-path"
cat >"$work/san-path/compute-sanitizer" <<'SH'
#!/bin/sh
log=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tool | --error-exitcode | --print-limit) shift 2 ;;
    --log-file) log=$2; shift 2 ;;
    *) break ;;
  esac
done
echo "========= ERROR SUMMARY: 0 errors" >"$log"
exec "$@"
SH
chmod +x "$work/san-path/compute-sanitizer"
rc=0
PATH="$work/san-path:$PATH" run library follow-up || rc=$?
[ $rc -ne 0 ] || { cat "$work/out.txt" >&2; fail "follow-up of a failing test passed"; }
expect_line '^test_cuda_param blocking +1 +1 ' "$work/out/follow-up-summary.txt"
expect_line '^test_cuda_param memcheck .*\[0 error\(s\)\]' "$work/out/follow-up-summary.txt"
expect_line '^test_mixed blocking .*FAILED: ran no test' "$work/out/follow-up-summary.txt"

# 6. check-stage.sh proves the closure from the ELF headers: a stage whose binary needs a library
#    that is neither staged nor supplied by the GPU machine fails, naming both; staged, it passes.
new_stage
mkdir -p "$work/stage/lib/compat"
"$cc" -shared -fPIC -o "$work/libneeded.so" -x c - <<<'void helper_from_lib(void) {}'
plant "$work/stage" test_needs 'helper_from_lib();' -L"$work" -lneeded
if bash "$root/scripts/gpu/check-stage.sh" "$work/stage" >"$work/cs.txt" 2>&1; then
  cat "$work/cs.txt" >&2
  fail "check-stage passed a stage without libneeded.so"
fi
grep -q 'bin/test_needs needs libneeded.so: not in the stage' "$work/cs.txt" || {
  cat "$work/cs.txt" >&2
  fail "check-stage did not name the missing library"
}
cp "$work/libneeded.so" "$work/stage/lib/"
bash "$root/scripts/gpu/check-stage.sh" "$work/stage" >"$work/cs.txt" 2>&1 || {
  cat "$work/cs.txt" >&2
  fail "check-stage failed a stage that carries its closure"
}
# A C++ program needs libstdc++ in lib/compat/.
printf 'int main() { throw 1; }\n' >"$work/cxx.cpp"
"${CXX:-c++}" -o "$work/stage/bin/test_cxx" "$work/cxx.cpp"
if bash "$root/scripts/gpu/check-stage.sh" "$work/stage" >"$work/cs.txt" 2>&1; then
  fail "check-stage passed a C++ binary without the C++ runtime in lib/compat/"
fi
grep -q 'needs libstdc++.so.6: the C++ runtime is not in lib/compat/' "$work/cs.txt" || {
  cat "$work/cs.txt" >&2
  fail "check-stage did not name the missing C++ runtime"
}

# 7. Where a GPU is visible: CUDA modules load lazily except in the binaries cuda-tests.txt marks
#    eager; a test's "[ LIBRARY  ]" line (a vendor library declined a fast path, the composed path
#    was checked instead) is listed with the vendor-library rows and does not fail the run; and
#    the bench never decides the verdict: its mantissa_bench row and PyTorch peers that run past
#    their time are named as notes, the rows measured before them are in $OUT, and first-light
#    still passes.
new_stage
cat >"$work/stage/bin/test_cuda_gate" <<SH
#!/bin/sh
case "\$*" in *--gtest_list_tests*) exit 0 ;; esac
echo "\$CUDA_MODULE_LOADING" >"$work/gate.loading"
printf '[ RUN      ] Gate.Held\n[       OK ] Gate.Held (0 ms)\n'
SH
cat >"$work/stage/bin/test_cuda_plain" <<SH
#!/bin/sh
case "\$*" in *--gtest_list_tests*) exit 0 ;; esac
echo "\$CUDA_MODULE_LOADING" >"$work/plain.loading"
printf '[ RUN      ] Plain.Op\n[ LIBRARY  ] cuda.linear declined NoAlgorithm bfloat16 (1 calls): cuBLASLt 130100 offered no algorithm\n[       OK ] Plain.Op (0 ms)\n'
SH
# The bench: mlp4096 rows measured at once, the GPT row's process hangs.
cat >"$work/stage/bin/mantissa_bench" <<'SH'
#!/bin/sh
case "$*" in *gpt2_124m*) sleep 60 ;; esac
echo '{"context": {}, "benchmarks": [{"run_type": "iteration", "real_time": 250.0, "time_unit": "us", "peak_rss_mib": 40, "base_rss_mib": 30}]}'
SH
chmod +x "$work/stage/bin/"*
printf 'test_cuda_gate eager\ntest_cuda_plain lazy\n' >"$work/stage/cuda-tests.txt"
pack bench
# A python with "torch" whose PyTorch peer sleeps past its time.
cat >"$work/python" <<'SH'
#!/bin/sh
[ "$*" = "-c import torch" ] && exit 0
exec python3 "$@"
SH
printf 'import time\ntime.sleep(60)\n' >"$work/sleepy_peer.py"
chmod +x "$work/python"
rc=0
MANTISSA_GPU_PYTHON="$work/python" MANTISSA_GPU_PEER="$work/sleepy_peer.py" \
  MANTISSA_GPU_BENCH_PROCESS_TIMEOUT=2 MANTISSA_GPU_BENCH_TIMEOUT=40 with_gpu run bench first-light ||
  rc=$?
[ $rc -eq 0 ] || { cat "$work/out.txt" >&2; fail "first-light with a slow bench exited $rc, not 0"; }
expect_line '^verdict: PASS' "$work/out/first-light-summary.txt"
[ "$(cat "$work/gate.loading")" = EAGER ] || fail "the eager binary loaded its modules $(cat "$work/gate.loading")"
[ "$(cat "$work/plain.loading")" = LAZY ] || fail "a lazy binary loaded its modules $(cat "$work/plain.loading")"
expect_line '^test_cuda_plain +cuda.linear declined NoAlgorithm bfloat16' "$work/out/first-light-summary.txt"
expect_line 'gpt2_124m/cuda/bfloat16 mantissa: timed out after 2 s' "$work/out/first-light-summary.txt"
expect_line 'mlp4096/cuda/bfloat16 PyTorch: timed out after 2 s' "$work/out/first-light-summary.txt"
grep -q '"workload": "mlp4096", "device": "cuda", "precision": "bfloat16", "who": "mantissa", "us": 250.0' \
  "$work/out/bench-rows.jsonl" || { cat "$work/out/bench-rows.jsonl" >&2; fail "the measured mlp4096 row is not in bench-rows.jsonl"; }
grep -q '| MLP 1024-4096-1024 SGD step, batch 512 | cuda | bfloat16 | 250 |' "$work/out/bench.md" ||
  { cat "$work/out/bench.md" >&2; fail "the measured mlp4096 row is not in bench.md"; }

# 8. A first-light on a GPU machine that fails two tests names exactly those two; a follow-up on a
#    fresh machine (the scripts and the carried .gpu/ only: the stage and the failed list that
#    came back) reruns exactly those two; and on the same machine first-light chains the
#    follow-up itself.
new_stage
cat >"$work/stage/bin/test_cuda_two" <<SH
#!/bin/sh
for a in "\$@"; do case "\$a" in --gtest_filter=*) echo "\${a#--gtest_filter=}" >>"$work/two.filters" ;; esac; done
printf '[ RUN      ] Planted.First\n[       OK ] Planted.First (0 ms)\n'
printf '[ RUN      ] Planted.A\n[  FAILED  ] Planted.A (1 ms)\n'
printf '[ RUN      ] Planted.B\n[  FAILED  ] Planted.B (1 ms)\n'
exit 1
SH
plant "$work/stage" test_cuda_fine ''
chmod +x "$work/stage/bin/test_cuda_two"
printf 'test_cuda_fine lazy\ntest_cuda_two lazy\n' >"$work/stage/cuda-tests.txt"
pack two
rm -f "$work/two.filters"
rc=0
MANTISSA_GPU_FOLLOW_UP_BUDGET=0 MANTISSA_GPU_PYTHON=/nonexistent with_gpu run two first-light ||
  rc=$?
[ $rc -eq 1 ] || { cat "$work/out.txt" >&2; fail "first-light with two failed tests exited $rc, not 1"; }
[ "$(sort "$work/out/first-light-failed.txt" | tr '\n' ' ')" = "test_cuda_two:Planted.A test_cuda_two:Planted.B " ] || {
  cat "$work/out/first-light-failed.txt" >&2
  fail "first-light-failed.txt does not name exactly the two failed tests"
}
bare=$work/bare
mkdir -p "$bare/scripts" "$bare/.gpu"
cp -r "$root/scripts/gpu" "$bare/scripts/"
cp "$work/two.tar.xz" "$bare/.gpu/stage.tar.xz"
cp "$work/out/first-light-failed.txt" "$bare/.gpu/"
rm -f "$work/two.filters"
rc=0
( cd "$bare" && PATH="$work/san-path:$work/gpu-path:$PATH" OUT="$work/bare-out" \
    MANTISSA_GPU_BINARY_TIMEOUT=3 bash scripts/gpu/run.sh follow-up >"$work/out.txt" 2>&1 ) || rc=$?
[ $rc -ne 0 ] || { cat "$work/out.txt" >&2; fail "follow-up of two failing tests passed"; }
expect_line 'the failed list carried in .gpu/first-light-failed.txt' "$work/bare-out/follow-up-summary.txt"
expect_line '^test_cuda_two blocking +1 +2 ' "$work/bare-out/follow-up-summary.txt"
[ "$(sort -u "$work/two.filters")" = "Planted.A:Planted.B-*LibraryBehaviour*" ] || {
  cat "$work/two.filters" >&2
  fail "follow-up on a fresh machine did not rerun exactly the two failed tests"
}
grep -q test_cuda_fine "$work/bare-out/follow-up-summary.txt" && fail "follow-up reran a binary that passed"
rc=0
PATH="$work/san-path:$PATH" MANTISSA_GPU_PYTHON=/nonexistent with_gpu run two first-light || rc=$?
[ $rc -eq 1 ] || { cat "$work/out.txt" >&2; fail "first-light with a chained follow-up exited $rc, not 1"; }
expect_line '^test_cuda_two blocking +1 +2 ' "$work/out/follow-up-summary.txt"
[ "$(tail -n 1 "$work/out.txt" | cut -c1-14)" = "verdict: FAIL:" ] || {
  tail -n 5 "$work/out.txt" >&2
  fail "the verdict is not the last line after a chained follow-up"
}

# 9. prepare.sh stops, with one line and no stage, when the build would lack cuDNN's fused
#    attention (here: a cuDNN frontend folder without the headers), right after configuring.
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  mkdir -p "$work/no-frontend"
  rc=0
  MANTISSA_CUDNN_FRONTEND="$work/no-frontend" BUILD_DIR="$work/prepare-build" \
    bash "$root/scripts/gpu/prepare.sh" 90 >"$work/prepare.out" 2>"$work/prepare.err" || rc=$?
  [ $rc -eq 1 ] || { cat "$work/prepare.err" >&2; fail "prepare.sh without the frontend exited $rc, not 1"; }
  [ "$(wc -l <"$work/prepare.err")" -eq 1 ] && [ ! -s "$work/prepare.out" ] || {
    cat "$work/prepare.err" >&2
    fail "prepare.sh without the frontend did not fail with one line"
  }
  grep -q "^prepare.sh: no cuDNN fused attention in this build: cudnn_frontend.h is not under $work/no-frontend/include" \
    "$work/prepare.err" || { cat "$work/prepare.err" >&2; fail "prepare.sh did not say why"; }
fi

# 10. Usage errors exit 2.
set +e
bash "$root/scripts/gpu/run.sh" >/dev/null 2>&1
[ $? -eq 2 ] || fail "run.sh without a phase did not exit 2"
set -e
echo "check-run: run.sh reports every planted failure and passes a clean stage"
