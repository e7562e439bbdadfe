// Linear layers with a fused activation (torch's _addmm_activation, apex's fused dense): the
// GEMM, bias and activation run as one kernel call (a cuBLASLt epilogue on CUDA), and the
// backward folds the bias gradient into a GEMM. See docs/kernels.md for the epilogue table.
#pragma once

#include "engine/linear_activation.h"
#include "engine/tensor.h"

namespace mantissa {

// act(x @ w^T + b) for x [*, in], w [out, in], b [out] (or undefined, or broadcastable).
// LinearActivation::GeluTanh is gelu(approximate="tanh"); there is no fused exact GELU.
Tensor linear_act(const Tensor& x, const Tensor& weight, const Tensor& bias, LinearActivation act);

// linear(act(linear(x, w1, b1)), w2, b2): a two-layer MLP block whose backward applies act' and
// reduces b1's gradient right after the GEMM that computes the hidden layer's gradient (inside it
// for GeluTanh on CUDA: cuBLASLt's DGELU_BGRAD epilogue). Same values as the unfused composition.
Tensor linear_act_linear(const Tensor& x, const Tensor& w1, const Tensor& b1, LinearActivation act,
                         const Tensor& w2, const Tensor& b2);

}  // namespace mantissa
