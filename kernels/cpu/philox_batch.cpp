#include "kernels/cpu/philox_batch.h"

#include "kernels/cpu/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace mantissa::cpu {
namespace {

void philox4x32_batch_portable(uint64_t seed, uint64_t counter0, PhiloxBatch& out) {
  for (int l = 0; l < kPhiloxBatch; ++l) {
    const Philox4 r = philox4x32(seed, counter0 + static_cast<uint64_t>(l));
    for (int k = 0; k < 4; ++k) out.w[k][l] = r.v[k];
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// The round of philox4x32 on 16 lanes of 32-bit words. _mm512_mul_epu32 multiplies the even
// lanes into 64-bit products, so the odd lanes are shifted down and multiplied separately, and
// each product's low and high halves are blended back into 16 lanes.
// GCC 12 reports the intrinsics' internal _mm512_undefined_epi32() as uninitialized (GCC bug
// 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define MT_AVX512 __attribute__((target("avx512f")))
constexpr int kVectors = kPhiloxBatch / 16;
constexpr __mmask16 kOddLanes = 0xAAAA;

MT_AVX512 inline void mul_hi_lo(__m512i x, __m512i m, __m512i& hi, __m512i& lo) {
  const __m512i even = _mm512_mul_epu32(x, m);
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(x, 32), m);
  lo = _mm512_mask_blend_epi32(kOddLanes, even, _mm512_slli_epi64(odd, 32));
  hi = _mm512_mask_blend_epi32(kOddLanes, _mm512_srli_epi64(even, 32), odd);
}

MT_AVX512 void philox4x32_batch_avx512(uint64_t seed, uint64_t counter0, PhiloxBatch& out) {
  for (int l = 0; l < kPhiloxBatch; ++l) {
    const uint64_t counter = counter0 + static_cast<uint64_t>(l);
    out.w[0][l] = static_cast<uint32_t>(counter);
    out.w[1][l] = static_cast<uint32_t>(counter >> 32);
  }
  __m512i c0[kVectors], c1[kVectors], c2[kVectors], c3[kVectors];
  for (int v = 0; v < kVectors; ++v) {
    c0[v] = _mm512_load_si512(out.w[0] + 16 * v);
    c1[v] = _mm512_load_si512(out.w[1] + 16 * v);
    c2[v] = _mm512_setzero_si512();
    c3[v] = _mm512_setzero_si512();
  }
  const __m512i m0 = _mm512_set1_epi64(kPhiloxMul0), m1 = _mm512_set1_epi64(kPhiloxMul1);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const __m512i key0 = _mm512_set1_epi32(static_cast<int>(k0));
    const __m512i key1 = _mm512_set1_epi32(static_cast<int>(k1));
    // The four vectors are independent: their rounds overlap in the pipeline.
    for (int v = 0; v < kVectors; ++v) {
      __m512i hi0, lo0, hi1, lo1;
      mul_hi_lo(c0[v], m0, hi0, lo0);
      mul_hi_lo(c2[v], m1, hi1, lo1);
      c0[v] = _mm512_ternarylogic_epi32(hi1, c1[v], key0, 0x96);  // three-way xor
      c1[v] = lo1;
      c2[v] = _mm512_ternarylogic_epi32(hi0, c3[v], key1, 0x96);
      c3[v] = lo0;
    }
    k0 += kPhiloxWeyl0;
    k1 += kPhiloxWeyl1;
  }
  for (int v = 0; v < kVectors; ++v) {
    _mm512_store_si512(out.w[0] + 16 * v, c0[v]);
    _mm512_store_si512(out.w[1] + 16 * v, c1[v]);
    _mm512_store_si512(out.w[2] + 16 * v, c2[v]);
    _mm512_store_si512(out.w[3] + 16 * v, c3[v]);
  }
}
#pragma GCC diagnostic pop
#endif

}  // namespace

void philox4x32_batch(uint64_t seed, uint64_t counter0, PhiloxBatch& out) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (cpu_has_avx512f()) return philox4x32_batch_avx512(seed, counter0, out);
#endif
  philox4x32_batch_portable(seed, counter0, out);
}

}  // namespace mantissa::cpu
