// CUDA fused optimizer steps (SGD, Adam/AdamW): one elementwise pass per parameter that reads the
// gradient and state and writes the parameter and state back, with exactly the per-element
// arithmetic of kernels/cpu/optimizer_kernels.cpp (PyTorch's single-tensor order; see there).
//
// To agree with the CPU bit for bit, this file is compiled with --fmad=false (CMakeLists.txt):
// nvcc would otherwise contract `p + neg_lr * d` and friends into fused multiply-adds, which
// round once instead of twice. Division and sqrt are IEEE-rounded under nvcc's defaults
// (-prec-div=true, -prec-sqrt=true), and the scalar factors are computed on the host in double
// exactly as the CPU computes them, so float32 and float64 steps match the CPU exactly.
#include <cmath>

#include "engine/kernel_tables.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/loops.cuh"

namespace mantissa::cuda {
namespace {

template <typename T>
T* maybe_data(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

template <typename M>
__device__ __forceinline__ bool nan_of(M v) {
  return v != v;
}

template <typename T>
struct SgdArgs {
  using M = opmath_t<T>;
  T* p;
  const T* g;
  T* buf;
  M wd, mom, keep, neg_lr;
  bool use_wd, use_momentum, maximize, nesterov, first;
};

template <typename T>
__global__ void __launch_bounds__(kBlockSize) sgd_step_kernel_cuda(SgdArgs<T> a, int64_t n) {
  using M = opmath_t<T>;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const M pv = static_cast<M>(a.p[i]);
    M d = static_cast<M>(a.g[i]);
    if (a.maximize) d = -d;
    if (a.use_wd) d = d + a.wd * pv;  // grad.add(param, alpha=weight_decay)
    if (a.use_momentum) {
      // buf = clone(d) on the first step, else buf.mul_(momentum).add_(d, alpha=1-dampening)
      M b = a.first ? d
                    : static_cast<M>(static_cast<T>(static_cast<M>(a.buf[i]) * a.mom)) + a.keep * d;
      a.buf[i] = static_cast<T>(b);
      b = static_cast<M>(a.buf[i]);
      d = a.nesterov ? d + a.mom * b : b;
    }
    a.p[i] = static_cast<T>(pv + a.neg_lr * d);  // param.add_(d, alpha=-lr)
  }
}

void sgd_step_cuda(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                   const SgdStepParams& hp) {
  const int64_t n = param.numel();
  if (n == 0) return;
  dispatch_dtype<kFloatingTypes>(param.dtype(), "sgd_step", param.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    SgdArgs<T> a;
    a.p = static_cast<T*>(param.data_ptr());
    a.g = static_cast<const T*>(grad.data_ptr());
    a.buf = maybe_data<T>(momentum_buffer);
    a.use_wd = hp.weight_decay != 0.0;
    a.use_momentum = hp.momentum != 0.0;
    a.maximize = hp.maximize;
    a.nesterov = hp.nesterov;
    a.first = hp.first_step;
    a.wd = static_cast<M>(hp.weight_decay);
    a.mom = static_cast<M>(hp.momentum);
    a.keep = static_cast<M>(1.0 - hp.dampening);
    a.neg_lr = static_cast<M>(-hp.lr);
    MT_ASSERT(!a.use_momentum || a.buf != nullptr, "sgd_step: momentum without a buffer");
    DeviceGuard guard(param.device().index());
    sgd_step_kernel_cuda<T><<<grid_for(n), kBlockSize, 0, detail::current_stream()>>>(a, n);
    MT_CUDA_CHECK_LAUNCH();
  });
}

template <typename T>
struct AdamArgs {
  using M = opmath_t<T>;
  T* p;
  const T* g;
  T *m1, *m2, *mx;
  M wd, decay, w1, one_minus_w1, beta2, w2, neg_step_size, bc2_sqrt, eps;
  bool maximize, amsgrad, coupled_wd, decoupled_wd, lerp_small;
};

template <typename T>
__global__ void __launch_bounds__(kBlockSize) adam_step_kernel_cuda(AdamArgs<T> a, int64_t n) {
  using M = opmath_t<T>;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    M pv = static_cast<M>(a.p[i]);
    M gv = static_cast<M>(a.g[i]);
    if (a.maximize) gv = -gv;
    if (a.coupled_wd) gv = gv + a.wd * pv;  // grad.add(param, alpha=wd)
    if (a.decoupled_wd) pv = static_cast<M>(static_cast<T>(pv * a.decay));  // param.mul_(1 - lr*wd)
    const M m = static_cast<M>(a.m1[i]);
    // exp_avg.lerp_(grad, 1 - beta1), with lerp's two-sided formula for accuracy near 1.
    a.m1[i] = static_cast<T>(a.lerp_small ? m + a.w1 * (gv - m) : gv - (gv - m) * a.one_minus_w1);
    // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    const M v = static_cast<M>(static_cast<T>(static_cast<M>(a.m2[i]) * a.beta2));
    a.m2[i] = static_cast<T>(v + a.w2 * gv * gv);
    M second = static_cast<M>(a.m2[i]);
    if (a.amsgrad) {
      const M old = static_cast<M>(a.mx[i]);
      // torch.maximum propagates NaN from either side
      const M best = (nan_of(old) || old > second) && !nan_of(second) ? old : second;
      a.mx[i] = static_cast<T>(best);
      second = static_cast<M>(a.mx[i]);
    }
    const M denom = dmath::sqrt(second) / a.bc2_sqrt + a.eps;
    a.p[i] = static_cast<T>(pv + a.neg_step_size * static_cast<M>(a.m1[i]) / denom);  // addcdiv_
  }
}

