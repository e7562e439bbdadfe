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
// compare the two. A product the hardware path was asked for but oneDNN refused runs emulated
// and is counted; under strict fast paths (MANTISSA_STRICT_FAST_PATHS=1,
// cuda::set_strict_fast_paths: one switch for every fast path) it throws instead. The counters
// are process-wide relaxed atomics.
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

struct CpuMatmulStats {
  int64_t bf16_hardware = 0;      // products that ran on the bf16 instructions
  int64_t bf16_amx = 0;           // ... of them, all on AMX tiles (the rest: vdpbf16ps kernels)
  int64_t bf16_emulated = 0;      // products emulated by choice (no bf16 ISA, or forced)
  int64_t bf16_fallbacks = 0;     // products the hardware path was asked for but refused
  int64_t float32_onednn = 0;     // float32 GEMM calls oneDNN ran
  int64_t float32_fallbacks = 0;  // float32 GEMM calls oneDNN refused (OpenBLAS ran them)
};
CpuMatmulStats cpu_matmul_stats();
void reset_cpu_matmul_stats();

namespace detail {
void count_bf16_hardware(bool amx);
void count_bf16_emulated();
// Counts a refusal; true when the caller must throw instead (strict fast paths).
[[nodiscard]] bool count_bf16_fallback();
void count_float32_onednn();
[[nodiscard]] bool count_float32_fallback();
}  // namespace detail

}  // namespace mantissa::cpu
