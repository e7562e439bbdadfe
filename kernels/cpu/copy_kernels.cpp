// CPU kernels that write values without reading math inputs: copy (with casts between every
// pair of dtypes), fill, arange, linspace. Dense float32<->float16 conversions use F16C when the
// CPU has it (checked at run time, so the build stays portable); F16C rounds to nearest even,
// matching Half's software conversion bit for bit on non-NaN values.
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MT_HAVE_X86 1
#endif

#include "engine/kernel_tables.h"
#include "kernels/cpu/loops.h"

namespace mantissa::cpu {
namespace {

template <typename To, typename From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<opmath_t<From>>(v) != opmath_t<From>(0);
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    return To(static_cast<float>(static_cast<opmath_t<From>>(v)));
  } else {
    return static_cast<To>(static_cast<opmath_t<From>>(v));
  }
}

#if MT_HAVE_X86
__attribute__((target("avx,f16c"))) void float_to_half_f16c(const float* src, Half* dst,
                                                            int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = Half(src[i]);
}
__attribute__((target("avx,f16c"))) void half_to_float_f16c(const Half* src, float* dst,
                                                            int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = float(src[i]);
}
bool cpu_has_f16c() {
  static const bool has = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return has;
}
#endif

// Dense float<->half conversions, the hot casts of mixed precision.
bool try_fast_copy(const Tensor& dst, const Tensor& src) {
  if (!dst.is_contiguous() || !src.is_contiguous()) return false;
  if (dst.dtype() == src.dtype()) {
    std::memcpy(dst.data_ptr(), src.data_ptr(), static_cast<size_t>(dst.nbytes()));
    return true;
  }
#if MT_HAVE_X86
  if (!cpu_has_f16c()) return false;
  if (dst.dtype() == kFloat16 && src.dtype() == kFloat32) {
    float_to_half_f16c(src.data<float>(), dst.data<Half>(), dst.numel());
    return true;
  }
  if (dst.dtype() == kFloat32 && src.dtype() == kFloat16) {
    half_to_float_f16c(src.data<Half>(), dst.data<float>(), dst.numel());
    return true;
  }
#endif
  return false;
}

void copy_kernel_cpu(const Tensor& dst, const Tensor& src) {
  if (try_fast_copy(dst, src)) return;
  dispatch_dtype<kAllTypesAndBool>(dst.dtype(), "copy", dst.device(), [&](auto dst_tag) {
    using To = typename decltype(dst_tag)::type;
    dispatch_dtype<kAllTypesAndBool>(src.dtype(), "copy", src.device(), [&](auto src_tag) {
      using From = typename decltype(src_tag)::type;
      elementwise<To, From>(
          dst, [](From v) { return convert<To>(v); }, src);
    });
  });
}

void fill_kernel_cpu(const Tensor& out, const Scalar& value) {
  dispatch_dtype<kAllTypesAndBool>(out.dtype(), "fill", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = value.is_floating() ? convert<T>(value.to_double()) : convert<T>(value.to_int64());
    elementwise<T>(out, [v]() { return v; });
  });
}

void arange_kernel_cpu(const Tensor& out, const Scalar& start, const Scalar& step) {
  dispatch_dtype<kAllTypes>(out.dtype(), "arange", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = out.data<T>();
    const int64_t n = out.numel();
    if (start.is_floating() || step.is_floating()) {
      const double s = start.to_double(), st = step.to_double();
      for (int64_t i = 0; i < n; ++i) p[i] = convert<T>(s + st * static_cast<double>(i));
    } else {
      const int64_t s = start.to_int64(), st = step.to_int64();
      for (int64_t i = 0; i < n; ++i) p[i] = convert<T>(s + st * i);
    }
  });
}

void linspace_kernel_cpu(const Tensor& out, double start, double end) {
  dispatch_dtype<kAllTypes>(out.dtype(), "linspace", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = out.data<T>();
    const int64_t n = out.numel();
    if (n == 1) {
      p[0] = convert<T>(start);
      return;
    }
    const double step = (end - start) / static_cast<double>(n - 1);
    const int64_t half = n / 2;
    for (int64_t i = 0; i < n; ++i) {
      const double v = i < half ? start + step * static_cast<double>(i)
                                : end - step * static_cast<double>(n - 1 - i);
      p[i] = convert<T>(v);
    }
  });
}

}  // namespace

MT_REGISTER_KERNEL(copy_kernel, kCPU, &copy_kernel_cpu);
MT_REGISTER_KERNEL(fill_kernel, kCPU, &fill_kernel_cpu);
MT_REGISTER_KERNEL(arange_kernel, kCPU, &arange_kernel_cpu);
MT_REGISTER_KERNEL(linspace_kernel, kCPU, &linspace_kernel_cpu);

}  // namespace mantissa::cpu
