// The NCCL process group: CUDA tensors, one GPU per rank (cuda:local_rank), NCCL's collectives.
//
// Ranks meet through the same file store as Gloo's: rank 0 publishes NCCL's unique id there.
// Collectives are queued on the current stream of the tensor's device in call order; their Work
// records an event after them. wait() blocks the host until the event completes, polling
// ncclCommGetAsyncError so that a failed or stuck communicator becomes an error: past the
// group's timeout the communicator is aborted (ncclCommAbort) and every later collective throws.
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "cuda/cuda_check.h"
#include "cuda/stream.h"
#include "distributed/backends.h"
#include "distributed/rendezvous_store.h"
#include "engine/error.h"
#include "engine/factory.h"

namespace mantissa::cuda::detail {
void throw_nccl_error(int status, const char* call, const char* file, int line) {
  MT_THROW("NCCL error: ", ncclGetErrorString(static_cast<ncclResult_t>(status)), " (", status,
           ") in ", call, " at ", file, ":", line);
}
}  // namespace mantissa::cuda::detail

namespace mantissa::distributed::detail {
namespace {

constexpr const char* kUniqueIdKey = "mantissa_nccl_unique_id";

ncclDataType_t nccl_dtype(const char* op, const Tensor& t) {
  switch (t.dtype()) {
    case DType::Float32:
      return ncclFloat32;
    case DType::Float64:
      return ncclFloat64;
    case DType::Float16:
      return ncclFloat16;
    case DType::BFloat16:
      return ncclBfloat16;
    default:
      break;
  }
  MT_THROW("op ", op, " not implemented for dtype ", t.dtype(), " on device ", t.device());
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Avg:
      return ncclAvg;
    case ReduceOp::Max:
      return ncclMax;
  }
  return ncclSum;
}

// What the group and its Works share: the communicator and whether it has been aborted.
struct Comm {
  ncclComm_t comm = nullptr;
  int rank = 0;
  int size = 0;
  std::chrono::milliseconds timeout{0};
  std::atomic<bool> aborted{false};
  std::string first_error;  // set once, before `aborted`
  std::mutex mutex;
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<Comm> comm, const char* op, cudaEvent_t event,
           std::vector<Tensor> keep_alive)
      : comm_(std::move(comm)),
        op_(op),
        event_(event),
        keep_alive_(std::move(keep_alive)),
        deadline_(std::chrono::steady_clock::now() + comm_->timeout) {}
  ~NcclWork() override { cudaEventDestroy(event_); }

  bool is_completed() override { return cudaEventQuery(event_) == cudaSuccess; }

  void wait() override {
    const auto deadline = std::chrono::steady_clock::now() + comm_->timeout;
    while (!check(deadline)) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }

  // The deadline counts from the enqueue: the stream may still be busy with earlier work, but a
  // collective that has not finished a whole timeout after it was queued is taken as stuck.
  bool poll() override { return check(deadline_); }

 private:
  // One look: true when done; fails on an error or past `deadline`.
  bool check(std::chrono::steady_clock::time_point deadline) {
    if (comm_->aborted.load()) fail("the process group failed earlier: " + comm_->first_error);
    const cudaError_t state = cudaEventQuery(event_);
    if (state == cudaSuccess) return true;
    if (state != cudaErrorNotReady)
      abort_and_fail(std::string("CUDA error ") + cudaGetErrorString(state));
    ncclResult_t async_error = ncclSuccess;
    if (const ncclResult_t queried = ncclCommGetAsyncError(comm_->comm, &async_error);
        queried != ncclSuccess)
      async_error = queried;  // the query itself failed: as fatal as the error it looks for
    if (async_error != ncclSuccess && async_error != ncclInProgress)
      abort_and_fail(std::string("nccl: ") + ncclGetErrorString(async_error));
    if (std::chrono::steady_clock::now() > deadline)
      abort_and_fail("timed out after " + std::to_string(comm_->timeout.count()) + " ms");
    return false;
  }

