#!/usr/bin/env bash
# The whole test suite from a fresh clone: installs missing packages, builds, runs every test.
# CUDA tests report as skipped on machines without a GPU. See build.sh for settings;
# `scripts/test.sh --cpu-only` tests the CPU-only build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
build_dir=$("$root/scripts/build.sh" "$@" | tail -n 1)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc 2>/dev/null || echo 2)"
