// CUDA batch norm, group norm and RMS norm over statistics sets of whole channels (NormSets in
// engine/kernel_tables.h), and their backward; kernels/cpu/norm_kernels.cpp is the oracle.
//
// The statistics run on the reduction engine (kernels/cuda/reduce.cuh) with a Welford fold (a
// sum of squares for RMS norm), so batch norm's few long per-channel sets split across blocks
// like any long reduction. The backward's per-set sums (g = grad_out * weight and g * xhat,
// two tensors the one-input engine does not fold) and the per-channel parameter sums are a block
// per set or channel with a shared-memory tree; the elementwise passes are grid-strided. Math is
// in opmath (float for the half types, rounded once on store), and weights may be float32 under
// a float16/bfloat16 input (batch norm under autocast).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/cuda_check.h"
#include "cuda/current_stream.h"
#include "cuda/device_guard.h"
#include "engine/factory.h"
#include "engine/kernel_tables.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/cuda/reduce.cuh"

namespace mantissa::cuda {
namespace {

struct WelfordAcc {
  double n, mean, m2;
};

// Welford's mean and M2 per set (Chan's formula to merge), stored as mean, rstd and the unbiased
// variance.
template <typename T>
struct NormStatsOp {
  using Acc = WelfordAcc;
  using A = opmath_t<T>;
  A* mean;
  A* rstd;
  A* unbiased_var;
  double eps;
  __device__ Acc init() const { return {0, 0, 0}; }
  __device__ void step(Acc& a, T x, int64_t) const {
    const double v = static_cast<A>(x);
    a.n += 1;
    const double d = v - a.mean;
    a.mean += d / a.n;
    a.m2 += d * (v - a.mean);
  }
  __device__ void merge(Acc& a, const Acc& b) const {
    if (b.n == 0) return;
    if (a.n == 0) {
      a = b;
      return;
    }
    const double n = a.n + b.n, d = b.mean - a.mean;
    a.mean += d * (b.n / n);
    a.m2 += b.m2 + d * d * (a.n * b.n / n);
    a.n = n;
  }
  __device__ void store(int64_t off, const Acc& a) const {
    mean[off] = static_cast<A>(a.mean);
    rstd[off] = static_cast<A>(rsqrt(a.m2 / a.n + eps));
    if (unbiased_var) unbiased_var[off] = static_cast<A>(a.m2 / (a.n - 1));
  }
};

// rstd = 1 / sqrt(mean(x^2) + eps) per set.
template <typename T>
struct RmsStatsOp {
  using Acc = double;
  using A = opmath_t<T>;
  A* rstd;
  double count, eps;
  __device__ Acc init() const { return 0; }
  __device__ void step(Acc& a, T x, int64_t) const {
    const double v = static_cast<A>(x);
    a += v * v;
  }
  __device__ void merge(Acc& a, const Acc& b) const { a += b; }
  __device__ void store(int64_t off, const Acc& a) const {
    rstd[off] = static_cast<A>(rsqrt(a / count + eps));
  }
};

void norm_stats_cuda(const Tensor& mean, const Tensor& rstd, const Tensor& unbiased_var,
                     const Tensor& x, const NormSets& ns, double eps) {
  const int64_t K = ns.C / ns.G * ns.L;
  const Tensor x3 = mantissa::detail::make_view(x, Shape{ns.N, ns.G, K}, Shape{ns.G * K, K, 1},
                                                x.storage_offset());
  const Tensor layout = mantissa::detail::make_view(rstd, Shape{ns.per_sample ? ns.N : 1, ns.G, 1},
                                                    Shape{ns.G, 1, 1}, rstd.storage_offset());
  dispatch_dtype<kFloatingTypes>(x.dtype(), "norm_stats", x.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    A* rp = static_cast<A*>(rstd.data_ptr());
    if (!ns.centered) {
      gpu_reduce<T>(layout, x3, RmsStatsOp<T>{rp, static_cast<double>(ns.C * ns.L), eps});
      return;
    }
    A* vp = unbiased_var.defined() ? static_cast<A*>(unbiased_var.data_ptr()) : nullptr;
    gpu_reduce<T>(layout, x3, NormStatsOp<T>{static_cast<A*>(mean.data_ptr()), rp, vp, eps});
  });
}

// Calls f.template operator()<P>() with P the parameters' storage type: T, or float for the
// float32 parameters of a half-type input.
template <typename T, typename F>
void with_param_type(const Tensor& weight, const Tensor& bias, F&& f) {
  const Tensor& p = weight.defined() ? weight : bias;
  if constexpr (!std::is_same_v<T, float> && !std::is_same_v<T, double>) {
    if (p.defined() && p.dtype() == kFloat32) {
      f.template operator()<float>();
      return;
    }
  }
  f.template operator()<T>();
}

template <typename T, typename P>
__global__ void __launch_bounds__(kBlockSize)
    norm_apply_kernel_impl(T* out, const T* x, const opmath_t<T>* mean, const opmath_t<T>* rstd,
                           const P* w, const P* b, NormSets ns) {
  using A = opmath_t<T>;
  const int64_t numel = ns.N * ns.C * ns.L;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel;
       i += stride) {
    const int64_t nc = i / ns.L, c = nc % ns.C, s = ns.set_of(nc / ns.C, c);
    A y = (static_cast<A>(x[i]) - (mean ? mean[s] : A(0))) * rstd[s];
    if (w) y = y * static_cast<A>(static_cast<opmath_t<P>>(w[c]));
    if (b) y = y + static_cast<A>(static_cast<opmath_t<P>>(b[c]));
    out[i] = static_cast<T>(y);
  }
}

