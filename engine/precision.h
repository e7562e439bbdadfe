// Precision state that kernels consult: the float32 matmul precision (global, PyTorch's
// torch.set_float32_matmul_precision) and the thread-local autocast state that amp/ manages.
// It lives in the engine so kernels and ops can read it without depending on amp/.
#pragma once

#include <cstdint>
#include <string_view>

#include "engine/device.h"
#include "engine/dtype.h"

namespace mantissa {

// "highest": float32 matmuls in full float32 (the default). "high": TF32 (10-bit mantissa
// operands, float32 accumulation) allowed — tensor-op math on CUDA, emulated on the CPU by
// rounding operands to nearest even. "medium" is accepted as an alias of "high".
enum class MatmulPrecision : uint8_t { Highest, High };
void set_float32_matmul_precision(std::string_view precision);
void set_float32_matmul_precision(MatmulPrecision precision);
MatmulPrecision get_float32_matmul_precision();
// What float32 matmuls on `device` use now on this thread: the global setting, or TF32 inside an
// autocast scope for that device type whose precision is tf32.
MatmulPrecision effective_matmul_precision(DeviceType device);

namespace autocast_state {

// Per-thread, per-device-type autocast state. `dtype` is float16 or bfloat16 for a cast scope;
// `tf32` marks a scope whose precision is tf32 (float32 matmuls use TF32, nothing is cast).
struct DeviceState {
  bool enabled = false;
  bool tf32 = false;
  DType dtype = DType::Float16;
};

struct ThreadState {
  DeviceState device[kNumDeviceTypes];
  int depth = 0;          // nesting depth of autocast scopes (enabled or not)
  bool any_cast = false;  // some device type has a float16/bfloat16 scope enabled
};

ThreadState& current();

inline bool any_cast_enabled() { return current().any_cast; }

}  // namespace autocast_state
}  // namespace mantissa
