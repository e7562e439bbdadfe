// The CUDA elementwise engine, the counterpart of kernels/cpu/loops.h. Every elementwise kernel
// (math, casts, comparisons, fills, random numbers) is a functor over storage values launched
// through one of two entry points:
//
//   gpu_elementwise<Out, In...>(out, f, ins...)  out[i] = f(in0[i], in1[i], ...)
//   gpu_generate<Out>(out, f)                    out[i] = f(i), i the row-major element index
//
// Operands are described by byte strides over one shared shape (broadcast inputs have stride 0).
// As on the CPU, size-1 dims are dropped and adjacent dims merged where every operand allows it,
// but dims are never reordered, so the linear index is the row-major index of out's shape (the
// random kernels rely on that to match the CPU). When every operand is dense the kernel loads
// and stores 16-byte packs; otherwise an offset calculator turns the linear index into per-operand
// byte offsets, in 32-bit arithmetic whenever the tensors are small enough.
//
// Functors are plain structs with MT_HOST_DEVICE call operators (no extended lambdas), evaluated
// on storage types; half types are converted to float by the functors that do math (opmath_t).
// All launches go to the legacy default stream of out's device.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <utility>

#include "cuda/cuda_check.h"
#include "cuda/current_stream.h"
#include "cuda/device_guard.h"
#include "engine/dispatch.h"
#include "engine/error.h"
#include "engine/tensor.h"
#include "kernels/layout.h"

namespace mantissa::cuda {

inline constexpr int kBlockSize = 256;
// Grid-stride loops cover any size; more blocks than this only adds scheduling overhead.
inline constexpr int64_t kMaxBlocks = 65535;

inline unsigned grid_for(int64_t work_items) {
  const int64_t blocks = (work_items + kBlockSize - 1) / kBlockSize;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, kMaxBlocks));
}

// ---- device side ----------------------------------------------------------------------------
template <int N>
struct Pointers {
  char* p[N];
};

// Linear index -> byte offset of each operand. Passed to kernels by value.
template <int N, typename index_t>
struct OffsetCalculator {
  int ndim;
  index_t sizes[kMaxDims];
  index_t strides[kMaxDims][N];

  // Dims are stored innermost first, the order get() peels them off the linear index.
  template <int M>
  explicit OffsetCalculator(const Layout<M>& l) : ndim(l.ndim) {
    static_assert(M == N);
    for (int d = 0; d < kMaxDims; ++d) {
      const int src = l.ndim - 1 - d;
      sizes[d] = static_cast<index_t>(d < l.ndim ? l.sizes[src] : 1);
      for (int k = 0; k < N; ++k)
        strides[d][k] = static_cast<index_t>(d < l.ndim ? l.strides[k][src] : 0);
    }
  }

  __device__ __forceinline__ void get(index_t linear, index_t (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d == ndim) break;
      index_t r = linear;
      if (d + 1 < ndim) {  // the outermost dim needs no division
        const index_t q = linear / sizes[d];
        r = linear - q * sizes[d];
        linear = q;
      }
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += r * strides[d][k];
    }
  }
};

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

namespace detail {

__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() {
  return static_cast<int64_t>(blockDim.x) * gridDim.x;
}

template <int V, typename Out, typename F, typename... In>
__device__ __forceinline__ void apply_packs(Pack<Out, V>* out, const F& f,
                                            const Pack<In, V>&... in) {
  Pack<Out, V> o;
#pragma unroll
  for (int j = 0; j < V; ++j) o.v[j] = f(in.v[j]...);
  *out = o;
}

template <typename Out, typename... In, typename F, typename index_t, int N, size_t... I>
__device__ __forceinline__ void apply_at(const Pointers<N>& p, const index_t (&off)[N], const F& f,
                                         std::index_sequence<I...>) {
  *reinterpret_cast<Out*>(p.p[0] + off[0]) =
      f(*reinterpret_cast<const In*>(p.p[I + 1] + off[I + 1])...);
}

}  // namespace detail

// Dense operands: V elements per 16-byte (or narrower) pack, then a scalar tail.
template <int V, typename F, typename Out, typename... In>
__global__ void __launch_bounds__(kBlockSize)
    vectorized_kernel(int64_t n, F f, Out* out, const In*... in) {
  const int64_t packs = n / V;
  const int64_t stride = detail::grid_stride();
  for (int64_t i = detail::global_thread(); i < packs; i += stride) {
    detail::apply_packs<V>(reinterpret_cast<Pack<Out, V>*>(out) + i, f,
                           reinterpret_cast<const Pack<In, V>*>(in)[i]...);
  }
  for (int64_t i = packs * V + detail::global_thread(); i < n; i += stride) out[i] = f(in[i]...);
}

