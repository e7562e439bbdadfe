// The CUDA caching allocator, one per device (internal to kernels/cuda; users see memory.h).
#pragma once

#include "engine/allocator.h"

namespace mantissa::cuda {

// The allocator of cuda:`device`; `device` must be in [0, device_count()).
Allocator* caching_allocator(int device);

}  // namespace mantissa::cuda
