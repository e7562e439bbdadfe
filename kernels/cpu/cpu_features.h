// The x86 instruction sets the CPU kernels choose their vector paths by, each checked once per
// process. Elsewhere every check is false and the portable loops run.
#pragma once

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
