// Autocast: inside a scope, ops on one device type run in a chosen precision — matmuls in
// float16/bfloat16 (or TF32), numerically sensitive ops in float32 — following PyTorch's
// torch.autocast lists (each op's policy is in the op list, engine/ops.def; the casts happen at
// the op boundary, autograd/autocast_wrapper.h). Scopes are thread-local and nestable, and
// restore the previous state on exit, including exit by exception.
#pragma once

#include <optional>
#include <string_view>

#include "autograd/op_index.h"
#include "engine/device.h"
#include "engine/dtype.h"
#include "engine/precision.h"

namespace mantissa::amp {

class Precision {
 public:
  enum Kind : uint8_t { Float32, TF32, Float16, BFloat16 };
  constexpr Precision(Kind k) : kind_(k) {}  // NOLINT
  Precision(DType dtype);                    // NOLINT: float32, float16 or bfloat16
  // "float32" (also "fp32", "off"), "tf32", "float16" ("fp16", "half"), "bfloat16" ("bf16").
  static Precision parse(std::string_view name);
  Kind kind() const { return kind_; }
  std::string_view name() const;
  // The dtype tensors are cast to (float32 for float32 and tf32).
  DType dtype() const;
  friend constexpr bool operator==(Precision a, Precision b) { return a.kind_ == b.kind_; }

 private:
  Kind kind_;
};
inline constexpr Precision kTF32{Precision::TF32};

// PyTorch's defaults: float16 on CUDA, bfloat16 on the CPU.
Precision default_precision(DeviceType device_type);

class autocast {
 public:
  explicit autocast(DeviceType device_type, std::optional<Precision> precision = std::nullopt,
                    bool enabled = true);
  explicit autocast(Device device, std::optional<Precision> precision = std::nullopt,
                    bool enabled = true)
      : autocast(device.type(), precision, enabled) {}
  ~autocast();
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

 private:
  DeviceType device_type_;
  autocast_state::DeviceState saved_;
};

bool is_autocast_enabled(DeviceType device_type);
// The precision in force for `device_type` on this thread (float32 when no scope is enabled).
Precision current_precision(DeviceType device_type);
// Drops cached casts of weights (done automatically when the outermost scope exits).
void clear_autocast_cache();
// Number of cached weight casts (for tests and diagnostics).
size_t autocast_cache_size();

// How each op treats its inputs under autocast: its policy in the op list (engine/ops.def).
using ::mantissa::cast_policy;
using ::mantissa::CastPolicy;

}  // namespace mantissa::amp