template <typename F, typename index_t, typename Out, typename... In>
__global__ void __launch_bounds__(kBlockSize)
    strided_kernel(OffsetCalculator<1 + sizeof...(In), index_t> calc,
                   Pointers<1 + sizeof...(In)> ptrs, int64_t n, F f) {
  constexpr int N = 1 + sizeof...(In);
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_stride()) {
    index_t off[N];
    calc.get(static_cast<index_t>(i), off);
    detail::apply_at<Out, In...>(ptrs, off, f, std::index_sequence_for<In...>{});
  }
}

template <typename F, typename index_t, typename Out>
__global__ void __launch_bounds__(kBlockSize)
    generate_kernel(OffsetCalculator<1, index_t> calc, char* base, int64_t n, F f) {
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_stride()) {
    index_t off[1];
    calc.get(static_cast<index_t>(i), off);
    *reinterpret_cast<Out*>(base + off[0]) = f(i);
  }
}

// ---- host entry points ----------------------------------------------------------------------
namespace detail {

template <typename... Ts>
constexpr int pack_width() {
  constexpr size_t widest = std::max({sizeof(Ts)...});
  return static_cast<int>(16 / widest);
}

template <int V, typename... Ts>
bool packs_aligned(const Ts*... ptrs) {
  return ((reinterpret_cast<uintptr_t>(ptrs) % (sizeof(Ts) * V) == 0) && ...);
}

inline void check_operand_devices(const Tensor& out, std::initializer_list<const Tensor*> ins) {
  for (const Tensor* t : ins)
    MT_ASSERT(t->device() == out.device(), "CUDA kernel operand on ", t->device(),
              " while the output is on ", out.device());
}

}  // namespace detail

// out[i] = f(in0[i], ...) over out's shape; inputs are already expanded to it. Out and In... are
// the storage types; f receives storage values and returns an Out.
template <typename Out, typename... In, typename F, typename... Ts>
void gpu_elementwise(const Tensor& out, const F& f, const Ts&... ins) {
  static_assert(sizeof...(In) == sizeof...(Ts), "one storage type per input");
  constexpr int N = 1 + sizeof...(In);
  const int64_t n = out.numel();
  if (n == 0) return;
  detail::check_operand_devices(out, {&ins...});
  DeviceGuard guard(out.device().index());
  const Layout<N> layout(out.shape(), std::array<const Tensor*, N>{&out, &ins...});

  constexpr int V = detail::pack_width<Out, In...>();
  Out* out_ptr = static_cast<Out*>(out.data_ptr());
  if (layout.dense({static_cast<int64_t>(sizeof(Out)), static_cast<int64_t>(sizeof(In))...}) &&
      detail::packs_aligned<V>(out_ptr, static_cast<const In*>(ins.data_ptr())...)) {
    vectorized_kernel<V, F, Out, In...>
        <<<grid_for((n + V - 1) / V), kBlockSize, 0, detail::current_stream()>>>(
            n, f, out_ptr, static_cast<const In*>(ins.data_ptr())...);
    MT_CUDA_CHECK_LAUNCH();
    return;
  }
  Pointers<N> ptrs;
  for (int k = 0; k < N; ++k) ptrs.p[k] = layout.base[k];
  if (layout.fits_int32()) {
    strided_kernel<F, int32_t, Out, In...>
        <<<grid_for(n), kBlockSize, 0, detail::current_stream()>>>(
            OffsetCalculator<N, int32_t>(layout), ptrs, n, f);
  } else {
    strided_kernel<F, int64_t, Out, In...>
        <<<grid_for(n), kBlockSize, 0, detail::current_stream()>>>(
            OffsetCalculator<N, int64_t>(layout), ptrs, n, f);
  }
  MT_CUDA_CHECK_LAUNCH();
}

// out[i] = f(i) for i the row-major index of each element of out (any strides).
template <typename Out, typename F>
void gpu_generate(const Tensor& out, const F& f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out.device().index());
  const Layout<1> layout(out.shape(), std::array<const Tensor*, 1>{&out});
  if (layout.fits_int32()) {
    generate_kernel<F, int32_t, Out><<<grid_for(n), kBlockSize, 0, detail::current_stream()>>>(
        OffsetCalculator<1, int32_t>(layout), layout.base[0], n, f);
  } else {
    generate_kernel<F, int64_t, Out><<<grid_for(n), kBlockSize, 0, detail::current_stream()>>>(
        OffsetCalculator<1, int64_t>(layout), layout.base[0], n, f);
  }
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mantissa::cuda
