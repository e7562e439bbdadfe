// The x86 instruction sets the CPU kernels choose their vector paths by, each checked once per
// process. Elsewhere every check is false and the portable loops run.
#pragma once

// A function compiled three times, for AVX-512, for x86-64-v3 (AVX2, FMA, F16C) and for baseline
// x86-64, the copy picked by the CPU at load time: for loops whose math is long enough for wide
// vectors to pay (GELU, the attention tasks). The middle copy is the ISA level, not
// "arch=haswell": GCC picks an arch= copy by CPU model, so that one ran on Intel Haswell only and
// every AMD and later Intel CPU without AVX-512 ran the baseline copy. Only with GCC on x86: clang
// (the sanitizer build) does not emit the inline functions that such a clone calls (the link
// fails), so its builds run the baseline copy, which computes the same math.
#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
#define MT_CPU_ISA_CLONES __attribute__((target_clones("avx512f", "arch=x86-64-v3", "default")))
// Without the x86-64-v3 copy: for register tiles sized for AVX-512's 32 registers, which spill on
// AVX2's 16 (the attention kernel's block_gemm: its x86-64-v3 copy was slower than the baseline
// one; docs/performance.md, "Muon").
#define MT_CPU_AVX512_CLONES __attribute__((target_clones("avx512f", "default")))
// For loops that store bytes (the float8 casts): AVX-512 without its byte and word instructions
// (AVX512BW) cannot vectorise them, nor could GCC 12 with AVX2, so the copy is x86-64-v4's
// (AVX-512 F, BW, DQ, VL: Skylake-X and later Intel, AMD Zen 4).
#define MT_CPU_V4_CLONES __attribute__((target_clones("arch=x86-64-v4", "default")))
#else
#define MT_CPU_ISA_CLONES
#define MT_CPU_AVX512_CLONES
#define MT_CPU_V4_CLONES
#endif

namespace mantissa::cpu {

#if defined(__x86_64__) || defined(__i386__)
inline bool cpu_has_f16c() {
  static const bool has = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return has;
}
inline bool cpu_has_avx512f() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}
// AVX-512 F and VL: masked 256- and 512-bit rows of floats (the linear kernels' row passes).
inline bool cpu_has_avx512_vl() {
  static const bool has = cpu_has_avx512f() && __builtin_cpu_supports("avx512vl");
  return has;
}
// ... with BW and F16C: masked rows of 16-bit values too (the small GEMM and its epilogues).
inline bool cpu_has_avx512_vl_bw_f16c() {
  static const bool has =
      cpu_has_avx512_vl() && __builtin_cpu_supports("avx512bw") && cpu_has_f16c();
  return has;
}
#else
inline bool cpu_has_f16c() { return false; }
inline bool cpu_has_avx512f() { return false; }
inline bool cpu_has_avx512_vl() { return false; }
inline bool cpu_has_avx512_vl_bw_f16c() { return false; }
#endif

}  // namespace mantissa::cpu
