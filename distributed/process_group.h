// Collective communication between the processes of a data-parallel job, in the spirit of
// torch.distributed's ProcessGroup. Gloo does the work for CPU tensors and NCCL for CUDA tensors;
// mantissa only validates the tensors, orders the calls and turns failures into mantissa::Error.
//
// Every collective is asynchronous: it returns a Work handle at once and runs on the group's own
// thread (Gloo) or stream (NCCL), in the order the calls were made. Every rank must make the same
// collectives in the same order with tensors of the same shape and dtype. A collective that does
// not complete within the group's timeout (a rank skipped it, hung or died) fails its Work with
// an error naming the op, this rank and the peer when the transport knows it; the group cannot be
// used after such a failure, as in PyTorch.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "engine/tensor.h"

namespace mantissa::distributed {

enum class ReduceOp { Sum, Avg, Max };
const char* reduce_op_name(ReduceOp op);

// A collective in flight. wait() blocks until it completes and throws mantissa::Error if it
// failed (each wait() on a failed Work throws again). The tensors it was given stay alive until
// the Work is destroyed.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual bool is_completed() = 0;
  // Without blocking: true once the collective has completed (throwing as wait() does if it
  // failed), false while it is still running. NCCL's also fails here, as wait() would, once
  // the communicator reports an error or the collective is older than the group's timeout.
  virtual bool poll() {
    if (!is_completed()) return false;
    wait();
    return true;
  }
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  virtual std::string backend() const = 0;
  // Where this group's tensors live: the CPU for Gloo, this rank's GPU for NCCL. Host values
  // that every rank must agree on (a flag, a hash, a path) travel in a tensor placed here.
  virtual Device device() const { return Device::cpu(); }

  // In place on every rank: tensor becomes the reduction of all ranks' tensors. Avg divides
  // the sum by size() in the tensor's dtype.
  virtual std::shared_ptr<Work> allreduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum) = 0;
  // In place: every rank's tensor becomes root's.
  virtual std::shared_ptr<Work> broadcast(const Tensor& tensor, int root = 0) = 0;
  // torch.distributed.all_gather_into_tensor: output holds size() * input.numel() elements,
  // rank r's input at elements [r * n, (r + 1) * n).
  virtual std::shared_ptr<Work> allgather(const Tensor& output, const Tensor& input) = 0;
  // torch.distributed.reduce_scatter_tensor: input holds size() * output.numel() elements;
  // rank r's output is the reduction over ranks of input elements [r * n, (r + 1) * n).
  virtual std::shared_ptr<Work> reduce_scatter(const Tensor& output, const Tensor& input,
                                               ReduceOp op = ReduceOp::Sum) = 0;
  // Completes once every rank has called it.
  virtual std::shared_ptr<Work> barrier() = 0;

 protected:
  ProcessGroup(int rank, int size, std::chrono::milliseconds timeout)
      : rank_(rank), size_(size), timeout_(timeout) {}

 private:
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
};

}  // namespace mantissa::distributed
