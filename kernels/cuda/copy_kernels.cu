// CUDA kernels that write values without math inputs: copy (every pair of dtypes, any strides,
// within one device), fill, arange and linspace. Cross-device copies do not come here: the engine
// moves the bytes through CudaHooks::copy_bytes and converts with these kernels on one device.
//
// arange and linspace evaluate start + step * i in double exactly as the CPU does: nvcc would
// contract that into one fused multiply-add, so the device code uses the _rn intrinsics, which
// are never fused, and both devices produce the same values.
#include <cuda_runtime.h>

#include "engine/convert.h"
#include "engine/kernel_tables.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/float8_math.h"

namespace mantissa::cuda {
namespace {

template <typename To, typename From>
struct ConvertFn {
  MT_HOST_DEVICE To operator()(From v) const { return convert<To>(v); }
};

template <typename T>
struct FillFn {
  T value;
  MT_HOST_DEVICE T operator()() const { return value; }
};

__device__ __forceinline__ double unfused_mul_add(double a, double b, double c) {
  return __dadd_rn(__dmul_rn(a, b), c);
}

template <typename T>
struct ArangeFloatFn {
  double start, step;
  __device__ T operator()(int64_t i) const {
    return convert<T>(unfused_mul_add(step, static_cast<double>(i), start));
  }
};

template <typename T>
struct ArangeIntFn {
  int64_t start, step;
  __device__ T operator()(int64_t i) const { return convert<T>(start + step * i); }
};

// The first half counts up from start, the second down from end, so both ends are exact.
template <typename T>
struct LinspaceFn {
  double start, end, step;
  int64_t n, half;
  __device__ T operator()(int64_t i) const {
    const double v = i < half ? unfused_mul_add(step, static_cast<double>(i), start)
                              : unfused_mul_add(-step, static_cast<double>(n - 1 - i), end);
    return convert<T>(v);
  }
};

template <typename F, typename T>
struct Float8CastFn {
  MT_HOST_DEVICE F operator()(T v, float s) const {
    return float8_math::saturated_cast<F>(convert<float>(v), s);
  }
};

template <typename T>
struct AmaxToScaleFn {
  double fp8_max;
  bool power_of_2;
  MT_HOST_DEVICE float operator()(T a) const {
    return float8_math::amax_to_scale(convert<double>(a), fp8_max, power_of_2);
  }
};

void float8_cast_cuda(const Tensor& out, const Tensor& x, const Tensor& scale) {
  if (out.numel() == 0) return;
  dispatch_dtype<kFloat8Types>(out.dtype(), "float8_cast", out.device(), [&](auto out_tag) {
    using F = typename decltype(out_tag)::type;
    dispatch_dtype<kFloatingTypes>(x.dtype(), "float8_cast", x.device(), [&](auto x_tag) {
      using T = typename decltype(x_tag)::type;
      gpu_elementwise<F, T, float>(out, Float8CastFn<F, T>{}, x, scale);
    });
  });
}

void amax_to_scale_cuda(const Tensor& scale, const Tensor& amax, double fp8_max, bool power_of_2) {
  if (scale.numel() == 0) return;
  dispatch_dtype<kFloatingTypes>(amax.dtype(), "amax_to_scale", amax.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    gpu_elementwise<float, T>(scale, AmaxToScaleFn<T>{fp8_max, power_of_2}, amax);
  });
}

void copy_kernel_cuda(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    DeviceGuard guard(dst.device().index());
    MT_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), static_cast<size_t>(dst.nbytes()),
                                  cudaMemcpyDeviceToDevice, detail::current_stream()));
    return;
  }
  dispatch_dtype<kAllTypesAndBoolAndFloat8>(dst.dtype(), "copy", dst.device(), [&](auto dst_tag) {
    using To = typename decltype(dst_tag)::type;
    dispatch_dtype<kAllTypesAndBoolAndFloat8>(src.dtype(), "copy", src.device(), [&](auto src_tag) {
      using From = typename decltype(src_tag)::type;
      gpu_elementwise<To, From>(dst, ConvertFn<To, From>{}, src);
    });
  });
}

void fill_kernel_cuda(const Tensor& out, const Scalar& value) {
  dispatch_dtype<kAllTypesAndBoolAndFloat8>(out.dtype(), "fill", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = value.is_floating() ? convert<T>(value.to_double()) : convert<T>(value.to_int64());
    gpu_elementwise<T>(out, FillFn<T>{v});
  });
}

void arange_kernel_cuda(const Tensor& out, const Scalar& start, const Scalar& step) {
  dispatch_dtype<kAllTypes>(out.dtype(), "arange", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (start.is_floating() || step.is_floating()) {
      gpu_generate<T>(out, ArangeFloatFn<T>{start.to_double(), step.to_double()});
    } else {
      gpu_generate<T>(out, ArangeIntFn<T>{start.to_int64(), step.to_int64()});
    }
  });
}

void linspace_kernel_cuda(const Tensor& out, double start, double end) {
  dispatch_dtype<kAllTypes>(out.dtype(), "linspace", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = out.numel();
    // One point is `start`: half = 1 puts it on the counting-up side, and with step -0.0 the
    // sum start + (-0.0 * 0) is `start` bit for bit, signed zeros and NaN included.
    const double step = n == 1 ? -0.0 : (end - start) / static_cast<double>(n - 1);
    gpu_generate<T>(out, LinspaceFn<T>{start, end, step, n, n == 1 ? 1 : n / 2});
  });
}

}  // namespace

MT_REGISTER_KERNEL(copy_kernel, kCUDA, &copy_kernel_cuda);
MT_REGISTER_KERNEL(fill_kernel, kCUDA, &fill_kernel_cuda);
MT_REGISTER_KERNEL(float8_cast_kernel, kCUDA, &float8_cast_cuda);
MT_REGISTER_KERNEL(amax_to_scale_kernel, kCUDA, &amax_to_scale_cuda);
MT_REGISTER_KERNEL(arange_kernel, kCUDA, &arange_kernel_cuda);
MT_REGISTER_KERNEL(linspace_kernel, kCUDA, &linspace_kernel_cuda);

}  // namespace mantissa::cuda
