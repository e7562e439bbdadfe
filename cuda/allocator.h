// The CUDA caching allocator, one per device (internal to cuda/ and kernels/cuda; users reach its
// statistics through cuda/memory.h via the backend hooks, and its stream and graph-pool
// features through cuda/stream.h).
#pragma once

#include "cuda/block_allocator.h"
#include "cuda/memory.h"
#include "engine/allocator.h"

namespace mantissa::cuda {

// The allocator of cuda:`device`; `device` must be in [0, device_count()). It allocates for the
// device's current stream (cuda/stream.h).
Allocator* caching_allocator(int device);
// Its block bookkeeping: stats, record_stream, graph pools.
mantissa::detail::BlockAllocator& block_allocator(int device);
void caching_allocator_empty_cache();
// cudaMalloc on the current device, allowed inside a graph capture on this thread (the memory is
// never freed during the capture); nullptr when the device is out of memory.
void* raw_cuda_malloc(size_t nbytes);

}  // namespace mantissa::cuda
