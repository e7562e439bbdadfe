// CPU kernels that write values without reading math inputs: copy (with casts between every
// pair of dtypes), fill, arange, linspace. Dense float32<->float16/bfloat16 casts take the
// vectorised paths of convert_dense.h.
#include <cstring>

#include "engine/convert.h"
#include "engine/kernel_tables.h"
#include "kernels/cpu/convert_dense.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/loops.h"
#include "kernels/float8_math.h"

namespace mantissa::cpu {
namespace {

// Dense float<->half conversions, the hot casts of mixed precision (an autocast step casts every
// weight and converts every weight gradient back), and float8 widened for scaled products.
bool try_fast_copy(const Tensor& dst, const Tensor& src) {
  if (!dst.is_contiguous() || !src.is_contiguous()) return false;
  if (dst.dtype() == src.dtype()) {
    std::memcpy(dst.data_ptr(), src.data_ptr(), static_cast<size_t>(dst.nbytes()));
    return true;
  }
  const int64_t n = dst.numel();
  const DType to = dst.dtype(), from = src.dtype();
  if (to == kFloat16 && from == kFloat32) {
    convert_dense_parallel(src.data<float>(), dst.data<Half>(), n);
  } else if (to == kFloat32 && from == kFloat16) {
    convert_dense_parallel(src.data<Half>(), dst.data<float>(), n);
  } else if (to == kBFloat16 && from == kFloat32) {
    convert_dense_parallel(src.data<float>(), dst.data<BFloat16>(), n);
  } else if (to == kFloat32 && from == kBFloat16) {
    convert_dense_parallel(src.data<BFloat16>(), dst.data<float>(), n);
  } else if (to == kBFloat16 && from == kFloat8E4M3FN) {
    convert_dense_parallel(src.data<Float8E4M3FN>(), dst.data<BFloat16>(), n);
  } else if (to == kBFloat16 && from == kFloat8E5M2) {
    convert_dense_parallel(src.data<Float8E5M2>(), dst.data<BFloat16>(), n);
  } else if (to == kFloat32 && from == kFloat8E4M3FN) {
    convert_dense_parallel(src.data<Float8E4M3FN>(), dst.data<float>(), n);
  } else if (to == kFloat32 && from == kFloat8E5M2) {
    convert_dense_parallel(src.data<Float8E5M2>(), dst.data<float>(), n);
  } else {
    return false;
  }
  return true;
}

void copy_kernel_cpu(const Tensor& dst, const Tensor& src) {
  if (try_fast_copy(dst, src)) return;
  dispatch_dtype<kAllTypesAndBoolAndFloat8>(dst.dtype(), "copy", dst.device(), [&](auto dst_tag) {
    using To = typename decltype(dst_tag)::type;
    dispatch_dtype<kAllTypesAndBoolAndFloat8>(src.dtype(), "copy", src.device(), [&](auto src_tag) {
      using From = typename decltype(src_tag)::type;
      elementwise<To, From>(
          dst, [](From v) { return convert<To>(v); }, src);
    });
  });
}

void fill_kernel_cpu(const Tensor& out, const Scalar& value) {
  dispatch_dtype<kAllTypesAndBoolAndFloat8>(out.dtype(), "fill", out.device(), [&](auto tag) {
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

// The dense cast by one scale (tensorwise, delayed; a row of a rowwise cast), and by one scale
// per element of a row (a cast along columns), with an x86-64-v4 copy: with the float8 rounding
// written branch-free (engine/float8.h, kernels/float8_math.h) their loops vectorise there, which
// they do not in the baseline x86-64 build.
#define MT_FLOAT8_CAST_DENSE(F, T)                                                               \
  MT_CPU_V4_CLONES void float8_cast_dense(F* dst, const T* src, int64_t n, float scale) {        \
    for (int64_t i = 0; i < n; ++i)                                                              \
      dst[i] = float8_math::saturated_cast<F>(convert<float>(src[i]), scale);                    \
  }                                                                                              \
  MT_CPU_V4_CLONES void float8_cast_dense(F* dst, const T* src, int64_t n, const float* scales) { \
    for (int64_t i = 0; i < n; ++i)                                                              \
      dst[i] = float8_math::saturated_cast<F>(convert<float>(src[i]), scales[i]);                \
  }
MT_FLOAT8_CAST_DENSE(Float8E4M3FN, float)
MT_FLOAT8_CAST_DENSE(Float8E4M3FN, double)
MT_FLOAT8_CAST_DENSE(Float8E4M3FN, Half)
MT_FLOAT8_CAST_DENSE(Float8E4M3FN, BFloat16)
MT_FLOAT8_CAST_DENSE(Float8E5M2, float)
MT_FLOAT8_CAST_DENSE(Float8E5M2, double)
MT_FLOAT8_CAST_DENSE(Float8E5M2, Half)
MT_FLOAT8_CAST_DENSE(Float8E5M2, BFloat16)
#undef MT_FLOAT8_CAST_DENSE

void float8_cast_cpu(const Tensor& out, const Tensor& x, const Tensor& scale) {
  dispatch_dtype<kFloat8Types>(out.dtype(), "float8_cast", out.device(), [&](auto out_tag) {
    using F = typename decltype(out_tag)::type;
    dispatch_dtype<kFloatingTypes>(x.dtype(), "float8_cast", x.device(), [&](auto x_tag) {
      using T = typename decltype(x_tag)::type;
      bool one_scale = scale.numel() > 0;
      for (int64_t d = 0; d < scale.dim(); ++d)
        one_scale = one_scale && (scale.size(d) == 1 || scale.stride(d) == 0);
      if (out.is_contiguous() && x.is_contiguous() && one_scale) {
        // One scale over dense tensors (tensorwise): a plain loop.
        const float s = *scale.data<float>();
        const T* src = x.data<T>();
        F* dst = out.data<F>();
        parallel_ranges(
            out.numel(),
            [&](int64_t b, int64_t e) { float8_cast_dense(dst + b, src + b, e - b, s); },
            out.numel(), kConvertGrain);
        return;
      }
      // A dense matrix by one scale per row or per column (rowwise): the scale comes expanded to
      // the matrix's shape, a [R, 1] or [1, C] column or row of scales with a 0 stride.
      if (out.dim() == 2 && scale.dim() == 2 && out.is_contiguous() && x.is_contiguous() &&
          scale.dtype() == DType::Float32) {
        const int64_t rows = out.size(0), cols = out.size(1);
        const bool per_row = scale.stride(1) == 0 && (scale.stride(0) == 1 || rows == 1);
        const bool per_col = scale.stride(0) == 0 && (scale.stride(1) == 1 || cols == 1);
        if (per_row || per_col) {
          const T* src = x.data<T>();
          const float* scales = scale.data<float>();
          F* dst = out.data<F>();
          parallel_ranges(
              rows,
              [&](int64_t b, int64_t e) {
                for (int64_t r = b; r < e; ++r) {
                  if (per_row) {
                    float8_cast_dense(dst + r * cols, src + r * cols, cols, scales[r]);
                  } else {
                    float8_cast_dense(dst + r * cols, src + r * cols, cols, scales);
                  }
                }
              },
              out.numel(), kConvertGrain);
          return;
        }
      }
      elementwise<F, T, float>(
          out, [](T v, float s) { return float8_math::saturated_cast<F>(convert<float>(v), s); }, x,
          scale);
    });
  });
}

void amax_to_scale_cpu(const Tensor& scale, const Tensor& amax, double fp8_max, bool power_of_2) {
  dispatch_dtype<kFloatingTypes>(amax.dtype(), "amax_to_scale", amax.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    elementwise<float, T>(
        scale,
        [fp8_max, power_of_2](T a) {
          return float8_math::amax_to_scale(convert<double>(a), fp8_max, power_of_2);
        },
        amax);
  });
}

}  // namespace

MT_REGISTER_KERNEL(copy_kernel, kCPU, &copy_kernel_cpu);
MT_REGISTER_KERNEL(fill_kernel, kCPU, &fill_kernel_cpu);
MT_REGISTER_KERNEL(float8_cast_kernel, kCPU, &float8_cast_cpu);
MT_REGISTER_KERNEL(amax_to_scale_kernel, kCPU, &amax_to_scale_cpu);
MT_REGISTER_KERNEL(arange_kernel, kCPU, &arange_kernel_cpu);
MT_REGISTER_KERNEL(linspace_kernel, kCPU, &linspace_kernel_cpu);

}  // namespace mantissa::cpu
