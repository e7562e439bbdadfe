// CUDA sum, mean, var, norm and all_finite on the engine in reduce.cuh, with the semantics of
// kernels/cpu/reduce_kernels.cpp (the oracle): out in keepdim form, any input/output strides,
// integer and bool sums in int64, var with Welford partials merged by Chan's formula.
//
// Accumulation differs from the CPU on purpose: the CPU accumulates float32 and the half types
// in double; here they accumulate in float (opmath), float64 in double. Double arithmetic runs at
// 1/32-1/64 rate on most GPUs and reductions must stay memory-bound. Each thread folds at most
// nr/256 elements before the pairwise shared-memory tree, so float32 results stay within a few
// float32 ulps times sqrt(nr/256) of the CPU's; the tests compare large float32 reductions with
// a relative tolerance of 1e-5 rather than the elementwise 1.3e-6.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "engine/convert.h"
#include "engine/factory.h"
#include "engine/kernel_tables.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/reduce.cuh"

namespace mantissa::cuda {
namespace {

template <typename T>
constexpr bool is_float_type_v =
    std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// ---- sum and mean -------------------------------------------------------------------------------
template <typename T>
using SumAcc = std::conditional_t<is_float_type_v<T>, opmath_t<T>, int64_t>;

// Mean divides the sum by the count in double, as the CPU does: an empty reduction gives 0/0,
// NaN.
template <typename T, typename Out, bool Mean>
struct SumOp {
  using Acc = SumAcc<T>;
  Out* out;
  double count;
  __device__ Acc init() const { return Acc(0); }
  __device__ void step(Acc& a, T x, int64_t) const {
    a += static_cast<Acc>(static_cast<opmath_t<T>>(x));
  }
  __device__ void merge(Acc& a, const Acc& b) const { a += b; }
  __device__ void store(int64_t off, const Acc& a) const {
    if constexpr (Mean) {
      out[off] = convert<Out>(static_cast<double>(a) / count);
    } else {
      out[off] = convert<Out>(a);
    }
  }
};

void sum_cuda(const Tensor& out, const Tensor& in) {
  dispatch_dtype<kAllTypesAndBool>(in.dtype(), "sum", in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Out = std::conditional_t<is_float_type_v<T>, T, int64_t>;
    MT_ASSERT(out.dtype() == dtype_of_v<Out>, "sum: kernel writes ", dtype_of_v<Out>, " for ",
              in.dtype(), " input, got out ", out.dtype());
    gpu_reduce<T>(out, in, SumOp<T, Out, false>{static_cast<Out*>(out.data_ptr()), 1.0});
  });
}

void mean_cuda(const Tensor& out, const Tensor& in) {
  dispatch_dtype<kFloatingTypes>(in.dtype(), "mean", in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const double count = out.numel() == 0 ? 1.0 : double(in.numel()) / double(out.numel());
    gpu_reduce<T>(out, in, SumOp<T, T, true>{static_cast<T*>(out.data_ptr()), count});
  });
}

// ---- all_finite ---------------------------------------------------------------------------------
// v - v is 0 exactly for finite v (inf - inf and NaN - NaN are NaN).
template <typename T>
struct AllFiniteOp {
  using Acc = bool;
  bool* out;
  __device__ Acc init() const { return true; }
  __device__ void step(Acc& a, T x, int64_t) const {
    const opmath_t<T> v = static_cast<opmath_t<T>>(x);
    a = a && (v - v == opmath_t<T>(0));
  }
  __device__ void merge(Acc& a, const Acc& b) const { a = a && b; }
  __device__ void store(int64_t off, const Acc& a) const { out[off] = a; }
};

void all_finite_cuda(const Tensor& out, const Tensor& in) {
  // Every dim is reduced, whatever out's shape: view the one element as in's keepdim form.
  const Tensor layout = mantissa::detail::make_view(out, Shape(in.dim(), 1), Shape(in.dim(), 0),
                                                    out.storage_offset());
  dispatch_dtype<kAllTypesAndBool>(in.dtype(), "all_finite", in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_float_type_v<T>) {
      DeviceGuard guard(out.device().index());
      MT_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 1, sizeof(bool), detail::current_stream()));
    } else {
      // An empty input reduces to init(): true.
      gpu_reduce<T>(layout, in, AllFiniteOp<T>{static_cast<bool*>(out.data_ptr())});
    }
  });
}

// ---- var ----------------------------------------------------------------------------------------
template <typename M>
struct Welford {
  M mean, m2;
  int64_t n;
};

