// CUDA streams, events and graphs, in the spirit of torch.cuda.Stream / Event / CUDAGraph.
// See docs/cuda.md for how they interact with the caching allocator.
//
// Declared in every build so that user code compiles unchanged everywhere: in a build without
// CUDA, or with no visible GPU, every call that needs a device throws mantissa::Error saying which
// is missing (the message of check_device_exists). is_current_stream_capturing() is then false,
// and an unused Graph can be constructed and destroyed.
//
// Every kernel, cuBLAS/cuDNN call and copy is queued on the *current stream* of its device: the
// device's default stream unless a StreamGuard on this thread chose another.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "engine/tensor.h"

namespace mantissa::cuda {

class Event;

class Stream {
 public:
  // The legacy default stream of cuda:`device` (PyTorch's default stream).
  static Stream default_stream(int device = 0);
  // A new stream on cuda:`device`, destroyed with its last copy. It does not synchronise with
  // the default stream (cudaStreamNonBlocking): order work between streams with events.
  // `priority`: 0 is the default; negative numbers are higher priorities (clamped to the
  // device's range).
  static Stream create(int device = 0, int priority = 0);

  int device() const { return device_; }
  void* handle() const { return handle_; }  // the cudaStream_t (nullptr: the default stream)
  bool is_default() const { return handle_ == nullptr; }

  // Blocks the host until all work queued on this stream so far is done.
  void synchronize() const;
  // True if all work queued so far is done.
  bool query() const;
  // Work queued on this stream from now on waits for `event` (no host sync).
  void wait(const Event& event) const;
  // Work queued on this stream from now on waits for the work queued on `other` so far.
  void wait(const Stream& other) const;

  friend bool operator==(const Stream& a, const Stream& b) {
    return a.device_ == b.device_ && a.handle_ == b.handle_;
  }

 private:
  Stream(int device, void* handle, std::shared_ptr<void> owner)
      : device_(device), handle_(handle), owner_(std::move(owner)) {}
  friend Stream current_stream(int device);
  friend class Graph;

  int device_ = 0;
  void* handle_ = nullptr;
  std::shared_ptr<void> owner_;  // destroys a created stream
};

// The current device of this thread (cudaGetDevice), and setting it.
int current_device();
void set_device(int device);
// The current stream of cuda:`device` on this thread; -1: the current device.
Stream current_stream(int device = -1);
// Blocks until all work on cuda:`device` (every stream) is done.
void synchronize(int device = 0);

// Makes `stream` the current stream of its device, and that device the current device, on this
// thread until the guard is destroyed; both are restored then.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream current_;  // kept alive while it is current
  Stream previous_;
  [[maybe_unused]] int previous_device_ = 0;  // used by the CUDA build only
};

// A CUDA event. Copies share one event. Created on first record().
class Event {
 public:
  explicit Event(bool enable_timing = false);
  // Records on the current stream of the current device / on `stream`.
  void record();
  void record(const Stream& stream);
  bool recorded() const;
  // True once the work before the record is done (true if never recorded).
  bool query() const;
  void synchronize() const;
  // Milliseconds between this event and `end`; both recorded with enable_timing and completed.
  float elapsed_ms(const Event& end) const;

  void* handle() const;  // the cudaEvent_t, or nullptr before the first record()
  int device() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

// Tells the caching allocator that `t`'s memory is used on `stream` too (torch's
// Tensor.record_stream): when `t` is freed its block is reused only after `stream` has finished
// the work queued on it so far. Needed when a tensor allocated on one stream is used on another.
void record_stream(const Tensor& t, const Stream& stream);

// True if the current stream of the current device is capturing a CUDA graph.
bool is_current_stream_capturing();

// A captured CUDA graph: capture_begin(), the work to record, capture_end(), then replay() as
// often as wanted. The capture runs on the graph's own side stream (made current in between),
// and its allocations come from a private memory pool that lives as long as the graph, so every
// replay reads and writes the same addresses. Nothing may synchronise with the host during a
// capture (item(), to(cpu), printing a CUDA tensor): that throws.
class Graph {
 public:
  Graph();
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // On the current device. The side stream first waits for the current stream.
  void capture_begin();
  void capture_end();
  // Launches the graph on its side stream, ordered after the current stream's work so far;
  // the current stream then waits for the replay.
  void replay();
  bool captured() const;
  // The stream the graph captures on and replays on (created by the first capture or warm-up).
  Stream stream() const;
  // Allocations on the graph's stream come from its private pool until the matching end. Used
  // for warm-up runs before the capture, so that the capture finds cached blocks and needs no
  // cudaMalloc.
  void pool_use_begin();
  void pool_use_end();
  // Frees the captured graph and its memory pool; the Graph can capture again.
  void reset();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Captures `fn` into `graph` (capture_begin, fn, capture_end); if fn throws, the capture is
// ended and discarded and the exception passed on.
void capture(Graph& graph, const std::function<void()>& fn);

// A whole training step (forward, loss, backward, scaler, optimizer) as one CUDA graph. Each call
// performs one step: the first `warmup_steps` calls run `step` eagerly on the graph's side
// stream (allocating from its pool, and letting lazily created state such as gradients and
// optimizer moments appear), the next one captures it and replays it, and later calls replay.
// `step` must read its inputs from static tensors that the caller refills (copy_) before each
// call, and results it wants must be written to tensors that live across steps.
//
// With graph emulation on (detail::EmulatedGraphs, a test seam), a GraphedStep made then needs no
// GPU: warm-ups run `step` eagerly, the "capture" runs it under detail::EmulatedCapture (where
// whatever a real capture would refuse throws GraphCaptureError, engine/graph_capture.h) and
// replays run it eagerly again; the results are the eager ones.
class GraphedStep {
 public:
  explicit GraphedStep(std::function<void()> step, int warmup_steps = 3);
  void operator()();
  bool captured() const { return emulated_ ? emulated_captured_ : graph_.captured(); }
  // Whether the next call runs the step eagerly as a warm-up.
  bool warming_up() const { return steps_ < warmup_steps_; }
  int64_t steps() const { return steps_; }
  Graph& graph() { return graph_; }

 private:
  std::function<void()> step_;
  int warmup_steps_;
  int64_t steps_ = 0;
  Graph graph_;
  bool emulated_ = false, emulated_captured_ = false;
};

namespace detail {
// While alive, GraphedSteps made on this thread emulate their graph on any device (see above),
// and graph_emulation() is true. For tests of code that graphs steps, on machines without a GPU.
class EmulatedGraphs {
 public:
  EmulatedGraphs();
  ~EmulatedGraphs();
  EmulatedGraphs(const EmulatedGraphs&) = delete;
  EmulatedGraphs& operator=(const EmulatedGraphs&) = delete;

 private:
  bool outer_;
};
bool graph_emulation();
}  // namespace detail

}  // namespace mantissa::cuda
