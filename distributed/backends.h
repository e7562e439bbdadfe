// The pieces the backends share, and the factories init.cpp calls. Internal: not installed.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "distributed/init.h"
#include "distributed/process_group.h"

namespace mantissa::distributed::detail {

// A Work completed by the thread that runs the collective. Holds the tensors so their memory
// outlives the collective even when the caller drops its handles.
class ThreadWork final : public Work {
 public:
  explicit ThreadWork(std::vector<Tensor> keep_alive) : keep_alive_(std::move(keep_alive)) {}
  void wait() override;
  bool is_completed() override;
  // error empty: success.
  void finish(std::string error);

 private:
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::string error_;
  std::vector<Tensor> keep_alive_;
};

// Checks shared by every backend; `device_ok` names what the backend accepts in the message.
void check_collective_tensor(const char* op, const Tensor& t, const char* backend, bool want_cuda);
void check_same_dtype_device(const char* op, const Tensor& output, const Tensor& input);
void check_root(const char* op, int root, int size);

// `rendezvous` is File (meet in `store_path`) or Mpi (store_path unused).
std::shared_ptr<ProcessGroup> make_gloo_group(int rank, int size, Rendezvous rendezvous,
                                              const std::string& store_path,
                                              const std::string& hostname, const std::string& iface,
                                              std::chrono::milliseconds timeout);
std::shared_ptr<ProcessGroup> make_nccl_group(int rank, int size, int local_rank,
                                              Rendezvous rendezvous, const std::string& store_path,
                                              std::chrono::milliseconds timeout);

// MPI (distributed/mpi_store.cpp; builds without MPI throw). Both initialise MPI unless the
// program did, finalising it at exit then. mpi_world: MPI_COMM_WORLD's rank and size.
// mpi_broadcast_bytes: root's bytes on every rank of MPI_COMM_WORLD (collective).
std::pair<int, int> mpi_world();
std::vector<char> mpi_broadcast_bytes(std::vector<char> bytes, int root);

}  // namespace mantissa::distributed::detail
