// Which path each fast path took, in the spirit of memory_stats(): one process-wide table of
// counters that every fast path with a fallback writes to, so that a fast path that silently
// stops running is visible, and a strict mode that turns fallbacks into errors for tests.
//
// A row is (path, outcome, what, dtype):
//   path     the fast path: "cuda.linear" (cuBLASLt epilogues, kernels/cuda/cublaslt_linear.cpp),
//            "cuda.cudnn_attention" (cuDNN's flash attention, kernels/cuda/cudnn_attention.cpp),
//            "cuda.attention" (the in-house fused attention forward), "cuda.conv" (cuDNN),
//            "cpu.bf16_matmul" / "cpu.float32_gemm" (oneDNN, kernels/cpu/gemm/)
//   outcome  ran it, or fell back to the composed path — by design (decided before the library
//            was asked, never an error) or by refusal (the library was asked and declined)
//   what     what ran ("GELU_BIAS", "fused", "cudnn_forward") or why it fell back ("NoAlgorithm",
//            "Mask", "forward"); docs/kernels.md and docs/cuda.md list each path's names
//   dtype    the operands' dtype where the path counts by dtype
//
//   reset_fast_path_stats();
//   y = linear(x, w, b);
//   EXPECT_EQ(fast_path_stats().ran("cuda.linear", "BIAS", DType::BFloat16), 1);
//   EXPECT_EQ(fast_path_stats().fell_back("cuda.linear"), 0);
//
// Declared in every build; only the kernels that have a fast path count, so without CUDA the
// cuda.* rows never appear. Counting is one uncontended lock: fast paths count per call, not per
// element.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/dtype.h"

namespace mantissa {

enum class PathOutcome : uint8_t { Ran, FellBackByDesign, Refused };

struct FastPathRow {
  std::string path;
  PathOutcome outcome = PathOutcome::Ran;
  std::string what;
  std::optional<DType> dtype;
  int64_t count = 0;
  // For a refusal: the library's own words for the last one (its status and what it was asked),
  // when the kernel gave them; "" otherwise.
  std::string message{};
};

// A snapshot of the counters since start or the last reset_fast_path_stats().
class FastPathStats {
 public:
  explicit FastPathStats(std::vector<FastPathRow> rows) : rows_(std::move(rows)) {}

  // Calls of `path` that ran `what` (with `dtype`; nullopt: every dtype).
  int64_t ran(std::string_view path, std::string_view what,
              std::optional<DType> dtype = std::nullopt) const;
  // Calls of `path` that fell back, by design or refused, for `reason` (empty: every reason).
  int64_t fell_back(std::string_view path, std::string_view reason = {}) const;
  // ... of them, the refusals only.
  int64_t refused(std::string_view path, std::string_view reason = {}) const;
  const std::vector<FastPathRow>& rows() const { return rows_; }
  // One line per row: "cuda.linear ran GELU_BIAS bfloat16: 4".
  std::string to_string() const;

 private:
  std::vector<FastPathRow> rows_;
};

FastPathStats fast_path_stats();
void reset_fast_path_stats();

// Strict fast paths: a refusal throws mantissa::Error (naming the op, shapes, dtype and why)
// instead of running the composed path, on every fast path. Starts as the environment variable
// MANTISSA_STRICT_FAST_PATHS says ("1": on), read once.
bool strict_fast_paths();
void set_strict_fast_paths(bool strict);
// Strict for one path: every fallback of `path` throws, by design too (tests that mean to run
// the fused kernel, e.g. "cuda.attention"). Off at start.
bool strict_fast_path(std::string_view path);
void set_strict_fast_path(std::string_view path, bool strict);

// Switches a fast path that has another behind it off (the next one then runs, counted as a
// fallback "Disabled" by design): "cuda.cudnn_attention" off leaves scaled_dot_product_attention
// to the in-house fused kernel, as torch.backends.cuda.enable_cudnn_sdp(False) does in PyTorch.
// Every path starts enabled.
bool fast_path_enabled(std::string_view path);
void set_fast_path_enabled(std::string_view path, bool enabled);

namespace detail {
// Called by the kernels. `path`, `what` and `reason` must be string literals (or otherwise live
// as long as the process): rows keep the pointers and find them by address first.
void count_fast_path(const char* path, const char* what, std::optional<DType> dtype = std::nullopt);
// Counts a fallback; true when the caller must throw instead (a refusal under strict fast paths,
// or any fallback of a path made strict). `message`: for a refusal, what the library said.
[[nodiscard]] bool count_fallback(const char* path, const char* reason, bool refusal,
                                  std::optional<DType> dtype = std::nullopt,
                                  std::string_view message = {});
}  // namespace detail

}  // namespace mantissa
