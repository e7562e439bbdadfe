#!/usr/bin/env bash
# Every kernel table declared in engine/kernel_tables.h and engine/amp_kernel_tables.h must be
# registered under its full name (`relu_kernel`) in kernels/cpu and in kernels/cuda, so that
# searching for a table's name finds its kernels. A registration whose table name is pasted
# together by a macro (`name##_kernel`) cannot be found that way and fails this check.
# A registration is a macro call whose first argument is the table: MT_REGISTER_KERNEL(relu_kernel,
# ...) or a helper macro taking the full table name.
# Usage: scripts/check-kernel-registrations.sh [source dir]   (default: this script's repository)
set -euo pipefail

root=${1:-"$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"}
cd "$root"

# Tables with a kernel on one device only, each with the reason.
declare -A cuda_only=(
  # A test hook that holds a CUDA stream closed; the CPU has no streams to hold.
  [amp_stream_gate]=1
)
declare -A cpu_only=()

headers=(engine/kernel_tables.h engine/amp_kernel_tables.h)
# Tables come from the op lists (`  X(relu)  \`), MT_DECLARE_TABLE(name, ...) and
# `extern KernelTable<...> name_kernel;`.
tables=$(
  {
    sed -n '/^#define MT_FORALL_[A-Z_]*_OPS(X)/,/[^\\]$/p' "${headers[@]}" |
      grep -oE '\bX\([a-z0-9_]+\)' | sed -E 's/X\((.*)\)/\1/'
    grep -hE '^\s*MT_DECLARE_TABLE\(' "${headers[@]}" | sed -E 's/^\s*MT_DECLARE_TABLE\(\s*([a-z0-9_]+).*/\1/'
    grep -hoE '^\s*extern\s+KernelTable<[^>]*>\s+[a-z0-9_]+_kernel\s*;' "${headers[@]}" |
      sed -E 's/.*\s([a-z0-9_]+)_kernel\s*;/\1/'
  } | sort -u
)
count=$(wc -w <<<"$tables")
if ((count < 10)); then
  echo "check-kernel-registrations: found only $count tables in ${headers[*]}: the parsing is broken" >&2
  exit 1
fi

# Lines, without comments, that pass a table as a macro's first argument.
registrations() { grep -rhoE '^[^/]*\b[A-Z][A-Z0-9_]*\(\s*[a-z0-9_]+_kernel\s*[,)]' "$1" || true; }
cpu=$(registrations kernels/cpu)
cuda=$(registrations kernels/cuda)
registered() { grep -qE "\(\s*$2_kernel\s*[,)]" <<<"$1"; }

errors=0
fail() {
  echo "$1" >&2
  errors=$((errors + 1))
}
declare -A known=()
for t in $tables; do
  known[$t]=1
  if [[ -n "${cuda_only[$t]:-}" ]]; then
    registered "$cpu" "$t" && fail "$t: listed as CUDA-only, but kernels/cpu registers ${t}_kernel"
  else
    registered "$cpu" "$t" || fail "$t: no registration of ${t}_kernel (by that name) in kernels/cpu"
  fi
  if [[ -n "${cpu_only[$t]:-}" ]]; then
    registered "$cuda" "$t" && fail "$t: listed as CPU-only, but kernels/cuda registers ${t}_kernel"
  else
    registered "$cuda" "$t" || fail "$t: no registration of ${t}_kernel (by that name) in kernels/cuda"
  fi
done
for t in "${!cuda_only[@]}" "${!cpu_only[@]}"; do
  [[ -n "${known[$t]:-}" ]] || fail "$t: listed as a one-device exception, but no such table"
done
if pasted=$(grep -rnE '##\s*_kernel' kernels/cpu kernels/cuda); then
  fail "table names pasted by a macro (spell the table in full):"$'\n'"$pasted"
fi

if ((errors > 0)); then
  echo "check-kernel-registrations: $errors problem(s) across $count tables" >&2
  exit 1
fi
echo "check-kernel-registrations: all $count tables are registered by name"
