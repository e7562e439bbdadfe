#!/usr/bin/env bash
# What scripts/run-example.sh shows once it has built: `mantissa train` on the default ToyModel
# config (a fixed teacher network to learn), its plot, how the loss fell and where everything is,
# then the README's program. Runs in the current directory (the run goes under runs/).
#   scripts/first-run.sh MANTISSA_BINARY TOY_MODEL_BINARY
set -euo pipefail
mantissa=$1
toy_model=$2
run_dir=runs/toy-$(date +%Y%m%d-%H%M%S)
[ -e "$run_dir" ] && run_dir=$run_dir-$$
"$mantissa" train --run-dir "$run_dir"
"$mantissa" plot "$run_dir" >/dev/null
# The first and last logged training losses, from the run's metrics.
losses=$(sed -n 's/^{"step": \([0-9]*\),.*"loss": \([^,}]*\).*/\1 \2/p' "$run_dir/metrics.jsonl")
first=${losses%%$'\n'*}
last=${losses##*$'\n'}
cat <<MSG

The ToyModel learned the teacher network: training loss $(printf '%.3g' "${first#* }") at step \
${first%% *}, $(printf '%.3g' "${last#* }") at step ${last%% *}.
  run directory: $run_dir  (metrics.jsonl, train.log, checkpoints/, summary.json)
  plot:          $run_dir/plot.svg
  evaluate it:   $mantissa eval $run_dir   (every command: docs/cli.md)

Now the README's program (examples/toy_model.cpp): the same model on fresh random data at every
step, as PyTorch's ToyModel example does, so there is nothing to learn and its loss stays near 1.
MSG
exec "$toy_model"
