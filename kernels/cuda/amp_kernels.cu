// CUDA kernels of the GradScaler, the device counterpart of kernels/cpu/amp_kernels.cpp.
//
// Unscale is one fused read-check-multiply-write pass per element. Contiguous gradients of one
// dtype go through a multi-tensor launch: up to kMaxListTensors (pointer, numel) pairs travel as
// a kernel argument (no device-side metadata buffer, so no copy and no sync), blockIdx.y picks
// the tensor and the x-blocks grid-stride over it. Non-contiguous gradients take the strided
// elementwise launcher with the same functor. inv_scale and found_inf are read and written on
// the device: the host never waits for the GPU here. Every thread that sees a non-finite value
// stores 1.0f into found_inf; the stores race but all write the same value.
//
// The scale update is a single-thread kernel doing the CPU's arithmetic (products in double,
// rounded to float once), so a CUDA scaler follows exactly the CPU's scale sequence.
#include <cstdint>
#include <vector>

#include "cuda/current_stream.h"
#include "engine/amp_kernel_tables.h"
#include "kernels/cuda/loops.cuh"

namespace mantissa::cuda {
namespace {

inline constexpr int kMaxListTensors = 32;

struct TensorList {
  void* ptr[kMaxListTensors];
  int64_t numel[kMaxListTensors];
};

template <typename M>
__device__ __forceinline__ bool finite(M x) {
  // inf - inf and NaN - NaN are NaN; finite - finite is exactly 0 (no fast-math in this build).
  return x - x == M(0);
}

template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    unscale_list_kernel(TensorList list, float* found_inf, const float* inv_scale) {
  using M = opmath_t<T>;
  const int64_t n = list.numel[blockIdx.y];
  T* p = static_cast<T*>(list.ptr[blockIdx.y]);
  const M inv = static_cast<M>(*inv_scale);
  bool non_finite = false;
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_stride()) {
    const M x = static_cast<M>(p[i]);
    non_finite |= !finite(x);
    p[i] = static_cast<T>(x * inv);
  }
  if (non_finite) *found_inf = 1.0f;
}

template <typename T>
struct UnscaleOp {
  float* found_inf;
  const float* inv_scale;
  __device__ T operator()(T v) const {
    using M = opmath_t<T>;
    const M x = static_cast<M>(v);
    if (!finite(x)) *found_inf = 1.0f;
    return static_cast<T>(x * static_cast<M>(*inv_scale));
  }
};

template <typename T>
void unscale_contiguous(const std::vector<const Tensor*>& ts, float* found, const float* inv) {
  for (size_t first = 0; first < ts.size(); first += kMaxListTensors) {
    const size_t count = std::min<size_t>(kMaxListTensors, ts.size() - first);
    TensorList list{};
    int64_t largest = 0;
    for (size_t k = 0; k < count; ++k) {
      list.ptr[k] = ts[first + k]->data_ptr();
      list.numel[k] = ts[first + k]->numel();
      largest = std::max(largest, list.numel[k]);
    }
    const dim3 grid(grid_for(largest), static_cast<unsigned>(count));
    unscale_list_kernel<T><<<grid, kBlockSize, 0, detail::current_stream()>>>(list, found, inv);
    MT_CUDA_CHECK_LAUNCH();
  }
}

void amp_unscale_cuda(const std::vector<Tensor>& tensors, const Tensor& found_inf,
                      const Tensor& inv_scale) {
  MT_ASSERT(found_inf.device() == inv_scale.device(), "amp_unscale: found_inf on ",
            found_inf.device(), " but inv_scale on ", inv_scale.device());
  DeviceGuard guard(found_inf.device().index());
  float* found = static_cast<float*>(found_inf.data_ptr());
  const float* inv = static_cast<const float*>(inv_scale.data_ptr());
  // Contiguous tensors grouped by dtype, for the multi-tensor launches.
  std::vector<const Tensor*> dense[kNumDTypes];
  for (const Tensor& t : tensors) {
    if (t.numel() == 0) continue;
    MT_ASSERT(t.device() == found_inf.device(), "amp_unscale: gradient on ", t.device(),
              " but found_inf on ", found_inf.device());
    dispatch_dtype<kFloatingTypes>(t.dtype(), "amp_unscale", t.device(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (t.is_contiguous()) {
        dense[static_cast<int>(t.dtype())].push_back(&t);
      } else {
        gpu_elementwise<T, T>(t, UnscaleOp<T>{found, inv}, t);
      }
    });
  }
  for (int d = 0; d < kNumDTypes; ++d) {
    if (dense[d].empty()) continue;
    const DType dt = static_cast<DType>(d);
    dispatch_dtype<kFloatingTypes>(dt, "amp_unscale", found_inf.device(), [&](auto tag) {
      unscale_contiguous<typename decltype(tag)::type>(dense[d], found, inv);
    });
  }
}

__global__ void update_scale_kernel(float* scale, int32_t* growth_tracker, int32_t* overflow_streak,
                                    const float* found_inf, AmpUpdateParams p) {
  float& s = *scale;
  int32_t& tracker = *growth_tracker;
  int32_t& streak = *overflow_streak;
  if (*found_inf > 0.0f) {
    tracker = 0;
    ++streak;
    if (streak >= p.hysteresis) {
      const float backed_off = static_cast<float>(s * p.backoff_factor);
      // std::min / std::max spelled out so that NaN handling matches the CPU kernel.
      const float min_scale = static_cast<float>(p.min_scale);
      const float floor = min_scale < s ? min_scale : s;
      s = backed_off < floor ? floor : backed_off;
    }
    return;
  }
  streak = 0;
  const int32_t successful = tracker + 1;
  if (successful == p.growth_interval) {
    const float grown = static_cast<float>(s * p.growth_factor);
    if (finite(grown)) s = grown;
    tracker = 0;
  } else {
    tracker = successful;
  }
}

void amp_update_scale_cuda(const Tensor& scale, const Tensor& growth_tracker,
                           const Tensor& overflow_streak, const Tensor& found_inf,
                           const AmpUpdateParams& p) {
  for (const Tensor* t : {&growth_tracker, &overflow_streak, &found_inf})
    MT_ASSERT(t->device() == scale.device(), "amp_update_scale: state on ", t->device(),
              " but scale on ", scale.device());
  DeviceGuard guard(scale.device().index());
  update_scale_kernel<<<1, 1, 0, detail::current_stream()>>>(
      static_cast<float*>(scale.data_ptr()), static_cast<int32_t*>(growth_tracker.data_ptr()),
      static_cast<int32_t*>(overflow_streak.data_ptr()),
      static_cast<const float*>(found_inf.data_ptr()), p);
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace

MT_REGISTER_KERNEL(amp_unscale_kernel, kCUDA, &amp_unscale_cuda);
MT_REGISTER_KERNEL(amp_update_scale_kernel, kCUDA, &amp_update_scale_cuda);

}  // namespace mantissa::cuda
