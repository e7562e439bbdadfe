#!/usr/bin/env bash
# The whole test suite from a fresh clone: installs missing packages, builds, runs every test.
# CUDA tests report as skipped on machines without a GPU. See build.sh for settings;
# `scripts/test.sh --cpu-only` tests the CPU-only build, `scripts/test.sh --sanitize` the CPU-only
# AddressSanitizer + UndefinedBehaviorSanitizer build (clang, in build-asan/), where any
# sanitizer report fails the test that triggered it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
sanitize=false
for arg in "$@"; do [ "$arg" = --sanitize ] && sanitize=true; done
if $sanitize; then
  "$root/scripts/install-deps.sh" --sanitize
else
  "$root/scripts/install-deps.sh"
fi
# As build.sh sets them, and for the builds the tests make (tests/consumer/): ccache sees paths
# relative to the checkout.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
build_dir=$("$root/scripts/build.sh" "$@" | tail -n 1)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
ctest_args=()
if $sanitize; then
  # The build stops at the first report (-fno-sanitize-recover=all); these make sure the
  # runtime does too, with a stack trace, whatever the caller's environment says.
  # allocator_may_return_null=1: an allocation too large for the machine fails as it does without
  # ASan (malloc returns null), so the tests of the library's "out of memory" errors run; the
  # fuzz targets (scripts/fuzz.sh) keep ASan's default and report such an allocation instead.
  export ASAN_OPTIONS="$ASAN_OPTIONS:halt_on_error=1:detect_leaks=1:allocator_may_return_null=1"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}halt_on_error=1:print_stacktrace=1"
  # Not run here: consumer_find_package and consumer_add_subdirectory install mantissa and
  # build fresh projects (a whole second mantissa, for add_subdirectory) with the default
  # compiler against it. They test packaging, not memory safety, take minutes more under the
  # sanitizers and run no mantissa code that the rest of the suite does not; `scripts/test.sh`
  # runs them.
  ctest_args+=(--exclude-regex '^consumer_')
  # llvm-symbolizer turns the reports' addresses into file:line.
  if [ -d /usr/lib/llvm-19/bin ]; then export PATH=$PATH:/usr/lib/llvm-19/bin; fi
fi
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" \
  ${ctest_args[@]+"${ctest_args[@]}"}
