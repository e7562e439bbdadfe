// The stream CUDA work is queued on. Every kernel launch, cuBLAS/cuBLASLt/cuDNN call and
// asynchronous copy goes to current_stream(), so a StreamGuard (cuda/stream.h) moves all
// of it at once. The current stream is per thread and per device; unless a guard chose another it
// is the device's legacy default stream (nullptr).
#pragma once

#include <cuda_runtime.h>

namespace mantissa::cuda::detail {

// Per-device tables (current streams, index checks) are fixed arrays of this many devices.
inline constexpr int kMaxDevices = 64;

// The current stream of the current device / of cuda:`device`, on this thread.
cudaStream_t current_stream();
cudaStream_t current_stream(int device);
void set_current_stream(int device, cudaStream_t stream);

// True if `stream` is capturing a CUDA graph.
bool is_capturing(cudaStream_t stream);
// Throws GraphCaptureError (engine/graph_capture.h) if `stream` is capturing a CUDA graph: `what`
// would wait for the device, which a capture forbids (the wait would invalidate the capture).
// Otherwise tells a CaptureProbe, if one is watching, that `what` could not be captured.
void check_not_capturing(cudaStream_t stream, const char* what);

}  // namespace mantissa::cuda::detail