  [[noreturn]] void fail(const std::string& why) const {
    MT_THROW(op_, " failed on rank ", comm_->rank, " of ", comm_->size, ": ", why);
  }
  [[noreturn]] void abort_and_fail(const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(comm_->mutex);
      if (!comm_->aborted.load()) {
        comm_->first_error =
            std::string(op_) + " on rank " + std::to_string(comm_->rank) + ": " + why;
        ncclCommAbort(comm_->comm);
        comm_->aborted.store(true);
      }
    }
    fail(why);
  }

  std::shared_ptr<Comm> comm_;
  const char* op_;
  cudaEvent_t event_;
  std::vector<Tensor> keep_alive_;
  std::chrono::steady_clock::time_point deadline_;
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(int rank, int size, int local_rank, Rendezvous rendezvous,
                   const std::string& store_path, std::chrono::milliseconds timeout)
      : ProcessGroup(rank, size, timeout), device_(local_rank), comm_(std::make_shared<Comm>()) {
    comm_->rank = rank;
    comm_->size = size;
    comm_->timeout = timeout;
    ncclUniqueId id;
    std::unique_ptr<detail::RendezvousStore> store;
    if (rendezvous == Rendezvous::Mpi) {
      std::vector<char> bytes;
      if (rank == 0) {
        MT_NCCL_CHECK(ncclGetUniqueId(&id));
        bytes.assign(id.internal, id.internal + sizeof(id.internal));
      }
      try {
        bytes = mpi_broadcast_bytes(std::move(bytes), 0);
      } catch (const std::exception& e) {
        MT_THROW("init_process_group (nccl): rank ", rank, " of ", size,
                 " could not meet the other ranks through MPI: ", e.what());
      }
      MT_CHECK(bytes.size() == sizeof(id.internal), "MPI rendezvous: a malformed NCCL id");
      std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
    } else {
      try {
        store = detail::open_rendezvous_store(store_path, timeout);
        if (rank == 0) {
          MT_NCCL_CHECK(ncclGetUniqueId(&id));
          store->set(kUniqueIdKey,
                     std::vector<char>(id.internal, id.internal + sizeof(id.internal)));
        } else {
          store->wait({kUniqueIdKey}, timeout);
          const std::vector<char> bytes = store->get(kUniqueIdKey);
          MT_CHECK(bytes.size() == sizeof(id.internal), "the store holds a malformed NCCL id");
          std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
        }
      } catch (const std::exception& e) {
        if (store) store->remove_own_keys();
        MT_THROW("init_process_group (nccl): rank ", rank, " of ", size,
                 " could not meet the other ranks through ",
                 store ? store->describe() : "the store '" + store_path + "'", " within ",
                 timeout.count(), " ms: ", e.what());
      }
    }
    cuda::set_device(device_);
    MT_NCCL_CHECK(ncclCommInitRank(&comm_->comm, size, id, rank));
    // Every rank has read the id once the communicator exists; a later job in the same store
    // must not find it.
    if (store) store->remove_own_keys();
  }

  ~NcclProcessGroup() override {
    if (!comm_->aborted.load()) ncclCommDestroy(comm_->comm);
  }

  std::string backend() const override { return "nccl"; }
  Device device() const override { return Device::cuda(device_); }

  std::shared_ptr<Work> allreduce(const Tensor& tensor, ReduceOp op) override {
    check("allreduce", tensor);
    return launch("allreduce", {tensor}, [&](cudaStream_t s) {
      MT_NCCL_CHECK(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(),
                                  nccl_dtype("allreduce", tensor), nccl_op(op), comm_->comm, s));
    });
  }

  std::shared_ptr<Work> broadcast(const Tensor& tensor, int root) override {
    check("broadcast", tensor);
    check_root("broadcast", root, size());
    return launch("broadcast", {tensor}, [&](cudaStream_t s) {
      MT_NCCL_CHECK(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(),
                                  nccl_dtype("broadcast", tensor), root, comm_->comm, s));
    });
  }

  std::shared_ptr<Work> allgather(const Tensor& output, const Tensor& input) override {
    check("allgather", input);
    check("allgather", output);
    check_same_dtype_device("allgather", output, input);
    MT_CHECK(output.numel() == input.numel() * size(), "allgather: expected an output of ", size(),
             " x ", input.numel(), " elements for input shape ", input.shape(), ", got shape ",
             output.shape());
    return launch("allgather", {output, input}, [&](cudaStream_t s) {
      MT_NCCL_CHECK(ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(),
                                  nccl_dtype("allgather", input), comm_->comm, s));
    });
  }

  std::shared_ptr<Work> reduce_scatter(const Tensor& output, const Tensor& input,
                                       ReduceOp op) override {
    check("reduce_scatter", input);
    check("reduce_scatter", output);
    check_same_dtype_device("reduce_scatter", output, input);
    MT_CHECK(input.numel() == output.numel() * size(), "reduce_scatter: expected an input of ",
             size(), " x ", output.numel(), " elements for output shape ", output.shape(),
             ", got shape ", input.shape());
    return launch("reduce_scatter", {output, input}, [&](cudaStream_t s) {
      MT_NCCL_CHECK(ncclReduceScatter(input.data_ptr(), output.data_ptr(), output.numel(),
                                      nccl_dtype("reduce_scatter", input), nccl_op(op), comm_->comm,
                                      s));
    });
  }

  // NCCL has no barrier: an allreduce of one element that every rank must join.
  std::shared_ptr<Work> barrier() override {
    if (!barrier_token_.defined()) barrier_token_ = zeros({1}, Device::cuda(device_));
    const Tensor token = barrier_token_;
    return launch("barrier", {token}, [&](cudaStream_t s) {
      MT_NCCL_CHECK(ncclAllReduce(token.data_ptr(), token.data_ptr(), 1, ncclFloat32, ncclSum,
                                  comm_->comm, s));
    });
  }

 private:
  void check(const char* op, const Tensor& t) const {
    check_collective_tensor(op, t, "nccl", true);
    MT_CHECK(t.device().index() == device_, op,
             ": this rank's NCCL communicator is on cuda:", device_, ", got a tensor on ",
             t.device());
  }

  template <typename Enqueue>
  std::shared_ptr<Work> launch(const char* op, std::vector<Tensor> keep_alive, Enqueue&& enqueue) {
    MT_CHECK(!comm_->aborted.load(), op, " on rank ", rank(),
             ": the process group failed earlier and cannot be used: ", comm_->first_error);
    const auto stream = static_cast<cudaStream_t>(cuda::current_stream(device_).handle());
    cudaEvent_t event = nullptr;
    MT_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    try {
      enqueue(stream);
      MT_CUDA_CHECK(cudaEventRecord(event, stream));
    } catch (...) {
      cudaEventDestroy(event);
      throw;
    }
    return std::make_shared<NcclWork>(comm_, op, event, std::move(keep_alive));
  }

  int device_;
  std::shared_ptr<Comm> comm_;
  Tensor barrier_token_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_nccl_group(int rank, int size, int local_rank,
                                              Rendezvous rendezvous, const std::string& store_path,
                                              std::chrono::milliseconds timeout) {
  return std::make_shared<NcclProcessGroup>(rank, size, local_rank, rendezvous, store_path,
                                            timeout);
}

}  // namespace mantissa::distributed::detail
