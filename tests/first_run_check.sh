#!/usr/bin/env bash
# CTest first_run: scripts/first-run.sh (what scripts/run-example.sh shows after building) in a
# scratch directory, with the built binaries. It must train, plot, say how far the loss fell (it
# must fall by 5x at least: the ToyModel config learns), name the run directory and plot that
# exist, and run the README's program to its end.
#   tests/first_run_check.sh SOURCE_DIR MANTISSA_BINARY TOY_MODEL_BINARY
set -euo pipefail
source_dir=$1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cd "$scratch"
rc=0
out=$("$source_dir/scripts/first-run.sh" "$2" "$3" 2>&1) || rc=$?
[ "$rc" -eq 0 ] || { echo "$out"; echo "FAIL: scripts/first-run.sh exited $rc"; exit 1; }
fail() { echo "$out"; echo "FAIL: $*"; exit 1; }
line=$(printf '%s\n' "$out" | grep 'learned the teacher network: training loss') ||
  fail "no line saying how the loss fell"
first=$(printf '%s\n' "$line" | sed -n 's/.*training loss \([^ ]*\) at step.*/\1/p')
last=$(printf '%s\n' "$line" | sed -n 's/.*, \([^ ]*\) at step [0-9]*\.$/\1/p')
awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 0 && b > 0 && b * 5 < a) }' ||
  fail "the loss did not fall 5x ($first -> $last)"
run_dir=$(printf '%s\n' "$out" | sed -n 's/^  run directory: \([^ ]*\) .*/\1/p')
[ -n "$run_dir" ] && [ -f "$run_dir/plot.svg" ] && [ -f "$run_dir/summary.json" ] ||
  fail "the run directory or its plot is missing ($run_dir)"
grep -q "plot:          $run_dir/plot.svg" <<<"$out" || fail "the plot's path is not shown"
grep -q '^step 99  loss' <<<"$out" || fail "the README's program did not run to its end"
echo "first run: loss $first -> $last, $run_dir/plot.svg"
