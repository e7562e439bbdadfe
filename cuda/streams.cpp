// Streams and events: the per-thread current stream behind cuda/stream.h, and the public
// Stream / Event / StreamGuard of cuda/stream.h for builds with CUDA.
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>

#include "cuda/allocator.h"
#include "cuda/cuda_check.h"
#include "cuda/current_stream.h"
#include "cuda/deferred_index_checks.h"
#include "cuda/device_guard.h"
#include "cuda/stream.h"
#include "engine/device.h"
#include "engine/error.h"
#include "engine/graph_capture.h"

namespace mantissa::cuda {

// ---- the current stream ---------------------------------------------------------------------
namespace detail {
namespace {

thread_local cudaStream_t tls_current[kMaxDevices] = {};

}  // namespace

cudaStream_t current_stream(int device) {
  return device >= 0 && device < kMaxDevices ? tls_current[device] : nullptr;
}

cudaStream_t current_stream() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return current_stream(device);
}

void set_current_stream(int device, cudaStream_t stream) {
  MT_CHECK(device >= 0 && device < kMaxDevices, "set_current_stream: invalid device ", device);
  tls_current[device] = stream;
}

bool is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t err = cudaStreamIsCapturing(stream, &status);
  if (err == cudaErrorStreamCaptureImplicit) {
    // The legacy stream, while another stream of this device captures in a strict mode.
    (void)cudaGetLastError();
    return true;
  }
  MT_CUDA_CHECK(err);
  return status != cudaStreamCaptureStatusNone;
}

void check_not_capturing(cudaStream_t stream, const char* what) {
  int device = 0;
  MT_CUDA_CHECK(cudaGetDevice(&device));
  if (is_capturing(stream)) {
    throw GraphCaptureError(::mantissa::detail::str_cat(
        what, " on cuda:", device,
        ": cannot wait for the GPU while a CUDA graph is being captured (the wait would "
        "invalidate the capture); move host reads such as item(), to(cpu) or printing outside the "
        "captured region"));
  }
  // Not capturing: a CaptureProbe, if one is watching, learns that this would not capture.
  ::mantissa::detail::not_capturable(Device::cuda(device),
                                     ::mantissa::detail::Uncapturable::HostRead, what);
}

}  // namespace detail

// ---- devices --------------------------------------------------------------------------------
int current_device() {
  check_device_exists(Device::cuda(0));
  int device = 0;
  MT_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

void set_device(int device) {
  check_device_exists(Device::cuda(device));
  MT_CUDA_CHECK(cudaSetDevice(device));
}

Stream current_stream(int device) {
  if (device < 0) device = current_device();
  check_device_exists(Device::cuda(device));
  return Stream(device, detail::current_stream(device), nullptr);
}

void synchronize(int device) {
  check_device_exists(Device::cuda(device));
  detail::check_not_capturing(detail::current_stream(device), "synchronize");
  DeviceGuard guard(device);
  MT_CUDA_CHECK(cudaDeviceSynchronize());
  detail::raise_deferred_index_errors(device);
}

bool is_current_stream_capturing() {
  if (!is_available()) return false;
  return detail::is_capturing(detail::current_stream());
}

// ---- Stream ---------------------------------------------------------------------------------
Stream Stream::default_stream(int device) {
  check_device_exists(Device::cuda(device));
  return Stream(device, nullptr, nullptr);
}

Stream Stream::create(int device, int priority) {
  check_device_exists(Device::cuda(device));
  DeviceGuard guard(device);
  int least = 0, greatest = 0;  // CUDA: numerically lower is higher priority
  MT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  priority = std::clamp(priority, greatest, least);
  cudaStream_t stream = nullptr;
  MT_CUDA_CHECK(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, priority));
  // Synchronised before it is destroyed: the caching allocator may hand this stream's cached
  // blocks to a later stream that gets the same handle.
  std::shared_ptr<void> owner(static_cast<void*>(stream), [device](void* p) {
    int previous = 0;
    if (cudaGetDevice(&previous) != cudaSuccess) return;
    (void)cudaSetDevice(device);
    (void)cudaStreamSynchronize(static_cast<cudaStream_t>(p));
    (void)cudaStreamDestroy(static_cast<cudaStream_t>(p));
    (void)cudaSetDevice(previous);
    (void)cudaGetLastError();
  });
  return Stream(device, stream, std::move(owner));
}

