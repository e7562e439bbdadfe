// OverflowMonitor: opt-in diagnostics of overflow and underflow over a module tree. While it
// lives, it records for every submodule's forward output and for the gradient flowing back into
// that output: max |x|, inf and NaN counts, and the fraction of non-zero values that would
// flush to zero in float16 (|x| <= 2^-25). It names the first module, in execution order, where
// a non-finite value appeared. Reading values synchronises with the device: it is a debugging
// aid, off by default.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "nn/module.h"

namespace mantissa::amp {

struct TensorStats {
  double max_abs = 0.0;
  int64_t num_inf = 0;
  int64_t num_nan = 0;
  int64_t num_nonzero = 0;
  double fp16_underflow_fraction = 0.0;  // of the non-zero values
  bool finite() const { return num_inf == 0 && num_nan == 0; }
};

// Computes the statistics of one tensor (any device, any floating dtype).
TensorStats tensor_stats(const Tensor& t);

struct ModuleStats {
  std::string name;  // dotted path from the root ("net1", "encoder.0")
  std::string type;  // "Linear", ...
  TensorStats forward;
  TensorStats grad;
  int64_t forward_calls = 0;
  int64_t grad_calls = 0;
};

class OverflowMonitor {
 public:
  // Attaches to `root` and all its descendants (root itself excluded when unnamed).
  explicit OverflowMonitor(nn::Module& root);
  ~OverflowMonitor();
  OverflowMonitor(const OverflowMonitor&) = delete;
  OverflowMonitor& operator=(const OverflowMonitor&) = delete;

  // Accumulated over every call since construction or reset(): max of max_abs, sums of counts.
  const std::vector<ModuleStats>& stats() const { return stats_; }
  const ModuleStats* find(const std::string& name) const;
  // "net2 (forward)" or "net1 (gradient)": where the first non-finite value was seen.
  std::optional<std::string> first_nonfinite() const { return first_nonfinite_; }
  // Logs one line per module through spdlog (info; warn for modules with non-finite values).
  void report() const;
  void reset();

 private:
  void record(size_t index, const Tensor& value, bool is_grad);

  std::vector<std::pair<std::shared_ptr<nn::Module>, int>> attached_;  // module, hook handle
  std::vector<ModuleStats> stats_;
  std::optional<std::string> first_nonfinite_;
};

}  // namespace mantissa::amp
