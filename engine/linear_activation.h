// The activation a linear layer may fuse into its GEMM (mt::linear_act in engine/ops.def, and
// the linear kernel tables). GeluTanh is GELU's tanh approximation, the form cuBLASLt's GELU
// epilogues compute (exact GELU is not fused anywhere).
#pragma once

#include <cstdint>

namespace mantissa {

enum class LinearActivation : uint8_t { None, Relu, GeluTanh };

}  // namespace mantissa
