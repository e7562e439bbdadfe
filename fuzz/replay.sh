#!/usr/bin/env bash
# Usage: fuzz/replay.sh FUZZ_BINARY DIR...   Runs the fuzz target once on every file in the DIRs
# that exist (no fuzzing), with the limits scripts/fuzz.sh uses: fails on any finding.
set -euo pipefail
binary=$1
shift
dirs=()
for d in "$@"; do [ -d "$d" ] && dirs+=("$d"); done
[ ${#dirs[@]} -gt 0 ] || { echo "replay.sh: none of the corpus directories exists: $*" >&2; exit 1; }
source "$(dirname "$0")/options.sh"
# A failing input is already one of the files; libFuzzer's copy of it goes to $TMPDIR.
exec "$binary" "${MANTISSA_FUZZ_OPTIONS[@]}" -artifact_prefix="${TMPDIR:-/tmp}/mantissa-replay-" \
  -runs=0 "${dirs[@]}"
