// The caching allocator for pinned (page-locked) host memory behind Tensor::pin_memory().
#pragma once

#include <cuda_runtime.h>

#include "engine/allocator.h"

namespace mantissa::cuda {

Allocator* pinned_allocator();
// True if `ptr` lies in a live block of the pinned allocator.
bool is_pinned_ptr(const void* ptr);
// `ptr`'s block is read or written by work queued on `stream` (an asynchronous copy): when it is
// freed, it is reused only after that work is done.
void pinned_record_stream(const void* ptr, int device, cudaStream_t stream);
void pinned_empty_cache();

}  // namespace mantissa::cuda
