#!/usr/bin/env bash
# scripts/check-layers.sh must fail a tree where a lower layer includes a higher one (a runner
# room reaching up to training/, the engine reaching up to nn/) and pass it once that include is
# gone.
# Usage: tests/layers_planted.sh <source dir>
set -euo pipefail

check="$(cd "$1" && pwd)/scripts/check-layers.sh"
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
cd "$tree"
git init -q .
for d in engine autograd cuda kernels nn amp distributed runner/files runner/data runner/text \
         runner/config runner/training cli; do
  mkdir -p "$d"
  echo '#include "engine/tensor.h"' >"$d/x.cpp"
done
echo '#include "runner/files/json.h"' >runner/training/t.cpp
git add -A

expect_fail() {
  if bash "$check" "$tree" >/dev/null 2>&1; then
    echo "check-layers passed a tree where $1" >&2
    exit 1
  fi
}
bash "$check" "$tree" >/dev/null
echo '#include "runner/training/trainer.h"' >runner/files/json.cpp
git add -A
expect_fail "runner/files includes runner/training"
git rm -q -f runner/files/json.cpp
echo '#include "nn/module.h"' >engine/tensor.cpp
git add -A
expect_fail "engine includes nn"
git rm -q -f engine/tensor.cpp
bash "$check" "$tree" >/dev/null
echo "layers_planted: the check fails both planted up-includes and passes the tree without them"
