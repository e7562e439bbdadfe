// CUDA graphs (cuda/stream.h). A capture records everything queued on the graph's side
// stream between capture_begin() and capture_end(); replay() launches the whole recording with
// one call. The allocator serves the capture from a private pool owned by the graph, so the
// addresses baked into the recording stay reserved for it until reset() or destruction.
#include <cuda_runtime.h>

#include <optional>

#include "cuda/allocator.h"
#include "cuda/cuda_check.h"
#include "cuda/current_stream.h"
#include "cuda/deferred_index_checks.h"
#include "cuda/device_guard.h"
#include "cuda/stream.h"
#include "engine/device.h"
#include "engine/error.h"

namespace mantissa::cuda {

struct Graph::Impl {
  int device = -1;
  std::optional<Stream> stream;  // the side stream: capture must not use the legacy stream
  mantissa::detail::PoolId pool = 0;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool capturing = false;
  // What capture_begin() replaced, restored by capture_end().
  cudaStream_t saved_stream = nullptr;
  int saved_device = 0;

  void setup() {
    if (device < 0) {
      const int d = current_device();
      stream = Stream::create(d);
      device = d;
    }
    if (pool == 0) pool = block_allocator(device).create_pool();
  }
  mantissa::detail::StreamId side() const {
    return reinterpret_cast<mantissa::detail::StreamId>(stream->handle());
  }
  void destroy_graph() {
    if (exec != nullptr) (void)cudaGraphExecDestroy(exec);
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    exec = nullptr;
    graph = nullptr;
  }
  // Ends a capture in any state and puts the caller's stream and device back.
  cudaError_t finish_capture() {
    cudaGraph_t g = nullptr;
    const cudaError_t err = cudaStreamEndCapture(static_cast<cudaStream_t>(stream->handle()), &g);
    capturing = false;
    mantissa::detail::BlockAllocator& blocks = block_allocator(device);
    blocks.end_capture();
    blocks.end_pool_use(side());
    detail::set_current_stream(device, saved_stream);
    (void)cudaSetDevice(saved_device);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      if (g != nullptr) (void)cudaGraphDestroy(g);
      return err;
    }
    graph = g;
    return cudaSuccess;
  }
};

Graph::Graph() : impl_(std::make_unique<Impl>()) {}

Graph::~Graph() {
  try {
    reset();
  } catch (...) {
    // A destructor must not throw; reset() only fails if the device already has.
  }
}

void Graph::capture_begin() {
  Impl& g = *impl_;
  MT_CHECK(!g.capturing, "Graph::capture_begin: a capture is already underway");
  MT_CHECK(g.exec == nullptr,
           "Graph::capture_begin: the graph already holds a capture; call "
           "reset() before capturing again");
  g.setup();
  // Captured index ops leave bad indices in slots made before the capture (no allocation or
  // memset may run inside it).
  detail::reserve_index_check_slots(g.device);
  g.saved_device = current_device();
  MT_CUDA_CHECK(cudaSetDevice(g.device));
  g.saved_stream = detail::current_stream(g.device);
  // Work the caller queued before the capture (e.g. filling the static inputs) comes first.
  g.stream->wait(current_stream(g.device));
  mantissa::detail::BlockAllocator& blocks = block_allocator(g.device);
  blocks.begin_pool_use(g.side(), g.pool);
  blocks.begin_capture();
  detail::set_current_stream(g.device, static_cast<cudaStream_t>(g.stream->handle()));
  const cudaError_t err = cudaStreamBeginCapture(static_cast<cudaStream_t>(g.stream->handle()),
                                                 cudaStreamCaptureModeThreadLocal);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    blocks.end_capture();
    blocks.end_pool_use(g.side());
    detail::set_current_stream(g.device, g.saved_stream);
    (void)cudaSetDevice(g.saved_device);
    MT_CUDA_CHECK(err);
  }
  g.capturing = true;
}

void Graph::capture_end() {
  Impl& g = *impl_;
  MT_CHECK(g.capturing, "Graph::capture_end: no capture is underway (call capture_begin first)");
  const cudaError_t err = g.finish_capture();
  MT_CHECK(err == cudaSuccess, "Graph::capture_end: the capture failed with ",
           cudaGetErrorName(err), " (", cudaGetErrorString(err),
           "); something in the captured region synchronised with the host, used another "
           "stream without an event, or called an API that cannot be captured");
  DeviceGuard guard(g.device);
  // A library may allocate stream-ordered memory inside the capture (cuBLAS can take its
  // workspace with cudaMallocAsync) without freeing it there; such a graph can be launched again
  // only if every launch first frees what the previous one allocated.
  const cudaError_t inst =
      cudaGraphInstantiateWithFlags(&g.exec, g.graph, cudaGraphInstantiateFlagAutoFreeOnLaunch);
  if (inst != cudaSuccess) {
    g.destroy_graph();
    MT_CUDA_CHECK(inst);
  }
}

void Graph::replay() {
  Impl& g = *impl_;
  MT_CHECK(g.exec != nullptr,
           "Graph::replay: nothing captured (call capture_begin/capture_end "
           "or cuda::capture first)");
  DeviceGuard guard(g.device);
  const Stream caller = current_stream(g.device);
  g.stream->wait(caller);
  MT_CUDA_CHECK(cudaGraphLaunch(g.exec, static_cast<cudaStream_t>(g.stream->handle())));
  caller.wait(*g.stream);
}

bool Graph::captured() const { return impl_->exec != nullptr; }

Stream Graph::stream() const {
  MT_CHECK(impl_->stream.has_value(),
           "Graph::stream: the graph has no stream before its first "
           "capture_begin() or pool_use_begin()");
  return *impl_->stream;
}

void Graph::pool_use_begin() {
  Impl& g = *impl_;
  g.setup();
  block_allocator(g.device).begin_pool_use(g.side(), g.pool);
}

void Graph::pool_use_end() {
  Impl& g = *impl_;
  if (g.device >= 0) block_allocator(g.device).end_pool_use(g.side());
}

void Graph::reset() {
  Impl& g = *impl_;
  if (g.device < 0) return;
  if (g.capturing) (void)g.finish_capture();
  g.destroy_graph();
  if (g.pool != 0) {
    // A replay may still be running: its memory goes back only once the stream is idle.
    DeviceGuard guard(g.device);
    (void)cudaStreamSynchronize(static_cast<cudaStream_t>(g.stream->handle()));
    block_allocator(g.device).release_pool(g.pool);
    g.pool = 0;
  }
}

}  // namespace mantissa::cuda
