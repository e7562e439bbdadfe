// The stream CUDA work is queued on. Every kernel launch, cuBLAS/cuBLASLt/cuDNN call and
// asynchronous copy goes to current_stream(), so a StreamGuard moves all of it at once.
#pragma once

#include <cuda_runtime.h>

namespace mantissa::cuda::detail {

// The current stream of the current device (the device's default stream unless a StreamGuard
// chose another on this thread).
inline cudaStream_t current_stream() { return nullptr; }

}  // namespace mantissa::cuda::detail
