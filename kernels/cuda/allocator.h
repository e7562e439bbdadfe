// The CUDA caching allocator, one per device (internal to kernels/cuda; users reach its
// statistics through engine/cuda_memory.h, via the backend hooks).
#pragma once

#include "engine/allocator.h"
#include "engine/cuda_memory.h"

namespace mantissa::cuda {

// The allocator of cuda:`device`; `device` must be in [0, device_count()).
Allocator* caching_allocator(int device);
MemoryStats caching_allocator_stats(int device);
void caching_allocator_reset_peaks(int device);
void caching_allocator_empty_cache();

}  // namespace mantissa::cuda
