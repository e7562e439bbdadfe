// PyTorch's adaptive pooling windows: output o of n_out over n_in inputs covers
// [floor(o * n_in / n_out), ceil((o + 1) * n_in / n_out)). Shared by the CPU and CUDA kernels.
#pragma once

#include <cstdint>

#include "engine/macros.h"

namespace mantissa {

MT_HOST_DEVICE inline int64_t adaptive_start(int64_t o, int64_t n_in, int64_t n_out) {
  return (o * n_in) / n_out;
}
MT_HOST_DEVICE inline int64_t adaptive_end(int64_t o, int64_t n_in, int64_t n_out) {
  return ((o + 1) * n_in + n_out - 1) / n_out;
}

}  // namespace mantissa
