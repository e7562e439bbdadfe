#include "runner/training/peak_flops.h"

#include "engine/device_properties.h"
#include "engine/error.h"

namespace mantissa::runner {

namespace {

struct PeakRow {
  const char* name_part;    // matched as a substring of the CUDA device name
  double fp32, tf32, half;  // TFLOP/s; half: float16 and bfloat16 tensor cores, float32 accumulate
};

// H200 before H100 and A100 before A10: the first row whose part is in the name wins.
constexpr PeakRow kPeaks[] = {
    {"H200", 67.0, 494.7, 989.4}, {"H100 PCIe", 51.2, 378.0, 756.0}, {"H100", 67.0, 494.7, 989.4},
    {"A100", 19.5, 156.0, 312.0}, {"L40S", 91.6, 183.0, 362.1},      {"A10G", 31.2, 62.5, 125.0},
    {"L4", 30.3, 60.0, 121.0},    {"V100", 15.7, 15.7, 125.0},
};

}  // namespace

std::optional<double> gpu_peak_flops(std::string_view device_name, amp::Precision precision) {
  for (const PeakRow& row : kPeaks) {
    if (device_name.find(row.name_part) == std::string_view::npos) continue;
    const amp::Precision::Kind k = precision.kind();
    const double tflops = k == amp::Precision::Float16 || k == amp::Precision::BFloat16 ? row.half
                          : k == amp::Precision::TF32                                   ? row.tf32
                                                                                        : row.fp32;
    return tflops * 1e12;
  }
  return std::nullopt;
}

std::optional<double> device_peak_flops(Device device, amp::Precision precision) {
  if (!device.is_cuda()) return std::nullopt;
  try {
    return gpu_peak_flops(cuda::device_properties(device.index()).name, precision);
  } catch (const Error&) {
    return std::nullopt;  // no CUDA in this build: no peak to divide by
  }
}

}  // namespace mantissa::runner
