#!/usr/bin/env bash
# Fuzzes the runner's readers (docs/fuzzing.md): builds the fuzz targets if needed (clang, ASan +
# UBSan, in build-asan/ — the build `scripts/test.sh --sanitize` tests), then runs each target
# for SECONDS (default 30) on its committed seed corpus (fuzz/corpus/<target>/) plus what earlier
# runs on this machine found (build-asan/fuzz-corpus/<target>/). Fails if any target finds
# anything: a crash, a sanitizer report, an exception other than mantissa::Error, a hang, or an
# allocation over the limit; the input that triggers it is printed, to be committed under
# fuzz/corpus-crashes/<target>/ once understood.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]    targets: config safetensors checkpoint csv idx hf_config tokenizer tfevents
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-30}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(config safetensors checkpoint csv idx hf_config tokenizer tfevents)
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "fuzz.sh: SECONDS must be a number, got '$seconds'" >&2; exit 2; }
for t in "${targets[@]}"; do
  [ -f "$root/fuzz/fuzz_$t.cpp" ] ||
    { echo "fuzz.sh: unknown target '$t' (config safetensors checkpoint csv idx hf_config tokenizer tfevents)" >&2; exit 2; }
done

"$root/scripts/install-deps.sh" --sanitize
build_dir=$(MANTISSA_BUILD_TARGETS="${targets[*]/#/fuzz_}" "$root/scripts/build.sh" --sanitize |
            tail -n 1)
source "$root/fuzz/options.sh"

failed=()
for t in "${targets[@]}"; do
  binary=$build_dir/fuzz/fuzz_$t
  seeds=$root/fuzz/corpus/$t
  [ -x "$binary" ] && [ -d "$seeds" ] || { echo "fuzz.sh: no $binary or $seeds" >&2; exit 2; }
  work=$build_dir/fuzz-corpus/$t
  findings=$build_dir/fuzz-findings/$t
  log=$build_dir/fuzz-logs/$t.log
  mkdir -p "$work" "$findings" "$(dirname "$log")"
  dirs=("$work" "$seeds")
  [ -d "$root/fuzz/corpus-crashes/$t" ] && dirs+=("$root/fuzz/corpus-crashes/$t")
  dict=()
  [ -f "$root/fuzz/dict/$t.dict" ] && dict=(-dict="$root/fuzz/dict/$t.dict")
  echo "fuzz.sh: fuzz_$t for ${seconds}s (log: $log)"
  rc=0
  "$binary" "${MANTISSA_FUZZ_OPTIONS[@]}" ${dict[@]+"${dict[@]}"} -max_total_time="$seconds" \
    -print_final_stats=1 -artifact_prefix="$findings/" "${dirs[@]}" >"$log" 2>&1 || rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  corpus=$(find "$work" -type f | wc -l)
  if [ "$rc" -eq 0 ]; then
    echo "fuzz.sh: fuzz_$t: ${runs:-?} inputs run, no finding (corpus of this machine: $corpus)"
    continue
  fi
  failed+=("$t")
  echo "fuzz.sh: fuzz_$t: FINDING (exit $rc) after ${runs:-?} inputs; the report:" >&2
  grep -v -E '^(#[0-9]+|INFO:|MS:|base unit:|0x[0-9a-f]|\\)' "$log" | tail -n 40 >&2 || true
  unit=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
  if [ -n "$unit" ]; then
    echo "fuzz.sh: reproducer: $unit" >&2
    echo "fuzz.sh: replay it with: $binary $unit" >&2
    echo "fuzz.sh: once understood, commit it as fuzz/corpus-crashes/$t/$(basename "$unit")" >&2
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: findings in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz.sh: no findings (${targets[*]}, ${seconds}s each)"
