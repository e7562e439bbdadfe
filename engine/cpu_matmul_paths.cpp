#include "engine/cpu_matmul_paths.h"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include <atomic>
#include <cctype>
#include <set>

#include "engine/environment.h"

namespace mantissa::cpu {
namespace {

std::atomic<bool>& emulation_flag() {
  static std::atomic<bool> flag{
      mantissa::detail::env_word("MANTISSA_CPU_BF16", {"auto", "emulate"}) == 1};
  return flag;
}

// oneDNN's own reading of the CPU (cpuid, and for AMX the kernel's permission to use the tiles),
// so the path named is the one its matmul primitive takes.
Bf16MatmulIsa detect() {
  const unsigned isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
  auto has = [isa](dnnl_cpu_isa_t bits) {
    return (isa & static_cast<unsigned>(bits)) == static_cast<unsigned>(bits);
  };
  if (has(dnnl_cpu_isa_avx512_core_amx)) return Bf16MatmulIsa::AmxBf16;
  if (has(dnnl_cpu_isa_avx512_core_bf16)) return Bf16MatmulIsa::Avx512Bf16;
  return Bf16MatmulIsa::Emulated;
}

// OpenBLAS's names for the kernels of x86 CPUs without AVX2 and FMA (its driver/others/dynamic.c).
bool predates_avx2(const std::string& core) {
  static const std::set<std::string> names = {
      "unknown",   "katmai", "coppermine",  "northwood", "prescott",  "banias",    "atom",
      "core2",     "penryn", "dunnington",  "nehalem",   "athlon",    "opteron",   "opteron_sse3",
      "barcelona", "nano",   "sandybridge", "bobcat",    "bulldozer", "piledriver"};
  std::string lower;
  for (char ch : core) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return names.count(lower) > 0;
}

bool cpu_has_avx2_fma() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

std::string openblas_core() {
  const char* name = openblas_get_corename();
  return name == nullptr ? "unknown" : name;
}

bool openblas_kernels_are_stale() {
  static const bool stale = cpu_has_avx2_fma() && predates_avx2(openblas_core());
  return stale;
}

// 0: automatic, 1: OpenBLAS, 2: oneDNN.
std::atomic<int>& float32_choice() {
  static std::atomic<int> choice{
      mantissa::detail::env_word("MANTISSA_CPU_SGEMM", {"auto", "openblas", "onednn"})};
  return choice;
}

}  // namespace

Float32GemmLibrary cpu_float32_gemm_library() {
  switch (float32_choice().load(std::memory_order_relaxed)) {
    case 1:
      return Float32GemmLibrary::OpenBlas;
    case 2:
      return Float32GemmLibrary::OneDnn;
    default:
      return openblas_kernels_are_stale() ? Float32GemmLibrary::OneDnn
                                          : Float32GemmLibrary::OpenBlas;
  }
}

std::string cpu_float32_gemm_description() {
  const bool forced = float32_choice().load(std::memory_order_relaxed) != 0;
  if (cpu_float32_gemm_library() == Float32GemmLibrary::OpenBlas)
    return "OpenBLAS (" + openblas_core() + " kernels" + (forced ? ", forced" : "") + ")";
  if (forced) return "oneDNN (forced)";
  return "oneDNN (OpenBLAS chose " + openblas_core() + " kernels for this CPU)";
}

void set_cpu_float32_gemm_library(Float32GemmLibrary library, bool automatic) {
  float32_choice().store(automatic                                 ? 0
                         : library == Float32GemmLibrary::OpenBlas ? 1
                                                                   : 2,
                         std::memory_order_relaxed);
}

Bf16MatmulIsa cpu_bf16_matmul_isa_available() {
  static const Bf16MatmulIsa isa = detect();
  return isa;
}

Bf16MatmulIsa cpu_bf16_matmul_isa() {
  return cpu_bf16_matmul_emulation() ? Bf16MatmulIsa::Emulated : cpu_bf16_matmul_isa_available();
}

std::string bf16_matmul_isa_name(Bf16MatmulIsa isa) {
  switch (isa) {
    case Bf16MatmulIsa::AmxBf16:
      return "AMX-BF16 (oneDNN)";
    case Bf16MatmulIsa::Avx512Bf16:
      return "AVX512-BF16 (oneDNN)";
    case Bf16MatmulIsa::Emulated:
      break;
  }
  return "emulated (float32 SGEMM)";
}

void set_cpu_bf16_matmul_emulation(bool emulate) {
  emulation_flag().store(emulate, std::memory_order_relaxed);
}
bool cpu_bf16_matmul_emulation() { return emulation_flag().load(std::memory_order_relaxed); }

}  // namespace mantissa::cpu