template <typename T, typename Out>
struct VarOp {
  using M = opmath_t<T>;
  using Acc = Welford<M>;
  Out* out;
  int64_t correction;
  __device__ Acc init() const { return {M(0), M(0), 0}; }
  __device__ void step(Acc& a, T x, int64_t) const {
    const M v = static_cast<M>(x);
    a.n += 1;
    const M d = v - a.mean;
    a.mean += d / static_cast<M>(a.n);
    a.m2 += d * (v - a.mean);
  }
  __device__ void merge(Acc& a, const Acc& b) const {
    if (b.n == 0) return;
    if (a.n == 0) {
      a = b;
      return;
    }
    const M na = static_cast<M>(a.n), nb = static_cast<M>(b.n), n = na + nb;
    const M d = b.mean - a.mean;
    a.mean += d * (nb / n);
    a.m2 += b.m2 + d * d * (na * nb / n);
    a.n += b.n;
  }
  __device__ void store(int64_t off, const Acc& a) const {
    // PyTorch divides by max(0, N - correction): 0/0 gives NaN, m2/0 gives inf.
    const double divisor = fmax(0.0, static_cast<double>(a.n) - static_cast<double>(correction));
    out[off] = convert<Out>(static_cast<double>(a.m2) / divisor);
  }
};

// out is in's dtype, or float32 for half inputs (std takes the root before rounding to half).
void var_cuda(const Tensor& out, const Tensor& in, int64_t correction) {
  dispatch_dtype<kFloatingTypes>(in.dtype(), "var", in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (out.dtype() == in.dtype()) {
      gpu_reduce<T>(out, in, VarOp<T, T>{static_cast<T*>(out.data_ptr()), correction});
    } else {
      MT_ASSERT(is_reduced_float(in.dtype()) && out.dtype() == kFloat32, "var: out dtype ",
                out.dtype(), " for input ", in.dtype());
      gpu_reduce<T>(out, in, VarOp<T, float>{static_cast<float*>(out.data_ptr()), correction});
    }
  });
}

// ---- norm ---------------------------------------------------------------------------------------
// Sums of |x|^p and max/min |x| (NaN-propagating), all in opmath.

template <typename T, NormKind K>
struct NormOp {
  using M = opmath_t<T>;
  using Acc = M;
  T* out;
  M p;
  __device__ Acc init() const { return K == NormKind::NegInf ? M(INFINITY) : M(0); }
  __device__ void step(Acc& a, T x, int64_t) const {
    const M v = static_cast<M>(x);
    if constexpr (K == NormKind::Zero) a += v != M(0) ? M(1) : M(0);
    if constexpr (K == NormKind::One) a += dmath::fabs(v);
    if constexpr (K == NormKind::Two) a += v * v;
    if constexpr (K == NormKind::General) a += dmath::pow(dmath::fabs(v), p);
    if constexpr (K == NormKind::Inf || K == NormKind::NegInf) merge(a, dmath::fabs(v));
  }
  __device__ void merge(Acc& a, const Acc& b) const {
    if constexpr (K == NormKind::Inf) {
      a = (b > a || b != b) ? b : a;
    } else if constexpr (K == NormKind::NegInf) {
      a = (b < a || b != b) ? b : a;
    } else {
      a += b;
    }
  }
  __device__ void store(int64_t off, const Acc& a) const {
    M r = a;
    if constexpr (K == NormKind::Two) r = dmath::sqrt(a);
    if constexpr (K == NormKind::General) r = dmath::pow(a, M(1) / p);
    out[off] = convert<T>(r);
  }
};

template <typename T, NormKind K>
void norm_impl(const Tensor& out, const Tensor& in, double p) {
  gpu_reduce<T>(out, in,
                NormOp<T, K>{static_cast<T*>(out.data_ptr()), static_cast<opmath_t<T>>(p)});
}

void vector_norm_cuda(const Tensor& out, const Tensor& in, double p) {
  dispatch_dtype<kFloatingTypes>(in.dtype(), "norm", in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_norm_kind(p, [&](auto kind) { norm_impl<T, decltype(kind)::value>(out, in, p); });
  });
}

}  // namespace

MT_REGISTER_KERNEL(sum_kernel, kCUDA, &sum_cuda);
MT_REGISTER_KERNEL(mean_kernel, kCUDA, &mean_cuda);
MT_REGISTER_KERNEL(all_finite_kernel, kCUDA, &all_finite_cuda);
MT_REGISTER_KERNEL(var_kernel, kCUDA, &var_cuda);
MT_REGISTER_KERNEL(vector_norm_kernel, kCUDA, &vector_norm_cuda);

}  // namespace mantissa::cuda
