#!/usr/bin/env bash
# Checks that a GPU stage carries its whole closure, from the ELF headers alone (readelf, no
# loader): every NEEDED entry of every staged binary and library is in the stage's lib/, or is
# one that the GPU machine supplies (scripts/gpu/system-libs.sh: glibc, the C++ runtime, which
# must also be in lib/compat/, and the CUDA libraries). A new dependency of mantissa then fails
# here, on the build machine, instead of stopping the next GPU lease.
#   scripts/gpu/check-stage.sh DIR|ARCHIVE
#   scripts/gpu/check-stage.sh --build BUILD_DIR   stages BUILD_DIR (stage.sh) and checks that;
#                                                  with CHECK_STAGE_FIRST_LIGHT=1 also runs
#                                                  first-light on it (CTest gpu_stage_closure)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=system-libs.sh
. "$root/scripts/gpu/system-libs.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
case "${1:-}" in
  --build)
    [ $# -eq 2 ] || { echo "usage: check-stage.sh --build BUILD_DIR" >&2; exit 2; }
    stage=$work/stage
    "$root/scripts/gpu/stage.sh" "$2" "$stage" >/dev/null
    ;;
  "" | -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; [ -n "${1:-}" ]; exit $? ;;
  *)
    if [ -d "$1" ]; then
      stage=$1
    else
      stage=$work/stage
      mkdir -p "$stage"
      tar -C "$stage" -xJf "$1"
    fi
    ;;
esac

problems=()
files=0
for f in "$stage"/bin/* "$stage"/lib/*.so* "$stage"/lib/compat/*; do
  [ -f "$f" ] || continue
  head -c 4 "$f" | grep -q 'ELF' || continue  # scripts in bin/
  files=$((files + 1))
  needed=$(readelf -d "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  for lib in $needed; do
    if [ -e "$stage/lib/$lib" ] || is_glibc "$lib" || is_cuda_library "$lib"; then continue; fi
    if is_cxx_runtime "$lib"; then
      [ -e "$stage/lib/compat/$lib" ] || problems+=("${f#"$stage"/} needs $lib: the C++ runtime is not in lib/compat/")
      continue
    fi
    problems+=("${f#"$stage"/} needs $lib: not in the stage, and not one the GPU machine supplies")
  done
done
[ "$files" -gt 0 ] || { echo "check-stage: FAILED: no ELF files in $stage" >&2; exit 1; }
if [ ${#problems[@]} -gt 0 ]; then
  echo "check-stage: FAILED: ${#problems[@]} missing dependencies:" >&2
  printf '  %s\n' "${problems[@]}" | head -40 >&2
  exit 1
fi
size=$(du -sm "$stage" | cut -f1)
echo "check-stage: the stage carries its closure ($files ELF files, ${size} MiB unpacked, $(wc -l <"$stage/cuda-tests.txt" 2>/dev/null || echo 0) CUDA test binaries)"

if [ "${CHECK_STAGE_FIRST_LIGHT:-0}" = 1 ]; then
  # Here, without a GPU: first-light must load every CUDA test binary, run it, and end with the
  # honest "no GPU" verdict (exit 3) in under a minute.
  start=$(date +%s)
  set +e
  MANTISSA_GPU_STAGE=$stage OUT=$work/out MANTISSA_GPU_STATE=$work/state \
    bash "$root/scripts/gpu/run.sh" first-light >"$work/fl.txt" 2>&1
  rc=$?
  set -e
  took=$(($(date +%s) - start))
  if [ $rc -ne 3 ] || ! grep -q '^verdict: NO GPU' "$work/fl.txt" || grep -q 'FAILED' "$work/fl.txt"; then
    cat "$work/fl.txt" >&2
    echo "check-stage: FAILED: first-light on this stage exited $rc; expected the NO GPU verdict (3) with every binary loaded and passing" >&2
    exit 1
  fi
  [ "$took" -lt 60 ] || { echo "check-stage: FAILED: first-light took ${took}s here (limit 60)" >&2; exit 1; }
  echo "check-stage: first-light here: $(tail -n 1 "$work/fl.txt") (${took}s)"
  # Where a GPU is expected (MANTISSA_REQUIRE_GPU=1, as run.sh sets beside a GPU), a CUDA test
  # that finds no device fails, with the runtime's reason, instead of skipping.
  first=$(awk 'NR == 1 {print $1}' "$stage/cuda-tests.txt")
  set +e
  MANTISSA_REQUIRE_GPU=1 LD_LIBRARY_PATH="$stage/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$stage/bin/$first" >"$work/req.txt" 2>&1
  rc=$?
  set -e
  if [ $rc -eq 0 ] || ! grep -q 'no CUDA device although MANTISSA_REQUIRE_GPU=1: ' "$work/req.txt"; then
    tail -n 20 "$work/req.txt" >&2
    echo "check-stage: FAILED: $first under MANTISSA_REQUIRE_GPU=1 without a GPU exited $rc instead of failing its CUDA tests" >&2
    exit 1
  fi
  echo "check-stage: $first under MANTISSA_REQUIRE_GPU=1 fails its CUDA tests here: $(grep -m1 -o 'no CUDA device although.*' "$work/req.txt")"
fi
