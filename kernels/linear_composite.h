// The fused linear ops (engine/kernel_tables.h: linear_forward, linear_backward_weight,
// linear_backward_act) composed from the bmm, add, sum and activation kernels of one device.
// This is the CPU implementation, and the CUDA fallback wherever a cuBLASLt epilogue does not
// apply, so both devices share one definition of what the fused ops compute. Half types round
// after the GEMM and again after the bias, exactly as the unfused mm + add composition does.
#pragma once

#include "engine/factory.h"
#include "engine/kernel_tables.h"

namespace mantissa::linear_composite {

// A one-batch [1, rows, cols] view of a matrix, as the bmm kernel takes it.
inline Tensor batch1(const Tensor& m) {
  return detail::make_view(m, Shape{1, m.size(0), m.size(1)}, Shape{0, m.stride(0), m.stride(1)},
                           m.storage_offset());
}

// out [M,N] += bias [N], broadcast over rows.
inline void add_bias(const Tensor& out, const Tensor& bias) {
  const Tensor row =
      detail::make_view(bias, out.shape(), Shape{0, bias.stride(0)}, bias.storage_offset());
  add_kernel(out.device())(out, out, row, 1);
}

// out = act(in) elementwise (out may be in).
inline void activate(const Tensor& out, const Tensor& in, LinearActivation act) {
  switch (act) {
    case LinearActivation::None:
      if (!out.is_same(in)) copy_kernel(out.device())(out, in);
      return;
    case LinearActivation::Relu:
      relu_kernel(out.device())(out, in);
      return;
    case LinearActivation::GeluTanh:
      gelu_tanh_kernel(out.device())(out, in);
      return;
  }
}

// grad_in = grad * act'(pre) (grad_in may be grad).
inline void activation_backward(const Tensor& grad_in, const Tensor& grad, const Tensor& pre,
                                LinearActivation act) {
  switch (act) {
    case LinearActivation::None:
      if (!grad_in.is_same(grad)) copy_kernel(grad_in.device())(grad_in, grad);
      return;
    case LinearActivation::Relu:
      relu_backward_kernel(grad_in.device())(grad_in, grad, pre);
      return;
    case LinearActivation::GeluTanh:
      gelu_tanh_backward_kernel(grad_in.device())(grad_in, grad, pre);
      return;
  }
}

// out [N] = column sums of m [M,N] (sum's keepdim form is [1,N]).
inline void column_sums(const Tensor& out, const Tensor& m) {
  sum_kernel(m.device())(
      detail::make_view(out, Shape{1, out.size(0)}, Shape{0, 1}, out.storage_offset()), m);
}

inline Tensor forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                      LinearActivation act, bool want_aux) {
  bmm_kernel(out.device())(batch1(out), batch1(x), batch1(w.t()));
  if (bias.defined()) add_bias(out, bias);
  Tensor aux;
  if (want_aux && act == LinearActivation::GeluTanh) {  // what GELU's backward reads
    aux = empty(out.shape(), TensorOptions(out.device()).dtype(out.dtype()));
    copy_kernel(out.device())(aux, out);
  }
  activate(out, out, act);
  return aux;
}

inline void backward_weight(const Tensor& grad_w, const Tensor& grad_bias, const Tensor& grad_out,
                            const Tensor& x) {
  bmm_kernel(grad_w.device())(batch1(grad_w), batch1(grad_out.t()), batch1(x));
  if (grad_bias.defined()) column_sums(grad_bias, grad_out);
}

// What follows the GEMM grad_pre = grad_out @ w in backward_act: act' in place and the bias
// gradient. ReLU's derivative is read from h, GeluTanh's from the pre-activation in aux. CUDA
// runs it after its own GEMM for ReLU (whose cuBLASLt epilogues would lose NaN).
inline void finish_backward_act(const Tensor& grad_pre, const Tensor& grad_bias, const Tensor& h,
                                const Tensor& aux, LinearActivation act) {
  activation_backward(grad_pre, grad_pre, act == LinearActivation::Relu ? h : aux, act);
  if (grad_bias.defined()) column_sums(grad_bias, grad_pre);
}

inline void backward_act(const Tensor& grad_pre, const Tensor& grad_bias, const Tensor& grad_out,
                         const Tensor& w, const Tensor& h, const Tensor& aux,
                         LinearActivation act) {
  bmm_kernel(grad_pre.device())(batch1(grad_pre), batch1(grad_out), batch1(w));
  finish_backward_act(grad_pre, grad_bias, h, aux, act);
}

}  // namespace mantissa::linear_composite
