// Statistics and control of the CUDA caching allocator (cuda/allocator.cpp), in the
// spirit of torch.cuda.memory_stats() / empty_cache(). Declared and defined in every build
// (through the backend hooks): without CUDA, memory_stats() throws (the build has no CUDA devices)
// and empty_cache() does nothing.
#pragma once

#include "engine/device_properties.h"  // MemoryStats

namespace mantissa::cuda {

// Stats of cuda:`device`; throws mantissa::Error if that device does not exist (or the build has
// no CUDA).
MemoryStats memory_stats(int device = 0);
// Resets the peaks to the current values.
void reset_peak_memory_stats(int device = 0);
// Returns every cached (unused) block of every device to CUDA. Live tensors are unaffected.
void empty_cache();

}  // namespace mantissa::cuda
