// The parts of engine/cuda_stream.h that need no CUDA runtime (capture(), GraphedStep,
// synchronize), and, in a build without CUDA, the rest: every call that needs a device throws the
// same clear error as any other use of a CUDA device there. Builds with CUDA define the rest in
// cuda/streams.cpp and cuda/graphs.cpp.
#include "engine/cuda_stream.h"

#include <exception>

#include "engine/backend_hooks.h"
#include "engine/error.h"

namespace mantissa::cuda {

void synchronize(int device) {
  check_device_exists(Device::cuda(device));
  cuda_hooks()->synchronize(device);
}

void capture(Graph& graph, const std::function<void()>& fn) {
  graph.capture_begin();
  try {
    fn();
  } catch (...) {
    // End the capture (discarding it) so that the current stream and device are restored; the
    // step's own error is the one worth reporting.
    try {
      graph.reset();
    } catch (...) {
    }
    throw;
  }
  graph.capture_end();
}

GraphedStep::GraphedStep(std::function<void()> step, int warmup_steps)
    : step_(std::move(step)), warmup_steps_(warmup_steps) {
  MT_CHECK(step_ != nullptr, "GraphedStep: expected a step function");
  MT_CHECK(warmup_steps >= 1, "GraphedStep: expected at least one warm-up step, got ",
           warmup_steps);
}

void GraphedStep::operator()() {
  if (steps_ < warmup_steps_) {
    // Eagerly on the graph's stream and pool, so that what the step allocates once and keeps
    // (gradients, optimizer state) lives where the capture expects it, and the capture finds the
    // rest of its blocks already cached.
    graph_.pool_use_begin();
    struct PoolUse {
      Graph& g;
      ~PoolUse() { g.pool_use_end(); }
    } pool_use{graph_};
    const Stream side = graph_.stream();
    const Stream caller = current_stream(side.device());
    side.wait(caller);  // e.g. the caller's copies into the static inputs
    {
      StreamGuard guard(side);
      step_();
    }
    caller.wait(side);
  } else if (!graph_.captured()) {
    capture(graph_, step_);
    graph_.replay();
  } else {
    graph_.replay();
  }
  ++steps_;
}

#if !MANTISSA_CUDA
namespace {
[[noreturn]] void no_cuda(const char* what) {
  check_device_exists(Device::cuda(0));  // throws: this build has no CUDA support
  MT_THROW(what, ": CUDA is unavailable");
}
}  // namespace

int current_device() { no_cuda("current_device"); }
void set_device(int) { no_cuda("set_device"); }
Stream current_stream(int) { no_cuda("current_stream"); }
bool is_current_stream_capturing() { return false; }
Stream Stream::default_stream(int) { no_cuda("Stream::default_stream"); }
Stream Stream::create(int, int) { no_cuda("Stream::create"); }
void Stream::synchronize() const { no_cuda("Stream::synchronize"); }
bool Stream::query() const { no_cuda("Stream::query"); }
void Stream::wait(const Event&) const { no_cuda("Stream::wait"); }
void Stream::wait(const Stream&) const { no_cuda("Stream::wait"); }
StreamGuard::StreamGuard(const Stream& s) : current_(s), previous_(s) { no_cuda("StreamGuard"); }
StreamGuard::~StreamGuard() = default;

struct Event::State {};
Event::Event(bool) { no_cuda("Event"); }
void Event::record() { no_cuda("Event::record"); }
void Event::record(const Stream&) { no_cuda("Event::record"); }
bool Event::recorded() const { return false; }
bool Event::query() const { no_cuda("Event::query"); }
void Event::synchronize() const { no_cuda("Event::synchronize"); }
float Event::elapsed_ms(const Event&) const { no_cuda("Event::elapsed_ms"); }
void* Event::handle() const { return nullptr; }
int Event::device() const { return -1; }

void record_stream(const Tensor&, const Stream&) { no_cuda("record_stream"); }

struct Graph::Impl {};
Graph::Graph() = default;
Graph::~Graph() = default;
void Graph::capture_begin() { no_cuda("Graph::capture_begin"); }
void Graph::capture_end() { no_cuda("Graph::capture_end"); }
void Graph::replay() { no_cuda("Graph::replay"); }
bool Graph::captured() const { return false; }
Stream Graph::stream() const { no_cuda("Graph::stream"); }
void Graph::pool_use_begin() { no_cuda("Graph::pool_use_begin"); }
void Graph::pool_use_end() {}
void Graph::reset() {}
#endif

}  // namespace mantissa::cuda
