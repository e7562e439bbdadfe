// cuda/stream.h in a build without CUDA: every call that needs a device throws the same clear
// error as any other use of a CUDA device there (check_device_exists), so that user code compiles
// and links unchanged everywhere. is_current_stream_capturing() is false, and an unused Graph can
// be constructed and destroyed. CMakeLists.txt compiles this file only when the CUDA backend is
// off; cuda/streams.cpp and cuda/graphs.cpp define these calls otherwise.
#include "cuda/stream.h"
#include "engine/error.h"

namespace mantissa::cuda {
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

void synchronize(int device) {
  check_device_exists(Device::cuda(device));
  no_cuda("synchronize");
}

}  // namespace mantissa::cuda
