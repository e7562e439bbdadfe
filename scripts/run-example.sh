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
"$root/scripts/install-deps.sh"

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
mantissa=$build_dir/bin/mantissa

run_dir=runs/toy-$(date +%Y%m%d-%H%M%S)
[ -e "$run_dir" ] && run_dir=$run_dir-$$
"$mantissa" train --run-dir "$run_dir"
"$mantissa" plot "$run_dir" >/dev/null
# The first and last logged training losses, from the run's metrics.
losses=$(sed -n 's/^{"step": \([0-9]*\),.*"loss": \([^,}]*\).*/\1 \2/p' "$run_dir/metrics.jsonl")
first=$(printf '%s\n' "$losses" | head -n 1)
last=$(printf '%s\n' "$losses" | tail -n 1)
cat <<EOF

The ToyModel learned the teacher network: training loss $(printf '%.3g' "${first#* }") at step \
${first%% *}, $(printf '%.3g' "${last#* }") at step ${last%% *}.
  run directory: $run_dir  (metrics.jsonl, train.log, checkpoints/, summary.json)
  plot:          $run_dir/plot.svg
  evaluate it:   $mantissa eval $run_dir   (every command: docs/cli.md)

Now the README's program (examples/toy_model.cpp): the same model on fresh random data at every
step, as PyTorch's ToyModel example does, so there is nothing to learn and its loss stays near 1.
EOF
exec "$build_dir/examples/toy_model"
