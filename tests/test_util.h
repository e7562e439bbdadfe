// Helpers shared by the tests: random (optionally non-contiguous) inputs, float64 references,
// and per-dtype tolerances.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <mantissa.h>

#include "engine/device_properties.h"

namespace mantissa::testing {

// Tolerances per dtype for comparing against a float64 reference.
struct Tolerance {
  double rtol, atol;
};
inline Tolerance tolerance_for(DType t) {
  switch (t) {
    case kFloat64:
      return {1e-12, 1e-12};
    case kFloat32:
      return {1.3e-6, 1e-5};
    case kFloat16:
      return {1e-3, 1e-3};
    case kBFloat16:
      return {1.6e-2, 1e-2};
    default:
      return {0, 0};
  }
}

// A random tensor of `shape`; if non_contiguous, it is a transposed/strided view of a larger one.
inline Tensor random_tensor(const Shape& shape, DType dtype, bool non_contiguous, double low = -2.0,
                            double high = 2.0, Device device = Device::cpu()) {
  if (!non_contiguous || shape.size() == 0) {
    Tensor t = rand(shape, TensorOptions(device).dtype(kFloat64)) * (high - low) + low;
    return t.to(dtype);
  }
  // Build a buffer with the last two dims swapped and every other element of dim 0 skipped.
  Shape big = shape;
  if (big.size() >= 2) std::swap(big[big.size() - 1], big[big.size() - 2]);
  big[0] *= 2;
  Tensor base = (rand(big, TensorOptions(device).dtype(kFloat64)) * (high - low) + low).to(dtype);
  Tensor v = base.slice(0, 0, std::nullopt, 2);
  if (v.dim() >= 2) v = v.transpose(-1, -2);
  EXPECT_FALSE(v.is_contiguous());
  EXPECT_EQ(v.shape(), shape);
  return v;
}

// Asserts `actual` matches `expected` (any dtypes) elementwise within rtol/atol.
inline void expect_close(const Tensor& actual, const Tensor& expected, double rtol, double atol,
                         const std::string& what = "") {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  const auto a = actual.to_vector<double>();
  const auto e = expected.to_vector<double>();
  int reported = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool both_nan = std::isnan(a[i]) && std::isnan(e[i]);
    const bool same_inf = std::isinf(a[i]) && a[i] == e[i];
    const bool ok = both_nan || same_inf || std::fabs(a[i] - e[i]) <= atol + rtol * std::fabs(e[i]);
    if (!ok && reported++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << a[i] << ", expected " << e[i]
                    << " (rtol " << rtol << ", atol " << atol << ")";
    }
  }
}

inline void expect_close(const Tensor& actual, const Tensor& expected,
                         const std::string& what = "") {
  const Tolerance tol = tolerance_for(actual.dtype());
  expect_close(actual, expected, tol.rtol, tol.atol, what);
}

// Runs `fn`, expects a mantissa::Error whose message contains every one of `parts`.
template <typename Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected mantissa::Error containing '" << (parts.empty() ? "" : parts[0])
                  << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "message '" << msg << "' lacks '" << p << "'";
  }
}

// True when MANTISSA_REQUIRE_GPU=1 (scripts/gpu/run.sh sets it where nvidia-smi sees a GPU):
// a CUDA test that finds no device then fails instead of skipping, so a CUDA runtime that cannot
// start on a GPU machine turns the run red rather than into a column of skips.
inline bool gpu_required() {
  const char* v = std::getenv("MANTISSA_REQUIRE_GPU");
  return v != nullptr && std::string(v) == "1";
}

// Printed once per process, before its first CUDA test: which GPU, driver and CUDA libraries the
// results come from, or why there is no GPU.
inline void print_cuda_banner_once() {
  static const bool printed = [] {
    std::printf("[ CUDA     ] %s\n", ::mantissa::cuda::runtime_banner().c_str());
    std::fflush(stdout);
    return true;
  }();
  (void)printed;
}

// CUDA tests start with MT_REQUIRE_GPU(): without a GPU they report as skipped, with the runtime's
// reason, or fail when MANTISSA_REQUIRE_GPU=1.
#define MT_REQUIRE_GPU()                                                                         \
  do {                                                                                           \
    ::mantissa::testing::print_cuda_banner_once();                                               \
    if (!::mantissa::cuda::is_available()) {                                                     \
      if (::mantissa::testing::gpu_required())                                                   \
        GTEST_FAIL() << "no CUDA device although MANTISSA_REQUIRE_GPU=1: "                       \
                     << ::mantissa::cuda::runtime_info().unavailable_reason;                     \
      GTEST_SKIP() << "no CUDA device: " << ::mantissa::cuda::runtime_info().unavailable_reason; \
    }                                                                                            \
  } while (0)

inline const Device kGpu = Device::cuda(0);

inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> v{kFloat32, kFloat64, kFloat16, kBFloat16,
                                    kInt32,   kInt64,   kUInt8,   kBool};
  return v;
}

inline const std::vector<DType>& floating_dtypes() {
  static const std::vector<DType> v{kFloat32, kFloat64, kFloat16, kBFloat16};
  return v;
}

// The CPU matrix products' paths (engine/cpu_matmul_paths.h), read from the fast-path counters.
struct CpuMatmulCounts {
  int64_t bf16_hardware = 0;      // ran on the bf16 instructions
  int64_t bf16_amx = 0;           // ... all on AMX tiles
  int64_t bf16_emulated = 0;      // emulated by design (no bf16 ISA, forced, or small)
  int64_t bf16_fallbacks = 0;     // refused by oneDNN
  int64_t float32_onednn = 0;     // float32 GEMMs oneDNN ran
  int64_t float32_fallbacks = 0;  // ... refused
};
inline CpuMatmulCounts cpu_matmul_counts() {
  const FastPathStats s = fast_path_stats();
  CpuMatmulCounts c;
  c.bf16_amx = s.ran("cpu.bf16_matmul", "amx");
  c.bf16_hardware = c.bf16_amx + s.ran("cpu.bf16_matmul", "avx512_bf16");
  c.bf16_emulated = s.fell_back("cpu.bf16_matmul", "emulated");
  c.bf16_fallbacks = s.refused("cpu.bf16_matmul");
  c.float32_onednn = s.ran("cpu.float32_gemm", "onednn");
  c.float32_fallbacks = s.refused("cpu.float32_gemm");
  return c;
}

}  // namespace mantissa::testing
