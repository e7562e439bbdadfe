// CUDA gather, scatter_add, index_select and index_add, with the CPU's structure
// (kernels/cpu/index_kernels.cpp): one loop over an iteration shape in which the indexed operand
// is viewed with stride 0 along `dim` and each element's address moves by index * stride(dim);
// index_select/index_add spread their 1-D index over the iteration shape the same way.
//
// Scatters add with atomics: float32, float64, int32 and int64 atomically into `self`; the half
// types into a float32 copy of `self` and uint8 into an int32 copy, each converted back once at
// the end (as the CPU rounds half types once; uint8 wraps modulo 256 either way). Atomic float
// additions land in no fixed order, so floating scatter_add/index_add results with repeated
// indices may differ in the last bits from run to run and from the CPU's serial order.
//
// Out-of-range indices: the kernel records the first bad index it meets in a two-word device
// flag (set-once by atomicCAS) and skips the element; the host reads the flag back after the
// launch and throws the CPU's message, or, under a CUDA graph capture, the next host read does
// (kernels/cuda/bad_index_flag.cuh).
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <type_traits>

#include "engine/convert.h"
#include "engine/factory.h"
#include "engine/kernel_tables.h"
#include "kernels/cuda/bad_index_flag.cuh"
#include "kernels/cuda/loops.cuh"
#include "kernels/index_views.h"

namespace mantissa::cuda {
namespace {

using index_views::restride;
using index_views::spread_index;

// Operands: 0 out, 1 in (stride 0 along dim), 2 index. `step` is in's stride along dim, in bytes.
template <typename T, typename index_t>
__global__ void __launch_bounds__(kBlockSize)
    gather_elements(OffsetCalculator<3, index_t> calc, Pointers<3> p, int64_t n, int64_t dim_size,
                    int64_t step, unsigned long long* bad) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    index_t off[3];
    calc.get(static_cast<index_t>(i), off);
    const int64_t idx = *reinterpret_cast<const int64_t*>(p.p[2] + off[2]);
    if (idx < 0 || idx >= dim_size) {
      record_bad_index(bad, idx);
      continue;
    }
    *reinterpret_cast<T*>(p.p[0] + off[0]) =
        *reinterpret_cast<const T*>(p.p[1] + off[1] + idx * step);
  }
}

__device__ __forceinline__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(int32_t* p, int32_t v) { atomicAdd(p, v); }
// Two's complement: an unsigned 64-bit add is the signed add, wrapping alike.
__device__ __forceinline__ void atomic_add(int64_t* p, int64_t v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

// Operands: 0 acc (stride 0 along dim), 1 index, 2 src. Acc is the accumulator's storage type,
// S the source's; `step` is acc's stride along dim, in bytes.
template <typename Acc, typename S, typename index_t>
__global__ void __launch_bounds__(kBlockSize)
    scatter_add_elements(OffsetCalculator<3, index_t> calc, Pointers<3> p, int64_t n,
                         int64_t dim_size, int64_t step, unsigned long long* bad) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    index_t off[3];
    calc.get(static_cast<index_t>(i), off);
    const int64_t idx = *reinterpret_cast<const int64_t*>(p.p[1] + off[1]);
    if (idx < 0 || idx >= dim_size) {
      record_bad_index(bad, idx);
      continue;
    }
    atomic_add(reinterpret_cast<Acc*>(p.p[0] + off[0] + idx * step),
               convert<Acc>(*reinterpret_cast<const S*>(p.p[2] + off[2])));
  }
}

// Runs kernel<index_t> over `shape` for the three operands, in 32-bit offsets when they fit.
template <typename Launch>
void launch3(const Shape& shape, const std::array<const Tensor*, 3>& ops, const Launch& launch) {
  const Layout<3> layout(shape, ops);
  const int64_t n = shape.numel();
  Pointers<3> ptrs;
  for (int k = 0; k < 3; ++k) ptrs.p[k] = layout.base[k];
  if (layout.fits_int32()) {
    launch(OffsetCalculator<3, int32_t>(layout), ptrs, n);
  } else {
    launch(OffsetCalculator<3, int64_t>(layout), ptrs, n);
  }
  MT_CUDA_CHECK_LAUNCH();
}

