#!/usr/bin/env bash
# Builds and runs an example from a fresh clone (installs missing packages first).
#   scripts/run-example.sh              trains the ToyModel on the best device (cuda:0 or cpu)
#   scripts/run-example.sh NAME [ARGS]  runs examples/NAME.cpp instead
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
name=${1:-toy_model}
[ $# -gt 0 ] && shift
"$root/scripts/install-deps.sh"
build_dir=$("$root/scripts/build.sh" | tail -n 1)
exec "$build_dir/examples/$name" "$@"
