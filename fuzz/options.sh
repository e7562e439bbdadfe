# Sourced by scripts/fuzz.sh and fuzz/replay.sh: the libFuzzer flags and sanitizer settings under
# which every fuzz target runs.
#   -rss_limit_mb / -malloc_limit_mb: a reader that believes a hostile size field and allocates
#     gigabytes is a finding (reported as out-of-memory), not a slow run. The inputs are at most a
#     few KB, so no honest reader needs 256 MB for one.
#   -timeout: one input taking 10 s is a hang.
MANTISSA_FUZZ_OPTIONS=(-rss_limit_mb=2048 -malloc_limit_mb=256 -timeout=10 -max_len=16384)
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export MANTISSA_LOG_LEVEL=off
# llvm-symbolizer turns the reports' addresses into file:line.
if [ -d /usr/lib/llvm-19/bin ]; then export PATH=$PATH:/usr/lib/llvm-19/bin; fi
