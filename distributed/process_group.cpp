#include "distributed/process_group.h"

#include "distributed/backends.h"
#include "engine/dispatch.h"
#include "engine/error.h"

namespace mantissa::distributed {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Avg:
      return "avg";
    case ReduceOp::Max:
      return "max";
  }
  return "?";
}

namespace detail {

void ThreadWork::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return done_; });
  if (!error_.empty()) MT_THROW(error_);
}

bool ThreadWork::is_completed() {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void ThreadWork::finish(std::string error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::move(error);
    done_ = true;
    keep_alive_.clear();
  }
  done_cv_.notify_all();
}

void check_collective_tensor(const char* op, const Tensor& t, const char* backend, bool want_cuda) {
  MT_CHECK(t.defined(), op, ": expected a defined tensor");
  MT_CHECK(t.is_cuda() == want_cuda, op, ": the ", backend, " process group takes ",
           want_cuda ? "CUDA" : "CPU", " tensors, got one on ", t.device(), " (use the ",
           want_cuda ? "gloo" : "nccl", " backend for those)");
  MT_CHECK(t.is_contiguous(), op, ": expected a contiguous tensor, got shape ", t.shape(),
           " with strides ", t.strides());
  // Throws "op X not implemented for dtype Y on device Z" for the others.
  dispatch_dtype<kFloatingTypes>(t.dtype(), op, t.device(), [](auto) {});
}

void check_same_dtype_device(const char* op, const Tensor& output, const Tensor& input) {
  MT_CHECK(output.dtype() == input.dtype() && output.device() == input.device(), op,
           ": expected output and input of the same dtype and device, got ", output.dtype(), " on ",
           output.device(), " and ", input.dtype(), " on ", input.device());
}

void check_root(const char* op, int root, int size) {
  MT_CHECK(root >= 0 && root < size, op, ": root ", root, " is not a rank of a group of size ",
           size);
}

}  // namespace detail
}  // namespace mantissa::distributed
