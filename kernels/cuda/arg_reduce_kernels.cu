// CUDA amax/amin and max/min along a dim (values and int64 indices), on the engine in
// reduce.cuh, with the CPU's semantics (kernels/cpu/reduce_kernels.cpp): comparisons in opmath,
// the first NaN wins and sticks, and max_dim/min_dim return the first index among equal values.
// Partials are merged in a tree whose order is not the element order, so ties are settled by
// comparing indices, never by which partial came first. Split from reduce_kernels.cu so that the
// two files compile in parallel.
#include <limits>
#include <type_traits>

#include "engine/convert.h"
#include "engine/kernel_tables.h"
#include "kernels/cuda/reduce.cuh"

namespace mantissa::cuda {
namespace {

template <typename M>
MT_HOST_DEVICE inline bool is_nan(M v) {
  if constexpr (std::is_floating_point_v<M>) {
    return v != v;
  } else {
    return false;
  }
}

template <typename M>
M lowest_value() {
  if constexpr (std::numeric_limits<M>::has_infinity) return -std::numeric_limits<M>::infinity();
  return std::numeric_limits<M>::lowest();
}
template <typename M>
M highest_value() {
  if constexpr (std::numeric_limits<M>::has_infinity) return std::numeric_limits<M>::infinity();
  return std::numeric_limits<M>::max();
}

template <typename T, bool IsMax>
struct ExtremumOp {
  using Acc = opmath_t<T>;
  T* out;
  Acc init_value;  // -inf (lowest) for max, +inf (highest) for min: computed on the host
  __device__ Acc init() const { return init_value; }
  __device__ void step(Acc& a, T x, int64_t) const { merge(a, static_cast<Acc>(x)); }
  // NaN wins and then sticks: once a is NaN no comparison replaces it.
  __device__ void merge(Acc& a, const Acc& x) const {
    a = ((IsMax ? x > a : x < a) || is_nan(x)) ? x : a;
  }
  __device__ void store(int64_t off, const Acc& a) const { out[off] = convert<T>(a); }
};

template <bool IsMax>
void extremum_cuda(const Tensor& out, const Tensor& in) {
  dispatch_dtype<kAllTypesAndBool>(in.dtype(), IsMax ? "amax" : "amin", in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    const M init = IsMax ? lowest_value<M>() : highest_value<M>();
    gpu_reduce<T>(out, in, ExtremumOp<T, IsMax>{static_cast<T*>(out.data_ptr()), init});
  });
}

template <typename M>
struct ValueIndex {
  M v;
  int64_t i;  // -1: nothing folded yet
};

template <typename T, bool IsMax>
struct ArgExtremumOp {
  using M = opmath_t<T>;
  using Acc = ValueIndex<M>;
  T* values;
  int64_t* indices;
  __device__ static bool better(M x, M v) {
    return (IsMax ? x > v : x < v) || (is_nan(x) && !is_nan(v));
  }
  __device__ Acc init() const { return {M(0), -1}; }
  // Each thread folds increasing indices, so a strict comparison keeps the first of equals.
  __device__ void step(Acc& a, T x, int64_t r) const {
    const M v = static_cast<M>(x);
    if (a.i < 0 || better(v, a.v)) a = {v, r};
  }
  __device__ void merge(Acc& a, const Acc& b) const {
    if (b.i < 0) return;
    const bool tie = b.v == a.v || (is_nan(b.v) && is_nan(a.v));
    if (a.i < 0 || better(b.v, a.v) || (tie && b.i < a.i)) a = b;
  }
  __device__ void store(int64_t off, const Acc& a) const {
    values[off] = convert<T>(a.v);
    indices[off] = a.i;
  }
};

template <bool IsMax>
void arg_extremum_cuda(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t dim) {
  MT_ASSERT(values.shape() == indices.shape() && values.strides() == indices.strides(),
            "max_dim/min_dim: values and indices must share one layout");
  MT_ASSERT(in.dim() == 0 || (values.size(dim) == 1 && values.numel() * in.size(dim) == in.numel()),
            "max_dim/min_dim: values of shape ", values.shape(), " do not reduce ", in.shape(),
            " along dim ", dim);
  MT_ASSERT(indices.dtype() == kInt64 && values.device() == indices.device(),
            "max_dim/min_dim: indices must be int64 on the values' device");
  dispatch_dtype<kAllTypesAndBool>(in.dtype(), IsMax ? "max" : "min", in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    // Only `dim` is reduced, so the engine's reduction index is the position along it.
    gpu_reduce<T>(values, in,
                  ArgExtremumOp<T, IsMax>{static_cast<T*>(values.data_ptr()),
                                          static_cast<int64_t*>(indices.data_ptr())});
  });
}

}  // namespace

MT_REGISTER_KERNEL(amax_kernel, kCUDA, &extremum_cuda<true>);
MT_REGISTER_KERNEL(amin_kernel, kCUDA, &extremum_cuda<false>);
MT_REGISTER_KERNEL(max_dim_kernel, kCUDA, &arg_extremum_cuda<true>);
MT_REGISTER_KERNEL(min_dim_kernel, kCUDA, &arg_extremum_cuda<false>);

}  // namespace mantissa::cuda