void Stream::synchronize() const {
  const auto stream = static_cast<cudaStream_t>(handle_);
  detail::check_not_capturing(stream, "Stream::synchronize");
  DeviceGuard guard(device_);
  MT_CUDA_CHECK(cudaStreamSynchronize(stream));
}

bool Stream::query() const {
  DeviceGuard guard(device_);
  const cudaError_t err = cudaStreamQuery(static_cast<cudaStream_t>(handle_));
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  MT_CUDA_CHECK(err);
  return true;
}

void Stream::wait(const Event& event) const {
  if (!event.recorded()) return;  // as in PyTorch: nothing to wait for
  DeviceGuard guard(device_);
  MT_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(handle_),
                                    static_cast<cudaEvent_t>(event.handle()), 0));
}

void Stream::wait(const Stream& other) const {
  if (other == *this) return;
  Event event;
  event.record(other);
  wait(event);
}

// ---- StreamGuard ----------------------------------------------------------------------------
StreamGuard::StreamGuard(const Stream& stream)
    : current_(stream),
      previous_(current_stream(stream.device())),
      previous_device_(current_device()) {
  MT_CUDA_CHECK(cudaSetDevice(stream.device()));
  detail::set_current_stream(stream.device(), static_cast<cudaStream_t>(stream.handle()));
}

StreamGuard::~StreamGuard() {
  detail::set_current_stream(previous_.device(), static_cast<cudaStream_t>(previous_.handle()));
  (void)cudaSetDevice(previous_device_);
}

// ---- Event ----------------------------------------------------------------------------------
struct Event::State {
  cudaEvent_t event = nullptr;
  int device = -1;
  bool timing = false;
  ~State() {
    if (event != nullptr) (void)cudaEventDestroy(event);
  }
};

Event::Event(bool enable_timing) : state_(std::make_shared<State>()) {
  state_->timing = enable_timing;
}

void Event::record() { record(current_stream()); }

void Event::record(const Stream& stream) {
  DeviceGuard guard(stream.device());
  if (state_->event == nullptr) {
    MT_CUDA_CHECK(cudaEventCreateWithFlags(
        &state_->event, state_->timing ? cudaEventDefault : cudaEventDisableTiming));
    state_->device = stream.device();
  }
  MT_CHECK(state_->device == stream.device(),
           "Event::record: the event belongs to cuda:", state_->device,
           " and cannot be recorded on a stream of cuda:", stream.device());
  MT_CUDA_CHECK(cudaEventRecord(state_->event, static_cast<cudaStream_t>(stream.handle())));
}

bool Event::recorded() const { return state_->event != nullptr; }
void* Event::handle() const { return state_->event; }
int Event::device() const { return state_->device; }

bool Event::query() const {
  if (state_->event == nullptr) return true;
  const cudaError_t err = cudaEventQuery(state_->event);
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  MT_CUDA_CHECK(err);
  return true;
}

void Event::synchronize() const {
  if (state_->event == nullptr) return;
  MT_CUDA_CHECK(cudaEventSynchronize(state_->event));
}

float Event::elapsed_ms(const Event& end) const {
  MT_CHECK(recorded() && end.recorded(), "Event::elapsed_ms: both events must be recorded first");
  MT_CHECK(state_->timing && end.state_->timing,
           "Event::elapsed_ms: both events must be created with enable_timing=true");
  float ms = 0.0f;
  MT_CUDA_CHECK(cudaEventElapsedTime(&ms, state_->event, end.state_->event));
  return ms;
}

// ---- allocator interaction ------------------------------------------------------------------
void record_stream(const Tensor& t, const Stream& stream) {
  MT_CHECK(t.defined() && t.is_cuda(), "record_stream: expected a CUDA tensor, got ",
           t.defined() ? t.device().str() : std::string("an undefined tensor"));
  MT_CHECK(t.device().index() == stream.device(), "record_stream: tensor on ", t.device(),
           " but stream on cuda:", stream.device());
  if (t.storage()->allocator != caching_allocator(stream.device())) return;  // not ours
  block_allocator(stream.device())
      .record_stream(t.storage()->data,
                     reinterpret_cast<mantissa::detail::StreamId>(stream.handle()));
}

}  // namespace mantissa::cuda
