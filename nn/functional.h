// nn::functional: the stateless forms of the layers and losses (torch.nn.functional).
#pragma once

#include <string_view>

#include "autograd/functions.h"

namespace mantissa::nn {

using Reduction = ::mantissa::Reduction;
// "none", "mean" or "sum".
Reduction parse_reduction(std::string_view name);
using KlDivReduction = ::mantissa::KlDivReduction;
// "none", "batchmean", "sum" or "mean" (kl_div's reduction strings).
KlDivReduction parse_kl_div_reduction(std::string_view name);

namespace functional {

// Every op of the op list (engine/ops.def) under its name, with the defaults stated there:
// torch.nn.functional's activations, losses, norms, dropout, softmax, linear, conv and pooling
// among them.
#define MT_OP(name, policy, derivatives, tables) using ::mantissa::name;
#include "engine/ops.def"

// The activation a linear layer fuses into its GEMM (cuBLASLt epilogues on CUDA; docs/kernels.md).
using Activation = LinearActivation;
// act(x @ w^T + b) in one fused op; Activation::GeluTanh is gelu(x, "tanh").
inline Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, Activation act) {
  return mantissa::linear_act(x, w, b, act);
}

}  // namespace functional
}  // namespace mantissa::nn
