// Vector registers of 16 or 8 float lanes (AVX-512 with VL, BW and F16C) for the passes around a
// linear layer's GEMM: the small GEMM's epilogues (sgemm.cpp) and the half-type row passes
// (row_passes.cpp). Rounding to bfloat16/float16 here gives the bits of convert_dense.h's
// conversions. Callers check cpu_has_avx512_vl_bw_f16c() and mark their functions
// MT_LANES_TARGET.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/gemm/sgemm.h"

// GCC 12 reports the intrinsics' internal _mm*_undefined_*() as maybe-uninitialized (GCC bug
// 105593).
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define MT_LANES_TARGET __attribute__((target("avx512f,avx512vl,avx512bw,avx2,f16c")))

namespace mantissa::cpu::lanes {

// A narrowed vector kept in its register: the compiler otherwise folds narrowing and masked store
// into one masked VPMOVDW/VCVTPS2PH to memory, which some cores run far slower than the pair
// (bench/NOTES.md).
template <typename V>
MT_LANES_TARGET inline V in_register(V v) {
  __asm__("" : "+v"(v));
  return v;
}

// VPTERNLOG's truth table for (a | b) & c (a = 0xF0, b = 0xCC, c = 0xAA).
constexpr int kOrThenAnd = (0xF0 | 0xCC) & 0xAA;

// 16 or 8 float lanes with the lanes past the product's width masked off (loads read nothing
// there and give 0, stores write nothing).
struct Lanes16 {
  using Reg = __m512;
  __mmask16 mask;
  MT_LANES_TARGET static Reg zero() { return _mm512_setzero_ps(); }
  MT_LANES_TARGET Reg load(const float* p) const { return _mm512_maskz_loadu_ps(mask, p); }
  MT_LANES_TARGET static Reg broadcast(float v) { return _mm512_set1_ps(v); }
  MT_LANES_TARGET static Reg mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  MT_LANES_TARGET static Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  // v, with 0 where `where` < 0 or <= 0 (ordered compares): activation::relu's rule
  // (kernels/activation_math.h) and formulas::relu_grad's (engine/activation_formulas.h), lane by
  // lane.
  MT_LANES_TARGET static Reg zero_if_negative(Reg v, Reg where) {
    return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(where, zero(), _CMP_LT_OQ), zero());
  }
  MT_LANES_TARGET static Reg zero_if_not_positive(Reg v, Reg where) {
    return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(where, zero(), _CMP_LE_OQ), zero());
  }
  MT_LANES_TARGET void store(float* p, Reg v) const { _mm512_mask_storeu_ps(p, mask, v); }
  // Column sums in double: lanes 0-7 and 8-15.
  MT_LANES_TARGET void load_sums(const double* p, __m512d s[2]) const {
    s[0] = _mm512_maskz_loadu_pd(static_cast<__mmask8>(mask), p);
    s[1] = _mm512_maskz_loadu_pd(static_cast<__mmask8>(mask >> 8), p + 8);
  }
  MT_LANES_TARGET static void add_sums(__m512d s[2], Reg v) {
    const __m256 lo = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, _mm512_castps_pd(v), 0));
    const __m256 hi = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, _mm512_castps_pd(v), 1));
    s[0] = _mm512_add_pd(s[0], _mm512_maskz_cvtps_pd(0xFF, lo));
    s[1] = _mm512_add_pd(s[1], _mm512_maskz_cvtps_pd(0xFF, hi));
  }
  MT_LANES_TARGET void store_sums(double* p, const __m512d s[2]) const {
    _mm512_mask_storeu_pd(p, static_cast<__mmask8>(mask), s[0]);
    _mm512_mask_storeu_pd(p + 8, static_cast<__mmask8>(mask >> 8), s[1]);
  }
  // Half-type layers: v rounded to bfloat16/float16 (kept in float), and rows of 16-bit values.
  // Round to nearest even on the upper 16 bits; a NaN keeps its upper bits with the quiet bit set
  // ((u | quiet) & high in one ternary-logic op), as convert_dense.cpp's scalar formula.
  MT_LANES_TARGET static Reg round_bf16(Reg v) {
    const __m512i u = _mm512_castps_si512(v), high = _mm512_set1_epi32(int(0xffff0000u));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_and_si512(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), high);
    const __m512i quiet =
        _mm512_ternarylogic_epi32(u, _mm512_set1_epi32(0x400000), high, kOrThenAnd);
    return _mm512_castsi512_ps(
        _mm512_mask_mov_epi32(rounded, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), quiet));
  }
  MT_LANES_TARGET static __m256i to_half_bits(Reg v) {
    return _mm512_maskz_cvtps_ph(0xFFFF, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  MT_LANES_TARGET static Reg round_half(Reg v) { return _mm512_cvtph_ps(to_half_bits(v)); }
  MT_LANES_TARGET Reg load_bf16(const void* p) const {
    const __m512i u = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
  }
  MT_LANES_TARGET Reg load_half(const void* p) const {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p));
  }
  MT_LANES_TARGET void store_bf16(void* p, Reg v) const {  // v already rounded
    const __m512i bits = _mm512_srli_epi32(_mm512_castps_si512(v), 16);
    _mm256_mask_storeu_epi16(p, mask, in_register(_mm512_cvtepi32_epi16(bits)));
  }
  MT_LANES_TARGET void store_half(void* p, Reg v) const {
    _mm256_mask_storeu_epi16(p, mask, in_register(to_half_bits(v)));
  }
};
struct Lanes8 {
  using Reg = __m256;
  __mmask8 mask;
  MT_LANES_TARGET static Reg zero() { return _mm256_setzero_ps(); }
  MT_LANES_TARGET Reg load(const float* p) const { return _mm256_maskz_loadu_ps(mask, p); }
  MT_LANES_TARGET static Reg broadcast(float v) { return _mm256_set1_ps(v); }
  MT_LANES_TARGET static Reg mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  MT_LANES_TARGET static Reg add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  MT_LANES_TARGET static Reg zero_if_negative(Reg v, Reg where) {
    return _mm256_mask_mov_ps(v, _mm256_cmp_ps_mask(where, zero(), _CMP_LT_OQ), zero());
  }
  MT_LANES_TARGET static Reg zero_if_not_positive(Reg v, Reg where) {
    return _mm256_mask_mov_ps(v, _mm256_cmp_ps_mask(where, zero(), _CMP_LE_OQ), zero());
  }
  MT_LANES_TARGET void store(float* p, Reg v) const { _mm256_mask_storeu_ps(p, mask, v); }
  MT_LANES_TARGET void load_sums(const double* p, __m512d s[2]) const {
    s[0] = _mm512_maskz_loadu_pd(mask, p);
  }
  MT_LANES_TARGET static void add_sums(__m512d s[2], Reg v) {
    s[0] = _mm512_add_pd(s[0], _mm512_maskz_cvtps_pd(0xFF, v));
  }
  MT_LANES_TARGET void store_sums(double* p, const __m512d s[2]) const {
    _mm512_mask_storeu_pd(p, mask, s[0]);
  }
  MT_LANES_TARGET static Reg round_bf16(Reg v) {
    const __m256i u = _mm256_castps_si256(v), high = _mm256_set1_epi32(int(0xffff0000u));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_and_si256(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), high);
    const __m256i quiet =
        _mm256_ternarylogic_epi32(u, _mm256_set1_epi32(0x400000), high, kOrThenAnd);
    return _mm256_castsi256_ps(
        _mm256_mask_mov_epi32(rounded, _mm256_cmp_ps_mask(v, v, _CMP_UNORD_Q), quiet));
  }
  MT_LANES_TARGET static __m128i to_half_bits(Reg v) {
    return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  MT_LANES_TARGET static Reg round_half(Reg v) { return _mm256_cvtph_ps(to_half_bits(v)); }
  MT_LANES_TARGET Reg load_bf16(const void* p) const {
    const __m256i u = _mm256_cvtepu16_epi32(_mm_maskz_loadu_epi16(mask, p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
  }
  MT_LANES_TARGET Reg load_half(const void* p) const {
    return _mm256_cvtph_ps(_mm_maskz_loadu_epi16(mask, p));
  }
  MT_LANES_TARGET void store_bf16(void* p, Reg v) const {
    const __m256i bits = _mm256_srli_epi32(_mm256_castps_si256(v), 16);
    _mm_mask_storeu_epi16(p, mask, in_register(_mm256_cvtepi32_epi16(bits)));
  }
  MT_LANES_TARGET void store_half(void* p, Reg v) const {
    _mm_mask_storeu_epi16(p, mask, in_register(to_half_bits(v)));
  }
};

// The epilogue's steps that depend on the layer's storage type.
template <typename L>
MT_LANES_TARGET inline typename L::Reg round_to(typename L::Reg v, Rounding r) {
  if (r == Rounding::BFloat16) return L::round_bf16(v);
  if (r == Rounding::Float16) return L::round_half(v);
  return v;
}
template <typename L>
MT_LANES_TARGET inline typename L::Reg load_row(const L& lanes, const void* p, Rounding r) {
  if (r == Rounding::BFloat16) return lanes.load_bf16(p);
  if (r == Rounding::Float16) return lanes.load_half(p);
  return lanes.load(static_cast<const float*>(p));
}

}  // namespace mantissa::cpu::lanes

#pragma GCC diagnostic pop
