#!/usr/bin/env bash
# Times the first run's build (`scripts/run-example.sh` builds the `mantissa` command and the
# ToyModel example, CPU-only without a GPU) from scratch, for two commits in turn:
#   bench/first_run_time.sh [BASE [HEAD [ROUNDS]]]   (defaults: HEAD~1, the working tree, 1)
# HEAD may be "worktree" (the files as they are now, committed or not). Each round builds BASE then
# HEAD in fresh folders under ${TMPDIR:-/tmp} with ccache off, so both see the same machine state;
# prints wall and processor seconds per build and the processor time per file group.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base=${1:-HEAD~1}
head=${2:-worktree}
rounds=${3:-1}
work=$(mktemp -d "${TMPDIR:-/tmp}/mantissa-first-run.XXXXXX")
trap 'rm -rf "$work"' EXIT

checkout() {  # $1 ref, $2 folder
  mkdir -p "$2"
  if [ "$1" = worktree ]; then
    (cd "$root" && git ls-files -z --cached --others --exclude-standard |
      xargs -0 cp --parents -t "$2" 2>/dev/null || true)
  else
    git -C "$root" archive "$1" | tar -x -C "$2"
  fi
}

echo "ref               wall_s  cpu_s  kernels_cpu_s  other_cpu_s  ($(nproc) cores, $(date -u +%F))"
for r in $(seq "$rounds"); do
  for ref in "$base" "$head"; do
    dir=$work/$r-$(echo "$ref" | tr '/~^' '___')
    checkout "$ref" "$dir"
    start=$(date +%s.%N)
    CCACHE_DISABLE=1 MANTISSA_BUILD_TARGETS="mantissa_cli toy_model" \
      "$dir/scripts/build.sh" --cpu-only >"$dir.log" 2>&1
    end=$(date +%s.%N)
    # .ninja_log: start and end in ms of every job; kernels/cpu/ files are the same in both.
    awk -v ref="$ref" -v wall="$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')" 'NR > 1 {
        d = ($2 - $1) / 1000; t += d; if ($4 ~ /kernels\/cpu\//) k += d
      } END { printf "%-16s %7.1f %6.1f %14.1f %12.1f\n", ref, wall, t, k, t - k }' \
      "$dir/build-cpu/.ninja_log"
    rm -rf "$dir"
  done
done
