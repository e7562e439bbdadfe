// The parts of cuda/stream.h that need no CUDA runtime (capture(), GraphedStep,
// synchronize), and, in a build without CUDA, the rest: every call that needs a device throws the
// same clear error as any other use of a CUDA device there. Builds with CUDA define the rest in
// cuda/streams.cpp and cuda/graphs.cpp.
#include "cuda/stream.h"

#include <exception>

#include "engine/error.h"
#include "engine/graph_capture.h"

namespace mantissa::cuda {

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

namespace detail {
namespace {
thread_local bool tls_emulated_graphs = false;
}  // namespace
EmulatedGraphs::EmulatedGraphs() : outer_(tls_emulated_graphs) { tls_emulated_graphs = true; }
EmulatedGraphs::~EmulatedGraphs() { tls_emulated_graphs = outer_; }
bool graph_emulation() { return tls_emulated_graphs; }
}  // namespace detail

GraphedStep::GraphedStep(std::function<void()> step, int warmup_steps)
    : step_(std::move(step)), warmup_steps_(warmup_steps), emulated_(detail::graph_emulation()) {
  MT_CHECK(step_ != nullptr, "GraphedStep: expected a step function");
  MT_CHECK(warmup_steps >= 1, "GraphedStep: expected at least one warm-up step, got ",
           warmup_steps);
}

void GraphedStep::operator()() {
  if (emulated_) {
    if (steps_ >= warmup_steps_ && !emulated_captured_) {
      ::mantissa::detail::EmulatedCapture capture;
      step_();
      emulated_captured_ = true;
    } else {
      step_();
    }
  } else if (steps_ < warmup_steps_) {
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

}  // namespace mantissa::cuda
