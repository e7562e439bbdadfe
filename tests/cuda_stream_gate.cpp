// The CUDA side of the tests' HeldStream (cuda_test_util.h): a host function on the stream that
// waits for the gate. It lives with the tests, not the library: only tests need to stall a stream.
#include <chrono>
#include <string>
#include <thread>

#include "cuda_test_util.h"
#include "engine/error.h"

#if MANTISSA_CUDA
#include <cuda_runtime.h>
#endif

namespace mantissa::testing {

#if MANTISSA_CUDA
namespace {

// Runs on the CUDA driver's callback thread and must not call CUDA.
void CUDART_CB wait_for_gate(void* arg) {
  auto* gate = static_cast<StreamGate*>(arg);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(gate->timeout_ms);
  while (!gate->release.load()) {
    if (std::chrono::steady_clock::now() > deadline) {
      gate->timed_out = true;
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

}  // namespace

void hold_stream(const cuda::Stream& stream, StreamGate* gate) {
  // The default stream's handle is null: the legacy stream of the current device, so that device
  // is made current for the call.
  const int previous = cuda::current_device();
  cuda::set_device(stream.device());
  const cudaError_t err =
      cudaLaunchHostFunc(static_cast<cudaStream_t>(stream.handle()), &wait_for_gate, gate);
  cuda::set_device(previous);
  MT_CHECK(err == cudaSuccess, "hold_stream: cudaLaunchHostFunc failed: ", cudaGetErrorString(err));
}
#else
void hold_stream(const cuda::Stream&, StreamGate*) {
  MT_THROW("hold_stream: this build has no CUDA");
}
#endif

}  // namespace mantissa::testing
