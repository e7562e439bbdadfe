// CUDA prod, any and all on the reduction engine of reduce.cuh, with the semantics of the CPU
// kernels (kernels/cpu/reduce_kernels.cpp): integer and bool products in int64, any/all writing
// bool (uint8 for a uint8 input), NaN counting as non-zero. Floating products accumulate in
// opmath rather than the CPU's double, as the CUDA sums do (reduce_kernels.cu says why).
#include <cuda_runtime.h>

#include <type_traits>

#include "engine/convert.h"
#include "engine/kernel_tables.h"
#include "kernels/cuda/reduce.cuh"

namespace mantissa::cuda {
namespace {

template <typename T>
constexpr bool is_float_type_v =
    std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <typename T, typename Out>
struct ProdOp {
  using Acc = std::conditional_t<is_float_type_v<T>, opmath_t<T>, int64_t>;
  Out* out;
  __device__ Acc init() const { return Acc(1); }
  __device__ void step(Acc& a, T x, int64_t) const {
    a *= static_cast<Acc>(static_cast<opmath_t<T>>(x));
  }
  __device__ void merge(Acc& a, const Acc& b) const { a *= b; }
  __device__ void store(int64_t off, const Acc& a) const { out[off] = convert<Out>(a); }
};

void prod_cuda(const Tensor& out, const Tensor& in) {
  dispatch_dtype<kAllTypesAndBool>(in.dtype(), "prod", in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Out = std::conditional_t<is_float_type_v<T>, T, int64_t>;
    MT_ASSERT(out.dtype() == dtype_of_v<Out>, "prod: kernel writes ", dtype_of_v<Out>, " for ",
              in.dtype(), " input, got out ", out.dtype());
    gpu_reduce<T>(out, in, ProdOp<T, Out>{static_cast<Out*>(out.data_ptr())});
  });
}

template <typename T, typename Out, bool IsAll>
struct LogicOp {
  using Acc = bool;
  Out* out;
  __device__ Acc init() const { return IsAll; }
  __device__ void step(Acc& a, T x, int64_t) const {
    const bool nz = static_cast<opmath_t<T>>(x) != opmath_t<T>(0);
    a = IsAll ? (a && nz) : (a || nz);
  }
  __device__ void merge(Acc& a, const Acc& b) const { a = IsAll ? (a && b) : (a || b); }
  __device__ void store(int64_t off, const Acc& a) const { out[off] = static_cast<Out>(a); }
};

template <bool IsAll>
void logic_cuda(const Tensor& out, const Tensor& in) {
  MT_ASSERT(out.dtype() == (in.dtype() == kUInt8 ? kUInt8 : kBool), IsAll ? "all" : "any", ": out ",
            out.dtype(), " for input ", in.dtype());
  dispatch_dtype<kAllTypesAndBool>(in.dtype(), IsAll ? "all" : "any", in.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (out.dtype() == kUInt8) {
      gpu_reduce<T>(out, in, LogicOp<T, uint8_t, IsAll>{static_cast<uint8_t*>(out.data_ptr())});
    } else {
      gpu_reduce<T>(out, in, LogicOp<T, bool, IsAll>{static_cast<bool*>(out.data_ptr())});
    }
  });
}

}  // namespace

MT_REGISTER_KERNEL(prod_kernel, kCUDA, &prod_cuda);
MT_REGISTER_KERNEL(any_kernel, kCUDA, &logic_cuda<false>);
MT_REGISTER_KERNEL(all_kernel, kCUDA, &logic_cuda<true>);

}  // namespace mantissa::cuda
