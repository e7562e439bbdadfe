// CPU fused linear ops: the shared composition of the bmm, add, sum and activation kernels
// (kernels/linear_composite.h), which is also what the CUDA kernels fall back to. The CPU never
// makes a ReLU mask: ReLU's backward reads the layer's output.
#include "kernels/linear_composite.h"

namespace mantissa::cpu {
namespace {

Tensor linear_forward_cpu(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                          LinearActivation act, bool want_aux) {
  return linear_composite::forward(out, x, w, bias, act, want_aux);
}

void linear_backward_act_cpu(const Tensor& grad_pre, const Tensor& grad_bias,
                             const Tensor& grad_out, const Tensor& w, const Tensor& h,
                             const Tensor& aux, LinearActivation act) {
  linear_composite::backward_act(grad_pre, grad_bias, grad_out, w, h, aux, act);
}

}  // namespace

MT_REGISTER_KERNEL(linear_forward_kernel, kCPU, &linear_forward_cpu);
MT_REGISTER_KERNEL(linear_backward_weight_kernel, kCPU, &linear_composite::backward_weight);
MT_REGISTER_KERNEL(linear_backward_act_kernel, kCPU, &linear_backward_act_cpu);

}  // namespace mantissa::cpu
