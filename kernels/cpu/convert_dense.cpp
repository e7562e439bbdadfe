#include "kernels/cpu/convert_dense.h"

#include <array>
#include <cstring>

#include "kernels/cpu/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MT_HAVE_X86 1
#endif

namespace mantissa::cpu {
namespace {

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
__attribute__((target("avx,f16c"))) void round_half_f16c(const float* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = float(Half(src[i]));
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

void round_dense(const float* src, float* dst, int64_t n, Half) {
#if MT_HAVE_X86
  if (cpu_has_f16c()) return round_half_f16c(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = float(Half(src[i]));
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
namespace {

// Same rounding as BFloat16(float), written without branches so the loops vectorise: the
// bfloat16 bits in the upper half of the float's bits, the lower half zero (the rounded float).
inline uint32_t bf16_rounded_float_bits(uint32_t u) {
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  const uint32_t quiet_nan = (u & 0xffff0000u) | 0x00400000u;
  const uint32_t nan_mask = 0u - static_cast<uint32_t>((u & 0x7fffffffu) > 0x7f800000u);
  return rounded ^ ((rounded ^ quiet_nan) & nan_mask);
}
inline uint16_t bf16_bits_rne(uint32_t u) {
  return static_cast<uint16_t>(bf16_rounded_float_bits(u) >> 16);
}

__attribute__((target_clones("avx2", "default"))) void float_to_bf16_loop(const float* src,
                                                                          BFloat16* dst,
                                                                          int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, src + i, sizeof(u));
    dst[i].x = bf16_bits_rne(u);
  }
}

#if MT_HAVE_X86
// The same arithmetic 16 lanes at a time: the compiler keeps this loop at 256 bits and narrows
// with shuffles, which made it the slowest conversion of a bfloat16 step. (AVX512-BF16's
// vcvtneps2bf16 would be one instruction, but it flushes denormals to zero.)
// GCC 12 reports the intrinsics' internal _mm512_undefined_epi32() as maybe-uninitialized (GCC
// bug 105593).
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
__attribute__((target("avx512f"))) void float_to_bf16_avx512(const float* src, BFloat16* dst,
                                                             int64_t n) {
  const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet = _mm512_set1_epi32(0x0040);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i u = _mm512_loadu_si512(src + i);
    const __m512i high = _mm512_srli_epi32(u, 16);
    const __m512i lsb = _mm512_and_si512(high, one);
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, lsb)), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    const __m512i bits = _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(high, quiet));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(bits));
  }
  for (; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, src + i, sizeof(u));
    dst[i].x = bf16_bits_rne(u);
  }
}
#pragma GCC diagnostic pop
#endif

}  // namespace

// Kept in 32-bit lanes (no narrowing store), so it vectorises at any width.
__attribute__((target_clones("avx512f", "avx2", "default"))) void round_dense(const float* src,
                                                                              float* dst, int64_t n,
                                                                              BFloat16) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, src + i, sizeof(u));
    const uint32_t bits = bf16_rounded_float_bits(u);
    std::memcpy(dst + i, &bits, sizeof(bits));
  }
}

void convert_dense(const float* src, BFloat16* dst, int64_t n) {
#if MT_HAVE_X86
  if (cpu_has_avx512f()) return float_to_bf16_avx512(src, dst, n);
#endif
  float_to_bf16_loop(src, dst, n);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void convert_dense(const BFloat16* src,
                                                                                float* dst,
                                                                                int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(src[i].x) << 16;
    std::memcpy(dst + i, &u, sizeof(u));
  }
}

namespace {

// The widened value of each of the 256 codes of F, as To.
template <typename F, typename To>
const To* float8_table() {
  static const auto table = [] {
    std::array<To, 256> t{};
    for (int code = 0; code < 256; ++code)
      t[code] = To(static_cast<float>(F(static_cast<uint8_t>(code), from_bits)));
    return t;
  }();
  return table.data();
}

template <typename F, typename To>
void widen_float8(const F* src, To* dst, int64_t n) {
  const To* table = float8_table<F, To>();
  const auto* codes = reinterpret_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = table[codes[i]];
}

}  // namespace

void convert_dense(const Float8E4M3FN* src, BFloat16* dst, int64_t n) { widen_float8(src, dst, n); }
void convert_dense(const Float8E5M2* src, BFloat16* dst, int64_t n) { widen_float8(src, dst, n); }
void convert_dense(const Float8E4M3FN* src, float* dst, int64_t n) { widen_float8(src, dst, n); }
void convert_dense(const Float8E5M2* src, float* dst, int64_t n) { widen_float8(src, dst, n); }

}  // namespace mantissa::cpu
