// `mantissa devices`: the CPU (model, cores, SIMD from /proc/cpuinfo) and every GPU (through the
// engine's public API; utilization and temperature through NVML when the driver ships it —
// loaded at run time with dlopen, so the binary neither links nor needs it).
#include <dlfcn.h>

#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>

#include "cli/cli.h"
#include "cuda/memory.h"
#include "engine/cpu_matmul_paths.h"
#include "engine/device.h"
#include "engine/device_properties.h"
#include "engine/error.h"

namespace mantissa::cli {
namespace {

std::string gib(int64_t bytes) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(2);
  os << static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0) << " GiB";
  return os.str();
}

std::string version(int v) {  // 12040 -> 12.4
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

void print_cpu() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model;
  std::set<std::string> flags;
  int64_t logical = 0;
  std::set<std::pair<std::string, std::string>> cores;  // (physical id, core id)
  std::string physical;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "processor") ++logical;
    if (key == "model name" && model.empty()) model = value;
    if (key == "physical id") physical = value;
    if (key == "core id") cores.insert({physical, value});
    if (key == "flags" && flags.empty()) {
      std::istringstream fs(value);
      for (std::string f; fs >> f;) flags.insert(f);
    }
  }
  if (logical == 0) logical = std::thread::hardware_concurrency();
  std::cout << "cpu: " << (model.empty() ? "unknown model" : model) << "\n";
  std::cout << "  cores: " << (cores.empty() ? logical : static_cast<int64_t>(cores.size()))
            << " physical, " << logical << " logical\n";
  std::string simd;
  for (const char* f : {"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
                        "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16"}) {
    if (flags.count(f)) simd += std::string(simd.empty() ? "" : " ") + f;
  }
  std::cout << "  simd: " << (simd.empty() ? "(none reported)" : simd) << "\n";
  // Which instructions each precision's matrix products run on (engine/cpu_matmul_paths.h).
  std::cout << "  float32 products: " << cpu::cpu_float32_gemm_description() << "\n";
  const cpu::Bf16MatmulIsa bf16 = cpu::cpu_bf16_matmul_isa();
  std::cout << "  bfloat16 products: " << cpu::bf16_matmul_isa_name(bf16)
            << (bf16 == cpu::Bf16MatmulIsa::Emulated
                    ? ": bf16 operands widened to float32, rounded once on store"
                    : ": bf16 operands, float32 accumulation, rounded once on store")
            << "\n";
  std::cout << "  float16 products: emulated (float32 GEMM on widened operands, rounded once on "
               "store)"
            << (flags.count("avx512_fp16") ? "; this CPU's avx512_fp16 is not used" : "") << "\n";
  std::cout << "  tf32 products: emulated (operands rounded to tf32, float32 GEMM)\n";
  // Every float8 value is a bfloat16 value and every product of two is exact in float32: the
  // scaled products (scaled_mm, float8 layers) take the bfloat16 path with float32 sums.
  std::cout << "  float8 products (e4m3fn, e5m2): on the bfloat16 path ("
            << cpu::bf16_matmul_isa_name(bf16)
            << "): operands widened exactly, float32 sums, scaled and rounded once\n";
}

// The few NVML entry points used, resolved from libnvidia-ml.so.1 if present.
struct Nvml {
  using Handle = void*;
  struct Utilization {
    unsigned gpu, memory;
  };
  void* lib = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*by_bus_id)(const char*, Handle*) = nullptr;
  int (*utilization)(Handle, Utilization*) = nullptr;
  int (*temperature)(Handle, int, unsigned*) = nullptr;
  int (*driver_version)(char*, unsigned) = nullptr;

  Nvml() {
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    };
    sym(init, "nvmlInit_v2");
    sym(shutdown, "nvmlShutdown");
    sym(by_bus_id, "nvmlDeviceGetHandleByPciBusId_v2");
    sym(utilization, "nvmlDeviceGetUtilizationRates");
    sym(temperature, "nvmlDeviceGetTemperature");
    sym(driver_version, "nvmlSystemGetDriverVersion");
    if (!init || !shutdown || init() != 0) {
      dlclose(lib);
      lib = nullptr;
    }
  }
  ~Nvml() {
    if (lib) {
      shutdown();
      dlclose(lib);
    }
  }
  bool ok() const { return lib != nullptr; }
};

std::string tensor_core_precisions(int major, int minor) {
  const int cc = major * 10 + minor;
  if (cc >= 80) return "float16, bfloat16, tf32";
  if (cc >= 70) return "float16 (bfloat16 and tf32 run without tensor cores)";
  return "none (no tensor cores before compute capability 7.0)";
}

}  // namespace

int devices() {
  print_cpu();
  if (!cuda::is_compiled()) {
    std::cout << "gpus: none (this build has no CUDA backend)\n";
    return kExitOk;
  }
  const int n = cuda::device_count();
  if (n == 0) {
    std::cout << "gpus: none visible (CUDA backend built; "
              << cuda::runtime_info().unavailable_reason << ")\n";
    return kExitOk;
  }
  Nvml nvml;
  if (nvml.ok() && nvml.driver_version) {
    char buf[96] = {0};
    if (nvml.driver_version(buf, sizeof buf) == 0) std::cout << "nvidia driver: " << buf << "\n";
  }
  for (int i = 0; i < n; ++i) {
    try {
      const cuda::DeviceProperties p = cuda::device_properties(i);
      std::cout << "cuda:" << i << ": " << p.name << "\n";
      std::cout << "  compute capability: " << p.major << "." << p.minor << " ("
                << p.multiprocessor_count << " SMs)\n";
      const cuda::MemoryStats stats = cuda::memory_stats(i);
      std::cout << "  memory: " << gib(p.total_memory) << " total, " << gib(p.free_memory)
                << " free, " << gib(stats.reserved_bytes) << " reserved by this process\n";
      std::cout << "  cuda driver " << version(p.driver_version) << ", runtime "
                << version(p.runtime_version) << "\n";
      std::cout << "  tensor cores: " << tensor_core_precisions(p.major, p.minor) << "\n";
      // cuBLASLt's float8 GEMM (compute capability 8.9 and 9.0) is not wired yet.
      std::cout << "  float8 products: bfloat16 tensor-core path (operands widened exactly, "
                   "float32 sums); native float8 GEMMs not used\n";
      Nvml::Handle h = nullptr;
      if (nvml.ok() && nvml.by_bus_id && !p.pci_bus_id.empty() &&
          nvml.by_bus_id(p.pci_bus_id.c_str(), &h) == 0) {
        Nvml::Utilization u{};
        unsigned temp = 0;
        if (nvml.utilization && nvml.utilization(h, &u) == 0) {
          std::cout << "  utilization: " << u.gpu << "% compute, " << u.memory << "% memory\n";
        }
        if (nvml.temperature && nvml.temperature(h, /*NVML_TEMPERATURE_GPU=*/0, &temp) == 0) {
          std::cout << "  temperature: " << temp << " C\n";
        }
      }
    } catch (const Error& e) {
      std::cout << "cuda:" << i << ": unavailable (" << e.what() << ")\n";
    }
  }
  return kExitOk;
}

}  // namespace mantissa::cli
