#!/usr/bin/env bash
# A first run from a fresh clone (installs missing packages first), building only what it runs:
#   scripts/run-example.sh              `mantissa train` on the default ToyModel config (it learns a
#                                       teacher network), its plot, then the ToyModel program of
#                                       the README (examples/toy_model.cpp)
#   scripts/run-example.sh NAME [ARGS]  runs examples/NAME.cpp instead
# On the best device: CUDA is built for this machine's GPU only (all of MANTISSA_CUDA_ARCHITECTURES
# when set), and not at all when there is no GPU.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
case "${1:-}" in
  -h | --help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
"$root/scripts/install-deps.sh" --build

build_args=()
if [ -z "${MANTISSA_CUDA:-}" ]; then
  gpu_arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 |
    tr -d ' .' || true)
  if [ -z "$gpu_arch" ]; then
    build_args=(--cpu-only)  # no GPU to run CUDA code on: skip compiling it
  elif [ -z "${MANTISSA_CUDA_ARCHITECTURES:-}" ]; then
    export MANTISSA_CUDA_ARCHITECTURES=$gpu_arch
  fi
fi

if [ $# -gt 0 ]; then
  name=$1
  shift
  build_dir=$(MANTISSA_BUILD_TARGETS=$name "$root/scripts/build.sh" "${build_args[@]}" | tail -n 1)
  exec "$build_dir/examples/$name" "$@"
fi

build_dir=$(MANTISSA_BUILD_TARGETS="mantissa_cli toy_model" \
  "$root/scripts/build.sh" "${build_args[@]}" | tail -n 1)
exec "$root/scripts/first-run.sh" "$build_dir/bin/mantissa" "$build_dir/examples/toy_model"
