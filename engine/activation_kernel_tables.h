// Kernel tables of the listed activations (engine/activations.def), each entry's two: out =
// f(in; p0, p1) and grad_in = grad_out * f'(input; p0, p1), the formulas of
// engine/activation_formulas.h (kernels/cpu/activation_kernels.cpp,
// kernels/cuda/activation_kernels.cu). An entry without parameters is called with p0 = p1 = 0.
// Apart from engine/kernel_tables.h so that a new activation recompiles the files that run
// activations, not every kernel file.
#pragma once

#include "engine/dispatch.h"
#include "engine/tensor.h"

namespace mantissa {

using ActivationKernel = void (*)(const Tensor& out, const Tensor& in, double p0, double p1);
using ActivationBackwardKernel = void (*)(const Tensor& grad_in, const Tensor& grad_out,
                                          const Tensor& input, double p0, double p1);
#define MT_ACTIVATION_ENTRY(name, Module, Math) \
  MT_KERNEL_TABLE(name, ActivationKernel)       \
  MT_KERNEL_TABLE(name##_backward, ActivationBackwardKernel)
#include "engine/activations.def"

}  // namespace mantissa