void norm_apply_cuda(const Tensor& out, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                     const Tensor& weight, const Tensor& bias, const NormSets& ns) {
  const int64_t numel = ns.N * ns.C * ns.L;
  if (numel == 0) return;
  DeviceGuard guard(x.device().index());
  dispatch_dtype<kFloatingTypes>(x.dtype(), "norm_apply", x.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    with_param_type<T>(weight, bias, [&]<typename P>() {
      norm_apply_kernel_impl<T, P><<<grid_for(numel), kBlockSize, 0, detail::current_stream()>>>(
          static_cast<T*>(out.data_ptr()), static_cast<const T*>(x.data_ptr()),
          mean.defined() ? static_cast<const A*>(mean.data_ptr()) : nullptr,
          static_cast<const A*>(rstd.data_ptr()),
          weight.defined() ? static_cast<const P*>(weight.data_ptr()) : nullptr,
          bias.defined() ? static_cast<const P*>(bias.data_ptr()) : nullptr, ns);
      MT_CUDA_CHECK_LAUNCH();
    });
  });
}

// Sums u and v over the block (blockDim.x a power of two, at most kBlockSize); thread 0 gets
// the totals.
template <typename A>
__device__ void block_sum2(A& u, A& v) {
  __shared__ A su[kBlockSize], sv[kBlockSize];
  su[threadIdx.x] = u;
  sv[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      su[threadIdx.x] += su[threadIdx.x + s];
      sv[threadIdx.x] += sv[threadIdx.x + s];
    }
    __syncthreads();
  }
  u = su[0];
  v = sv[0];
  __syncthreads();  // the arrays are reused by the next set
}

// Per set s: a[s] = mean of g (centred only), b[s] = mean of g * xhat, g = grad_out * weight.
template <typename T, typename P>
__global__ void __launch_bounds__(kBlockSize)
    norm_set_sums_kernel(opmath_t<T>* a, opmath_t<T>* b, const T* gy, const T* x,
                         const opmath_t<T>* mean, const opmath_t<T>* rstd, const P* w,
                         NormSets ns) {
  using A = opmath_t<T>;
  const int64_t cg = ns.C / ns.G, run = cg * ns.L;  // a set's elements in one sample
  const int64_t samples = ns.per_sample ? 1 : ns.N;
  for (int64_t s = blockIdx.x; s < ns.sets(); s += gridDim.x) {
    const int64_t g = ns.per_sample ? s % ns.G : s, n0 = ns.per_sample ? s / ns.G : 0;
    const A m = mean ? mean[s] : A(0), r = rstd[s];
    A sg = 0, sgx = 0;
    for (int64_t k = threadIdx.x; k < samples * run; k += blockDim.x) {
      const int64_t n = n0 + k / run, j = k % run;
      const int64_t i = (n * ns.C + g * cg) * ns.L + j;
      const A wc = w ? static_cast<A>(static_cast<opmath_t<P>>(w[g * cg + j / ns.L])) : A(1);
      const A gv = static_cast<A>(gy[i]) * wc;
      sg += gv;
      sgx += gv * (static_cast<A>(x[i]) - m) * r;
    }
    block_sum2(sg, sgx);
    if (threadIdx.x == 0) {
      const A count = static_cast<A>(samples * run);
      a[s] = mean ? sg / count : A(0);
      b[s] = sgx / count;
    }
  }
}

template <typename T, typename P>
__global__ void __launch_bounds__(kBlockSize)
    norm_backward_input_kernel(T* dx, const T* gy, const T* x, const opmath_t<T>* mean,
                               const opmath_t<T>* rstd, const P* w, const opmath_t<T>* a,
                               const opmath_t<T>* b, NormSets ns) {
  using A = opmath_t<T>;
  const int64_t numel = ns.N * ns.C * ns.L;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel;
       i += stride) {
    const int64_t nc = i / ns.L, c = nc % ns.C, s = ns.set_of(nc / ns.C, c);
    const A wc = w ? static_cast<A>(static_cast<opmath_t<P>>(w[c])) : A(1);
    const A gv = static_cast<A>(gy[i]) * wc;
    A d = gv;
    if (a) d = gv - a[s] - (static_cast<A>(x[i]) - (mean ? mean[s] : A(0))) * rstd[s] * b[s];
    dx[i] = static_cast<T>(rstd[s] * d);
  }
}

