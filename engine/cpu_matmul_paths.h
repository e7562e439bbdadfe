// Which library the CPU's float32 GEMMs use, and which path its bfloat16 matrix products took.
//
// float32: OpenBLAS, unless the kernels OpenBLAS picked for this CPU predate its vector ISA. An
// OpenBLAS older than the CPU model reads it as a generic x86 (0.3.21 runs Prescott's SSE3
// kernels on an Emerald Rapids Xeon, a fifth of the speed), and then oneDNN, which reads the
// CPU's features rather than its model, runs them (kernels/cpu/gemm/blas.h).
//
// bfloat16: which path: the processor's bf16 instructions
// (AMX-BF16 tiles or AVX512-BF16's vdpbf16ps, through oneDNN's matmul primitive;
// kernels/cpu/gemm/bf16_gemm.h), or the emulation that widens the operands to float32 for SGEMM.
// Both compute bf16 operands with float32 accumulation and one rounding on store; they differ
// only in summation order (and in the hardware flushing subnormal operands to zero).
//
// The path is chosen once per process from the CPU's features, and can be forced to the
// emulation (set_cpu_bf16_matmul_emulation, or MANTISSA_CPU_BF16=emulate in the environment) to
// compare the two. Which path each product took is counted in engine/fast_path_stats.h (paths
// "cpu.bf16_matmul": ran "amx" (all on tiles) or "avx512_bf16", fell back "emulated" by design,
// refused "NoKernel"; and "cpu.float32_gemm": ran "onednn", refused "NoKernel"). A refused product
// runs emulated (or on OpenBLAS); under strict fast paths (MANTISSA_STRICT_FAST_PATHS=1,
// set_strict_fast_paths: one switch for every fast path) it throws instead.
#pragma once

#include <cstdint>
#include <string>

namespace mantissa::cpu {

enum class Bf16MatmulIsa : uint8_t {
  Emulated,    // no bf16 instructions (or forced): float32 SGEMM on widened operands
  Avx512Bf16,  // vdpbf16ps
  AmxBf16,     // AMX tiles (tdpbf16ps)
};

// What this CPU offers (ignores the override), and what bf16 products use now.
Bf16MatmulIsa cpu_bf16_matmul_isa_available();
Bf16MatmulIsa cpu_bf16_matmul_isa();
// "AMX-BF16 (oneDNN)", "AVX512-BF16 (oneDNN)", "emulated (float32 SGEMM)".
std::string bf16_matmul_isa_name(Bf16MatmulIsa isa);

// Forces the emulation (true) or restores the CPU's own choice (false). Starts as
// MANTISSA_CPU_BF16 says ("emulate": forced), read once.
void set_cpu_bf16_matmul_emulation(bool emulate);
bool cpu_bf16_matmul_emulation();

enum class Float32GemmLibrary : uint8_t { OpenBlas, OneDnn };
Float32GemmLibrary cpu_float32_gemm_library();
// E.g. "OpenBLAS (SkylakeX kernels)", "oneDNN (OpenBLAS chose Prescott kernels for this CPU)".
std::string cpu_float32_gemm_description();
// Forces a library (tests, comparisons), or (nullopt-like: `automatic` true) restores the choice
// made from the CPU. Starts as MANTISSA_CPU_SGEMM says ("openblas", "onednn"; default auto).
void set_cpu_float32_gemm_library(Float32GemmLibrary library, bool automatic = false);

}  // namespace mantissa::cpu
