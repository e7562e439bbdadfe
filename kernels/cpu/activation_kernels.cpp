// CPU kernels of the listed activations (engine/activations.def): each entry's forward and
// backward, the formulas of engine/activation_formulas.h evaluated in OpMath (float for the half
// types, rounded once on store), any layout, the floating dtypes. The CUDA kernels
// (kernels/cuda/activation_kernels.cu) evaluate the same formulas.
#include "engine/activation_formulas.h"
#include "engine/activation_kernel_tables.h"
#include "engine/kernel_tables.h"
#include "kernels/cpu/loops.h"

namespace mantissa::cpu {
namespace {

// Op: the list entry's name and formulas (Op::name, Op::Math).
template <typename Op>
void activation_kernel(const Tensor& out, const Tensor& in, double p0, double p1) {
  dispatch_dtype<kFloatingTypes>(out.dtype(), Op::name, out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    const formulas::Params<M> p{static_cast<M>(p0), static_cast<M>(p1)};
    elementwise<T, T>(
        out, [p](T x) { return T(Op::Math::forward(M(x), p)); }, in);
  });
}

// grad_out * f'(input); where f' is 0 the gradient is 0 whatever grad_out holds (PyTorch's
// masked backwards: hardtanh, hardswish).
template <typename Op>
void activation_backward_kernel(const Tensor& grad_in, const Tensor& grad_out, const Tensor& input,
                                double p0, double p1) {
  dispatch_dtype<kFloatingTypes>(grad_in.dtype(), Op::name, grad_in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    const formulas::Params<M> p{static_cast<M>(p0), static_cast<M>(p1)};
    elementwise<T, T, T>(
        grad_in,
        [p](T g, T x) {
          const M d = Op::Math::template derivative<M>(M(x), p);
          return d == M(0) ? T(M(0)) : T(M(g) * d);
        },
        grad_out, input);
  });
}

// Each entry's kernels, over its struct of engine/activation_formulas.h.
#define MT_ACTIVATION_ENTRY(op, Module, Formulas)                                 \
  MT_REGISTER_KERNEL(op##_kernel, kCPU, &activation_kernel<formulas::entry::op>); \
  MT_REGISTER_KERNEL(op##_backward_kernel, kCPU, &activation_backward_kernel<formulas::entry::op>);
#include "engine/activations.def"

}  // namespace
}  // namespace mantissa::cpu
