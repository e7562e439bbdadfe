#!/usr/bin/env bash
# scripts/check-docs-paths.sh must fail a tree whose docs name a missing file (plain, {a,b} and *
# forms) and pass the same tree once the files exist.
# Usage: tests/docs_paths_planted.sh <source dir>
set -euo pipefail

check="$1/scripts/check-docs-paths.sh"
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree/docs" "$tree/engine" "$tree/kernels/cuda"
cat >"$tree/README.md" <<'MD'
The tensor lives in `engine/tensor.h`; see docs/kernels.md.
MD
cat >"$tree/docs/kernels.md" <<'MD'
Kernels: kernels/cuda/loops.cuh, `engine/alloc.{h,cpp}` and `engine/seam.*`.
MD
touch "$tree/engine/tensor.h"

expect_fail() {
  if bash "$check" "$tree" 2>/dev/null; then
    echo "check-docs-paths passed a tree without $1" >&2
    exit 1
  fi
}
expect_fail kernels/cuda/loops.cuh
touch "$tree/kernels/cuda/loops.cuh"
expect_fail engine/alloc.cpp
touch "$tree/engine/alloc.h" "$tree/engine/alloc.cpp"
expect_fail engine/seam.*
touch "$tree/engine/seam.h"
bash "$check" "$tree"