// grad_weight[c] = sum of grad_out * xhat, grad_bias[c] = sum of grad_out over channel c.
template <typename T, typename P>
__global__ void __launch_bounds__(kBlockSize)
    norm_param_grads_kernel(P* dw, P* db, const T* gy, const T* x, const opmath_t<T>* mean,
                            const opmath_t<T>* rstd, NormSets ns) {
  using A = opmath_t<T>;
  for (int64_t c = blockIdx.x; c < ns.C; c += gridDim.x) {
    A sw = 0, sb = 0;
    for (int64_t k = threadIdx.x; k < ns.N * ns.L; k += blockDim.x) {
      const int64_t n = k / ns.L, i = (n * ns.C + c) * ns.L + k % ns.L, s = ns.set_of(n, c);
      const A g = static_cast<A>(gy[i]);
      sw += g * (static_cast<A>(x[i]) - (mean ? mean[s] : A(0))) * rstd[s];
      sb += g;
    }
    block_sum2(sw, sb);
    if (threadIdx.x == 0) {
      if (dw) dw[c] = static_cast<P>(static_cast<opmath_t<P>>(sw));
      if (db) db[c] = static_cast<P>(static_cast<opmath_t<P>>(sb));
    }
  }
}

// Threads for a block folding `work` elements: a power of two, at least a warp.
int threads_for(int64_t work) {
  int threads = 32;
  while (threads < kBlockSize && threads < work) threads *= 2;
  return threads;
}

void norm_backward_cuda(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias,
                        const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                        const Tensor& rstd, const Tensor& weight, const NormSets& ns,
                        bool stats_from_x) {
  const int64_t numel = ns.N * ns.C * ns.L, S = ns.sets();
  if (numel == 0) return;
  DeviceGuard guard(x.device().index());
  const Tensor& pdt = grad_weight.defined() ? grad_weight : grad_bias;
  dispatch_dtype<kFloatingTypes>(x.dtype(), "norm_backward", x.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    const T* gy = static_cast<const T*>(grad_out.data_ptr());
    const T* xp = static_cast<const T*>(x.data_ptr());
    const A* mp = mean.defined() ? static_cast<const A*>(mean.data_ptr()) : nullptr;
    const A* rp = static_cast<const A*>(rstd.data_ptr());
    with_param_type<T>(weight, pdt, [&]<typename P>() {
      const P* wp = weight.defined() ? static_cast<const P*>(weight.data_ptr()) : nullptr;
      if (grad_x.defined()) {
        Tensor sums;
        A *a = nullptr, *b = nullptr;
        if (stats_from_x) {
          sums = empty(Shape{2 * S}, TensorOptions(x.device()).dtype(dtype_of_v<A>));
          a = static_cast<A*>(sums.data_ptr());
          b = a + S;
          const auto blocks = static_cast<unsigned>(std::min<int64_t>(S, kMaxBlocks));
          norm_set_sums_kernel<T, P>
              <<<blocks, threads_for(numel / S), 0, detail::current_stream()>>>(a, b, gy, xp, mp,
                                                                                rp, wp, ns);
          MT_CUDA_CHECK_LAUNCH();
        }
        norm_backward_input_kernel<T, P>
            <<<grid_for(numel), kBlockSize, 0, detail::current_stream()>>>(
                static_cast<T*>(grad_x.data_ptr()), gy, xp, mp, rp, wp, a, b, ns);
        MT_CUDA_CHECK_LAUNCH();
      }
      if (grad_weight.defined() || grad_bias.defined()) {
        const auto blocks = static_cast<unsigned>(std::min<int64_t>(ns.C, kMaxBlocks));
        norm_param_grads_kernel<T, P>
            <<<blocks, threads_for(ns.N * ns.L), 0, detail::current_stream()>>>(
                grad_weight.defined() ? static_cast<P*>(grad_weight.data_ptr()) : nullptr,
                grad_bias.defined() ? static_cast<P*>(grad_bias.data_ptr()) : nullptr, gy, xp, mp,
                rp, ns);
        MT_CUDA_CHECK_LAUNCH();
      }
    });
  });
}

}  // namespace

MT_REGISTER_KERNEL(norm_stats_kernel, kCUDA, &norm_stats_cuda);
MT_REGISTER_KERNEL(norm_apply_kernel, kCUDA, &norm_apply_cuda);
MT_REGISTER_KERNEL(norm_backward_kernel, kCUDA, &norm_backward_cuda);

}  // namespace mantissa::cuda