// out[p] = in[p with p[dim] = index[p]]; in_r and index_r are already viewed with out's shape.
void gather_impl(const char* op, const Tensor& out, const Tensor& in_r, const Tensor& index_r,
                 int64_t dim, int64_t dim_size, int64_t dim_stride) {
  if (out.numel() == 0) return;
  DeviceGuard guard(out.device().index());
  const BadIndexFlag bad(out.device(), op, dim, dim_size);
  dispatch_dtype<kAllTypesAndBool>(out.dtype(), op, out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t step = dim_stride * static_cast<int64_t>(sizeof(T));
    launch3(out.shape(), {&out, &in_r, &index_r},
            [&](auto calc, const Pointers<3>& ptrs, int64_t n) {
              using index_t = std::remove_cvref_t<decltype(calc.sizes[0])>;
              gather_elements<T, index_t><<<grid_for(n), kBlockSize, 0, detail::current_stream()>>>(
                  calc, ptrs, n, dim_size, step, bad.device_ptr());
            });
  });
  bad.check();
}

// The type the additions run in: float for the half types, int32 for uint8, else T itself.
template <typename T>
using ScatterAcc = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float,
                                      std::conditional_t<std::is_same_v<T, uint8_t>, int32_t, T>>;

// self[p with p[dim] = index[p]] += src[p]; index_r and src_r share the iteration shape.
void scatter_add_impl(const char* op, const Tensor& self, int64_t dim, const Tensor& index_r,
                      const Tensor& src_r) {
  if (src_r.numel() == 0) return;
  const int64_t dim_size = self.size(dim);
  DeviceGuard guard(self.device().index());
  const BadIndexFlag bad(self.device(), op, dim, dim_size);
  dispatch_dtype<kAllTypes>(self.dtype(), op, self.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = ScatterAcc<T>;
    constexpr bool direct = std::is_same_v<Acc, T>;
    Tensor acc = self;
    if (!direct) {
      acc = empty(self.shape(), TensorOptions(self.device()).dtype(dtype_of_v<Acc>));
      mantissa::detail::copy_into(acc, self);
    }
    const Tensor acc_r = restride(acc, src_r.shape(), dim);
    const int64_t step = acc.stride(dim) * static_cast<int64_t>(sizeof(Acc));
    launch3(src_r.shape(), {&acc_r, &index_r, &src_r},
            [&](auto calc, const Pointers<3>& ptrs, int64_t n) {
              using index_t = std::remove_cvref_t<decltype(calc.sizes[0])>;
              scatter_add_elements<Acc, T, index_t>
                  <<<grid_for(n), kBlockSize, 0, detail::current_stream()>>>(
                      calc, ptrs, n, dim_size, step, bad.device_ptr());
            });
    bad.check();  // before a copy touches self, as on the CPU
    if (!direct) mantissa::detail::copy_into(self, acc);
  });
}

void gather_cuda(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  gather_impl("gather", out, restride(in, out.shape(), dim), index, dim, in.size(dim),
              in.stride(dim));
}

void index_select_cuda(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  gather_impl("index_select", out, restride(in, out.shape(), dim),
              spread_index(index, out.shape(), dim), dim, in.size(dim), in.stride(dim));
}

void scatter_add_cuda(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  // src may be larger than index; only its leading index-shaped block takes part.
  const Tensor src_r =
      mantissa::detail::make_view(src, index.shape(), src.strides(), src.storage_offset());
  scatter_add_impl("scatter_add", self, dim, index, src_r);
}

void index_add_cuda(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  scatter_add_impl("index_add", self, dim, spread_index(index, src.shape(), dim), src);
}

}  // namespace

MT_REGISTER_KERNEL(gather_kernel, kCUDA, &gather_cuda);
MT_REGISTER_KERNEL(index_select_kernel, kCUDA, &index_select_cuda);
MT_REGISTER_KERNEL(scatter_add_kernel, kCUDA, &scatter_add_cuda);
MT_REGISTER_KERNEL(index_add_kernel, kCUDA, &index_add_cuda);

}  // namespace mantissa::cuda
