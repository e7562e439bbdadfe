#include "kernels/cpu/gemm/row_passes.h"

#include <immintrin.h>

#include <algorithm>
#include <type_traits>

#include "kernels/activation_math.h"
#include "kernels/cpu/convert_dense.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm/lanes.h"

namespace mantissa::cpu {
namespace {

#define MT_AVX512 __attribute__((target("avx512f,avx512vl")))

MT_AVX512 __mmask16 lanes16(int64_t n) { return static_cast<__mmask16>((1u << n) - 1); }

MT_AVX512 void bias_relu_rows_avx512(float* out, int64_t rows, int64_t n, const float* bias,
                                     bool relu) {
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t i = 0; i < rows; ++i) {
    float* row = out + i * n;
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 m = n - j >= 16 ? __mmask16(0xFFFF) : lanes16(n - j);
      __m512 v = _mm512_maskz_loadu_ps(m, row + j);
      if (bias != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + j));
      // activation::relu's rule per lane: zero where v < 0, ordered (NaN and -0 pass).
      if (relu) v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), zero);
      _mm512_mask_storeu_ps(row + j, m, v);
    }
  }
}

#define MT_AVX512_BW __attribute__((target("avx512f,avx512vl,avx512bw,f16c")))

// 8 stored values from p (mask m), as floats: half types widened exactly.
template <typename T>
MT_AVX512_BW inline __m256 load8_as_float(const T* p, __mmask8 m) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm256_maskz_loadu_ps(m, p);
  } else {
    const __m128i bits = _mm_maskz_loadu_epi16(m, p);
    if constexpr (std::is_same_v<T, Half>) return _mm256_cvtph_ps(bits);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
  }
}

// Up to 64 columns stay in eight registers of doubles across all rows: eight independent chains
// of adds, where a strip of 16 columns at a time waited on each add's latency. Each column still
// sums its rows in order.
template <typename T>
MT_AVX512_BW void add_column_sums_avx512(double* sums, const T* m, int64_t rows, int64_t n,
                                         int64_t ld) {
  constexpr int kChains = 8;
  for (int64_t j0 = 0; j0 < n; j0 += 8 * kChains) {
    __mmask8 mask[kChains];
    __m512d s[kChains];
    for (int h = 0; h < kChains; ++h) {
      const int64_t w = std::clamp<int64_t>(n - j0 - 8 * h, 0, 8);
      mask[h] = static_cast<__mmask8>((1u << w) - 1);
      s[h] = _mm512_maskz_loadu_pd(mask[h], sums + j0 + 8 * h);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = m + r * ld + j0;
      for (int h = 0; h < kChains; ++h)
        s[h] = _mm512_add_pd(s[h],
                             _mm512_maskz_cvtps_pd(mask[h], load8_as_float(row + 8 * h, mask[h])));
    }
    for (int h = 0; h < kChains; ++h) _mm512_mask_storeu_pd(sums + j0 + 8 * h, mask[h], s[h]);
  }
}

#undef MT_AVX512_BW

#undef MT_AVX512

template <typename T>
MT_LANES_TARGET void round_bias_relu_rows_avx512(const float* v, int64_t rows, int64_t n,
                                                 const float* bias, bool relu, T* out) {
  using L = lanes::Lanes16;
  constexpr Rounding r = std::is_same_v<T, BFloat16> ? Rounding::BFloat16 : Rounding::Float16;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < n; j += 16) {
      const L lanes{n - j >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - j)) - 1)};
      L::Reg x = lanes::round_to<L>(lanes.load(v + i * n + j), r);
      if (bias != nullptr) x = lanes::round_to<L>(L::add(x, lanes.load(bias + j)), r);
      if (relu) x = L::zero_if_negative(x, x);
      if constexpr (r == Rounding::BFloat16) {
        lanes.store_bf16(out + i * n + j, x);
      } else {
        lanes.store_half(out + i * n + j, x);
      }
    }
  }
}

// The dense rows as one sequence, a chunk at a time through a float buffer that stays in L1.
template <typename T>
void round_bias_relu_rows_portable(const float* v, int64_t rows, int64_t n, const float* bias,
                                   bool relu, T* out) {
  constexpr int64_t kChunk = 4096;
  float buf[kChunk];
  const int64_t total = rows * n;
  for (int64_t first = 0; first < total; first += kChunk) {
    const int64_t e = std::min(kChunk, total - first);
    round_dense(v + first, buf, e, T{});
    if (bias != nullptr) {
      for (int64_t t = 0, j = first % n; t < e; ++t, j = j + 1 == n ? 0 : j + 1) buf[t] += bias[j];
      round_dense(buf, buf, e, T{});
    }
    if (relu)
      for (int64_t t = 0; t < e; ++t) buf[t] = activation::relu(buf[t]);
    convert_dense(buf, out + first, e);
  }
}

}  // namespace

void round_bias_relu_rows(const float* v, int64_t rows, int64_t n, const float* bias, bool relu,
                          BFloat16* out) {
  if (cpu_has_avx512_vl_bw_f16c()) return round_bias_relu_rows_avx512(v, rows, n, bias, relu, out);
  round_bias_relu_rows_portable(v, rows, n, bias, relu, out);
}

void round_bias_relu_rows(const float* v, int64_t rows, int64_t n, const float* bias, bool relu,
                          Half* out) {
  if (cpu_has_avx512_vl_bw_f16c()) return round_bias_relu_rows_avx512(v, rows, n, bias, relu, out);
  round_bias_relu_rows_portable(v, rows, n, bias, relu, out);
}

void bias_relu_rows(float* out, int64_t rows, int64_t n, const float* bias, bool relu_out) {
  if (bias == nullptr && !relu_out) return;
  if (cpu_has_avx512_vl()) return bias_relu_rows_avx512(out, rows, n, bias, relu_out);
  for (int64_t i = 0; i < rows; ++i) {
    float* row = out + i * n;
    if (bias != nullptr && relu_out) {
      for (int64_t j = 0; j < n; ++j) row[j] = activation::relu(row[j] + bias[j]);
    } else if (bias != nullptr) {
      for (int64_t j = 0; j < n; ++j) row[j] += bias[j];
    } else {
      for (int64_t j = 0; j < n; ++j) row[j] = activation::relu(row[j]);
    }
  }
}

namespace {

template <typename T>
void column_sums(double* sums, const T* m, int64_t rows, int64_t n, int64_t ld) {
  if (cpu_has_avx512_vl_bw_f16c()) return add_column_sums_avx512(sums, m, rows, n, ld);
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = m + r * ld;
    for (int64_t j = 0; j < n; ++j) sums[j] += static_cast<double>(static_cast<float>(row[j]));
  }
}

}  // namespace

void add_column_sums(double* sums, const float* m, int64_t rows, int64_t n, int64_t ld) {
  column_sums(sums, m, rows, n, ld);
}
void add_column_sums(double* sums, const BFloat16* m, int64_t rows, int64_t n, int64_t ld) {
  column_sums(sums, m, rows, n, ld);
}
void add_column_sums(double* sums, const Half* m, int64_t rows, int64_t n, int64_t ld) {
  column_sums(sums, m, rows, n, ld);
}

}  // namespace mantissa::cpu
