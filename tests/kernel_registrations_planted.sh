#!/usr/bin/env bash
# scripts/check-kernel-registrations.sh must fail a tree where a registration's table name is
# pasted by a macro, where a device lacks a registration or where a one-device exception is
# stale, and pass the same tree once every table is registered by its full name.
# Usage: tests/kernel_registrations_planted.sh <source dir>
set -euo pipefail

check="$1/scripts/check-kernel-registrations.sh"
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree/engine" "$tree/kernels/cpu" "$tree/kernels/cuda"
ops=(neg abs exp log sqrt relu sigmoid tanh sin cos)
{
  echo '#define MT_FORALL_UNARY_OPS(X) \'
  for op in "${ops[@]::${#ops[@]}-1}"; do echo "  X($op) \\"; done
  echo "  X(${ops[-1]})"
  echo 'MT_DECLARE_TABLE(add, AddKernel)'
} >"$tree/engine/kernel_tables.h"
cat >"$tree/engine/amp_kernel_tables.h" <<'H'
extern KernelTable<AmpStreamGateKernel> amp_stream_gate_kernel;  // CUDA only
H

write_kernels() {  # $1: how relu's CPU registration is spelled
  {
    for op in "${ops[@]}"; do
      [[ $op == relu ]] || echo "MT_REGISTER_KERNEL(${op}_kernel, kCPU, &unary<$op>);"
    done
    echo "$1"
    echo 'MT_REGISTER_KERNEL(add_kernel, kCPU, &add_cpu);'
  } >"$tree/kernels/cpu/elementwise_kernels.cpp"
  {
    for op in "${ops[@]}" add amp_stream_gate; do
      echo "MT_REGISTER_KERNEL(${op}_kernel, kCUDA, &${op}_cuda);"
    done
  } >"$tree/kernels/cuda/kernels.cu"
}
expect_fail() {
  if bash "$check" "$tree" 2>/dev/null; then
    echo "check-kernel-registrations passed a tree with $1" >&2
    exit 1
  fi
}

write_kernels '#define MT_REGISTER_UNARY(name) MT_REGISTER_KERNEL(name##_kernel, kCPU, &unary<name>);
MT_REGISTER_UNARY(relu)'
expect_fail "relu's CPU registration pasted"
write_kernels '// relu_kernel is registered below
MT_REGISTER_UNARY(relu)'
expect_fail "relu_kernel named only in a comment"
write_kernels '#define MT_REGISTER_UNARY(table) MT_REGISTER_KERNEL(table, kCPU, &unary<table>);
MT_REGISTER_UNARY(relu_kernel)'
bash "$check" "$tree" >/dev/null
sed -i '/relu_kernel/d' "$tree/kernels/cuda/kernels.cu"
expect_fail "no CUDA registration of relu_kernel"
write_kernels 'MT_REGISTER_KERNEL(relu_kernel, kCPU, &unary<relu>);'
echo 'MT_REGISTER_KERNEL(amp_stream_gate_kernel, kCPU, &gate_cpu);' >>"$tree/kernels/cpu/elementwise_kernels.cpp"
expect_fail "a CPU registration of the CUDA-only amp_stream_gate_kernel"
write_kernels 'MT_REGISTER_KERNEL(relu_kernel, kCPU, &unary<relu>);'
bash "$check" "$tree"