void adam_step_cuda(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                    const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq,
                    const AdamStepParams& hp) {
  const int64_t n = param.numel();
  if (n == 0) return;
  dispatch_dtype<kFloatingTypes>(param.dtype(), "adam_step", param.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    AdamArgs<T> a;
    a.p = static_cast<T*>(param.data_ptr());
    a.g = static_cast<const T*>(grad.data_ptr());
    a.m1 = static_cast<T*>(exp_avg.data_ptr());
    a.m2 = static_cast<T*>(exp_avg_sq.data_ptr());
    a.mx = maybe_data<T>(max_exp_avg_sq);
    a.maximize = hp.maximize;
    a.amsgrad = hp.amsgrad;
    a.coupled_wd = hp.weight_decay != 0.0 && !hp.decoupled_weight_decay;
    a.decoupled_wd = hp.weight_decay != 0.0 && hp.decoupled_weight_decay;
    const double step = static_cast<double>(hp.step);
    const double bias_correction1 = 1.0 - std::pow(hp.beta1, step);
    const double bias_correction2 = 1.0 - std::pow(hp.beta2, step);
    a.wd = static_cast<M>(hp.weight_decay);
    a.decay = static_cast<M>(1.0 - hp.lr * hp.weight_decay);
    a.w1 = static_cast<M>(1.0 - hp.beta1);
    a.lerp_small = std::abs(a.w1) < M(0.5);
    a.one_minus_w1 = M(1) - a.w1;
    a.beta2 = static_cast<M>(hp.beta2);
    a.w2 = static_cast<M>(1.0 - hp.beta2);
    a.neg_step_size = static_cast<M>(-(hp.lr / bias_correction1));
    a.bc2_sqrt = static_cast<M>(std::sqrt(bias_correction2));
    a.eps = static_cast<M>(hp.eps);
    MT_ASSERT(!a.amsgrad || a.mx != nullptr, "adam_step: amsgrad without max_exp_avg_sq");
    DeviceGuard guard(param.device().index());
    adam_step_kernel_cuda<T><<<grid_for(n), kBlockSize, 0, detail::current_stream()>>>(a, n);
    MT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

MT_REGISTER_KERNEL(sgd_step_kernel, kCUDA, &sgd_step_cuda);
MT_REGISTER_KERNEL(adam_step_kernel, kCUDA, &adam_step_cuda);

}  // namespace mantissa::cuda
