#!/usr/bin/env bash
# The folders are layers (docs/architecture.md): a folder's files include only headers of its own
# folder and of the folders below it. This lists every `#include "folder/..."` that reaches up or
# sideways, and fails if there is one.
# Usage: scripts/check-layers.sh [source dir]   (default: the repository this script is in)
set -euo pipefail

root=${1:-"$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"}
cd "$root"

# Each folder and what it may include besides itself. runner/'s rooms are layers too.
declare -A below=(
  [engine]=""
  [autograd]="engine"
  [cuda]="engine"
  [kernels]="engine cuda"
  [nn]="engine autograd cuda"
  [amp]="engine autograd nn"
  [distributed]="engine autograd nn cuda"
  [runner/files]="engine autograd nn amp distributed cuda"
  [runner/data]="engine autograd nn amp distributed cuda runner/files"
  [runner/text]="engine autograd nn amp distributed cuda runner/files"
  [runner/config]="engine autograd nn amp distributed cuda runner/files runner/data"
  [runner/training]="engine autograd nn amp distributed cuda runner/files runner/data runner/text
                     runner/config"
  [cli]="engine autograd nn amp distributed cuda runner/files runner/data runner/text
         runner/config runner/training"
)

# The layer of a path: its folder, or runner/<room>.
layer_of() {
  case "$1" in
    runner/*/*) local rest=${1#runner/}; echo "runner/${rest%%/*}" ;;
    */*) echo "${1%%/*}" ;;
    *) echo "" ;;
  esac
}

# The sources: git's list in a checkout (build trees and scratch files left out), else every file.
sources() {
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -- '*.h' '*.cpp' '*.cu' '*.cuh' '*.inc' '*.def'
  else
    find . -path ./build\* -prune -o -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' \
      -o -name '*.cuh' -o -name '*.inc' -o -name '*.def' \) -print | sed 's|^\./||'
  fi
}

bad=0
checked=0
for layer in "${!below[@]}"; do
  [ -d "$layer" ] || { echo "check-layers: no folder $layer" >&2; exit 2; }
done
while IFS= read -r line; do
  file=${line%%:*}
  target=$(sed -E 's/^[^:]*:[0-9]+:#include "([^"]+)".*/\1/' <<<"$line")
  from=$(layer_of "$file")
  to=$(layer_of "$target")
  [ -n "${below[$from]+x}" ] && [ -n "${below[$to]+x}" ] || continue
  checked=$((checked + 1))
  [ "$from" = "$to" ] && continue
  ok=0
  for l in ${below[$from]}; do [ "$l" = "$to" ] && ok=1; done
  if [ $ok -eq 0 ]; then
    echo "check-layers: ${line%%#*} $from includes $to ($target), a layer above or beside it"
    bad=$((bad + 1))
  fi
done < <(sources | xargs grep -nH -E '^#include "[a-z_]+/' || true)
[ $checked -gt 0 ] || { echo "check-layers: no includes found under $root" >&2; exit 2; }
[ $bad -eq 0 ] || { echo "check-layers: $bad includes reach up ($checked checked)"; exit 1; }
echo "check-layers: $checked includes between layers, each from a layer to itself or one below"
