#include "cuda/deferred_index_checks.h"

#include <cuda_runtime.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/current_stream.h"
#include "cuda/device_guard.h"
#include "engine/device.h"
#include "engine/error.h"
#include "engine/graph_capture.h"

namespace mantissa::cuda::detail {
namespace {

struct SlotInfo {
  std::string op;
  int64_t dim = 0, size = 0;
};

struct Table {
  unsigned long long* words = nullptr;  // 2 per slot, on the device
  std::vector<SlotInfo> info;           // one per slot taken
  std::atomic<int64_t> used{0};
};

std::mutex g_mutex;
Table g_tables[kMaxDevices];

Table& table(int device) {
  MT_CHECK(device >= 0 && device < kMaxDevices, "index checks: invalid CUDA device ", device);
  return g_tables[device];
}

}  // namespace

void reserve_index_check_slots(int device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Table& t = table(device);
  if (t.words != nullptr) return;
  DeviceGuard guard(device);
  void* p = nullptr;
  const size_t bytes = static_cast<size_t>(2 * kIndexCheckSlots) * sizeof(unsigned long long);
  MT_CUDA_CHECK(cudaMalloc(&p, bytes));
  MT_CUDA_CHECK(cudaMemset(p, 0, bytes));
  t.words = static_cast<unsigned long long*>(p);
  t.info.reserve(static_cast<size_t>(kIndexCheckSlots));
}

unsigned long long* index_check_slot(int device, const char* op, int64_t dim, int64_t size) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Table& t = table(device);
  if (t.words == nullptr || static_cast<int64_t>(t.info.size()) >= kIndexCheckSlots) {
    throw GraphCaptureError(::mantissa::detail::str_cat(
        op, " on cuda:", device, " checks its indices on the host unless a CUDA graph capture ",
        "gives it a slot to leave a bad index in, and ",
        t.words == nullptr ? std::string("this capture did not start with Graph::capture_begin()")
                           : ::mantissa::detail::str_cat("all ", kIndexCheckSlots,
                                                         " slots of this process are taken"),
        " (run it eagerly)"));
  }
  const int64_t k = static_cast<int64_t>(t.info.size());
  t.info.push_back({op, dim, size});
  t.used.store(k + 1, std::memory_order_release);
  return t.words + 2 * k;
}

void raise_deferred_index_errors(int device) {
  if (device < 0 || device >= kMaxDevices) return;
  Table& t = g_tables[device];
  const int64_t used = t.used.load(std::memory_order_acquire);
  if (used == 0) return;
  std::vector<unsigned long long> host(static_cast<size_t>(2 * used));
  DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  MT_CUDA_CHECK(cudaMemcpyAsync(host.data(), t.words, host.size() * sizeof(unsigned long long),
                                cudaMemcpyDeviceToHost, stream));
  MT_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (int64_t k = 0; k < used; ++k) {
    if (host[static_cast<size_t>(2 * k)] == 0) continue;
    MT_CUDA_CHECK(cudaMemsetAsync(t.words + 2 * k, 0, 2 * sizeof(unsigned long long), stream));
    MT_CUDA_CHECK(cudaStreamSynchronize(stream));
    SlotInfo info;
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      info = t.info[static_cast<size_t>(k)];
    }
    MT_THROW(info.op, ": index ", static_cast<int64_t>(host[static_cast<size_t>(2 * k + 1)]),
             " is out of bounds for dimension ", info.dim, " with size ", info.size,
             " (in a step replayed from a CUDA graph: the kernel skipped it, and this is the "
             "first host read on cuda:",
             device, " since)");
  }
}

}  // namespace mantissa::cuda::detail
