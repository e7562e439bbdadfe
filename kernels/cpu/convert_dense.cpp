#include "kernels/cpu/convert_dense.h"

#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MT_HAVE_X86 1
#endif

namespace mantissa::cpu {
namespace {

#if MT_HAVE_X86
bool cpu_has_f16c() {
  static const bool has = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return has;
}
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
#endif

}  // namespace

void convert_dense(const float* src, Half* dst, int64_t n) {
#if MT_HAVE_X86
  if (cpu_has_f16c()) return float_to_half_f16c(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = Half(src[i]);
}

void convert_dense(const Half* src, float* dst, int64_t n) {
#if MT_HAVE_X86
  if (cpu_has_f16c()) return half_to_float_f16c(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = float(src[i]);
}

// The bfloat16 loops are integer bit operations, so wider vectors give the same bits; the clones
// let them use AVX2/AVX-512 where the CPU has them (a mixed-precision step converts every operand
// and result).
__attribute__((target_clones("avx512f", "avx2", "default"))) void convert_dense(const float* src,
                                                                                BFloat16* dst,
                                                                                int64_t n) {
  // Same rounding as BFloat16(float), written without branches so the loop vectorises.
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, src + i, sizeof(u));
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (u >> 16) | 0x0040u;
    const uint32_t nan_mask = 0u - static_cast<uint32_t>((u & 0x7fffffffu) > 0x7f800000u);
    dst[i].x = static_cast<uint16_t>(rounded ^ ((rounded ^ quiet_nan) & nan_mask));
  }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void convert_dense(const BFloat16* src,
                                                                                float* dst,
                                                                                int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(src[i].x) << 16;
    std::memcpy(dst + i, &u, sizeof(u));
  }
}

}  // namespace mantissa::cpu
