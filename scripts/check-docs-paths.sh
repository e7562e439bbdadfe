#!/usr/bin/env bash
# Every source path the docs name (docs/*.md and README.md) must exist, so a file that is renamed
# or removed cannot leave a stale reference behind. A path is a word with a folder and a C++ or
# CUDA extension: dir/name.cpp, .h, .cu, .cuh, also dir/name.{h,cpp} and dir/name.* forms.
# Usage: scripts/check-docs-paths.sh [source dir]   (default: the repository this script is in)
set -euo pipefail

root=${1:-"$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"}
cd "$root"

docs=(README.md docs/*.md)
pattern='[A-Za-z0-9_./-]+/[A-Za-z0-9_.-]+\.(\{[a-z,]+\}|\*|(cpp|h|cu|cuh)\b)'

missing=0
checked=0
while IFS=: read -r doc path; do
  case "$path" in
    *'{'*)  # dir/name.{h,cpp}: each extension
      stem=${path%%.\{*}
      exts=${path#*\{}
      exts=${exts%\}}
      candidates=()
      for e in ${exts//,/ }; do candidates+=("$stem.$e"); done
      ;;
    *) candidates=("$path") ;;
  esac
  for c in "${candidates[@]}"; do
    checked=$((checked + 1))
    if [[ "$c" == *'*' ]]; then
      compgen -G "$c" >/dev/null && continue
    elif [[ -e "$c" ]]; then
      continue
    fi
    echo "$doc names $c, which does not exist" >&2
    missing=$((missing + 1))
  done
done < <(grep -oE "$pattern" "${docs[@]}" | sort -u)

if ((checked == 0)); then
  echo "check-docs-paths: found no paths in ${docs[*]}: the pattern is broken" >&2
  exit 1
fi
if ((missing > 0)); then
  echo "check-docs-paths: $missing stale path(s) of $checked" >&2
  exit 1
fi
echo "check-docs-paths: all $checked paths exist"
