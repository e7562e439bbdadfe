#!/usr/bin/env bash
# Checks scripts/gpu/run.sh on a machine without a GPU, with small planted stages: a binary that
# cannot load, one that aborts after printing a passing gtest summary, one that hangs, one that
# runs no test and one with an unresolved symbol must each fail the run; a clean stage must pass.
# Registered with CTest (tests/CMakeLists.txt); needs a C compiler.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc=${CC:-cc}
fail() { echo "check-run: FAILED: $*" >&2; exit 1; }

# A fake gtest binary: prints what gtest prints for one passing test, then does `tail`.
plant() {  # plant DIR NAME C-BODY [LINK-ARGS...]
  local dir=$1 name=$2 body=$3
  shift 3
  cat >"$work/$name.c" <<C
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
void helper_from_lib(void);
int main(void) {
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
    bash "$root/scripts/gpu/run.sh" "$@" >"$work/out.txt" 2>&1
  local rc=$?
  set -e
  return $rc
}
expect_line() {  # expect_line REGEX
  grep -qE "$1" "$work/out/tests-summary.txt" || {
    cat "$work/out.txt" >&2
    fail "no line matching '$1' in the summary"
  }
}

# 1. A clean stage passes, and the summary counts its tests.
new_stage
plant "$work/stage" test_good 'printf("[ RUN      ] Planted.Skip\n[  SKIPPED ] Planted.Skip (0 ms)\n");'
pack clean
run clean tests || { cat "$work/out.txt" >&2; fail "a clean stage did not pass"; }
expect_line '^test_good +1 +0 +1 +0 .* ok$'
expect_line 'tests: 1 passed, 0 failed, 1 skipped; 0 binaries failed'

# 2. Binaries that crash, hang, run nothing or cannot resolve a symbol fail the run, each named.
"$cc" -shared -fPIC -o "$work/stage/lib/libplanted.so" -x c - <<<'void helper_from_lib(void) {}'
plant "$work/stage" test_symbol 'helper_from_lib();' -L"$work/stage/lib" -lplanted
"$cc" -shared -fPIC -o "$work/stage/lib/libplanted.so" -x c - <<<'void other_symbol(void) {}'
plant "$work/stage" test_abort 'printf("[  PASSED  ] 1 test.\n"); fflush(stdout); abort();'
plant "$work/stage" test_hang 'printf("[ RUN      ] Planted.Hang\n"); fflush(stdout); sleep(60);'
cat >"$work/stage/bin/test_empty" <<<'#!/bin/sh'
chmod +x "$work/stage/bin/test_empty"
pack broken
if run broken tests; then cat "$work/out.txt" >&2; fail "a stage with broken binaries passed"; fi
expect_line '^test_good .* ok$'
expect_line '^test_abort .*FAILED: killed by signal 6 \(ABRT\)'
expect_line '^test_hang .*FAILED: timed out.* in Planted.Hang'
expect_line '^test_empty .*FAILED: ran no test'
expect_line '^test_symbol .*FAILED: cannot load'
expect_line '4 binaries failed or did not run'
[ -f "$work/out/tests-logs.tar.gz" ] || fail "no log archive"
# Listed first: with pipefail, grep -q leaving early would fail the pipe on tar's SIGPIPE.
tar -tzf "$work/out/tests-logs.tar.gz" >"$work/logs.txt"
grep -q 'test_abort.log' "$work/logs.txt" || fail "no log of test_abort"

# 3. A binary whose library is missing stops the run before any test, naming both.
new_stage
"$cc" -shared -fPIC -o "$work/libgone.so" -x c - <<<'void helper_from_lib(void) {}'
plant "$work/stage" test_noload 'helper_from_lib();' -L"$work" -lgone
pack noload
if run noload tests; then cat "$work/out.txt" >&2; fail "a stage with a missing library passed"; fi
grep -q 'preflight FAILED' "$work/out.txt" || fail "no preflight failure reported"
grep -qE 'test_noload: +libgone.so => not found' "$work/out.txt" || {
  cat "$work/out.txt" >&2
  fail "the missing library is not named"
}
[ ! -f "$work/out/tests-logs.tar.gz" ] || fail "tests ran after a failed preflight"

# 4. Usage errors exit 2.
set +e
bash "$root/scripts/gpu/run.sh" >/dev/null 2>&1
[ $? -eq 2 ] || fail "run.sh without a phase did not exit 2"
set -e
echo "check-run: run.sh reports every planted failure and passes a clean stage"
