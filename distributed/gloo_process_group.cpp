// The Gloo process group: CPU tensors, Gloo's TCP transport, Gloo's collective algorithms.
//
// Collectives run one at a time on the group's thread, in submission order, so every rank
// issues Gloo's calls in the same order and each gets the next tag; a rank that skips or
// reorders one makes the tags disagree and its peers time out rather than mix up data. Gloo
// reports a timeout or a closed connection as an exception; after one the group keeps the first
// error and fails every later collective with it, since Gloo's pairs are then unusable.
//
// Half types are reduced in float and rounded after each pairwise step, as Gloo's ring does for
// its own float16. Gloo 0.5 has no reduce-scatter with timeouts, so reduce_scatter allreduces a
// copy of the input and keeps this rank's slice.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <thread>

#include "distributed/backends.h"
#include "distributed/rendezvous_store.h"
#if MANTISSA_HAS_MPI
#include "distributed/mpi_store.h"
#endif
#include "engine/dispatch.h"
#include "engine/error.h"

namespace mantissa::distributed::detail {
namespace {

template <typename T>
gloo::AllreduceOptions::Func reduce_function(ReduceOp op) {
  using acc_t = opmath_t<T>;
  if (op == ReduceOp::Max) {
    // NaN wins, like torch.max.
    return [](void* out, const void* a, const void* b, size_t n) {
      auto* o = static_cast<T*>(out);
      const auto* x = static_cast<const T*>(a);
      const auto* y = static_cast<const T*>(b);
      for (size_t i = 0; i < n; ++i) {
        const acc_t u = static_cast<acc_t>(x[i]), v = static_cast<acc_t>(y[i]);
        o[i] = T(std::isnan(u) || u >= v ? u : v);
      }
    };
  }
  return [](void* out, const void* a, const void* b, size_t n) {
    auto* o = static_cast<T*>(out);
    const auto* x = static_cast<const T*>(a);
    const auto* y = static_cast<const T*>(b);
    for (size_t i = 0; i < n; ++i) o[i] = T(static_cast<acc_t>(x[i]) + static_cast<acc_t>(y[i]));
  };
}

template <typename T>
void divide_in_place(void* data, size_t n, int size) {
  auto* p = static_cast<T*>(data);
  const auto d = static_cast<opmath_t<T>>(size);
  for (size_t i = 0; i < n; ++i) p[i] = T(static_cast<opmath_t<T>>(p[i]) / d);
}

class GlooProcessGroup final : public ProcessGroup {
 public:
  GlooProcessGroup(int rank, int size, Rendezvous rendezvous, const std::string& store_path,
                   const std::string& hostname, const std::string& iface,
                   std::chrono::milliseconds timeout)
      : ProcessGroup(rank, size, timeout) {
    gloo::transport::tcp::attr attr;
    if (!iface.empty())
      attr.iface = iface;
    else
      attr.hostname = hostname;
    if (rendezvous == Rendezvous::Mpi) {
#if MANTISSA_HAS_MPI
      try {
        MpiStore store;
        connect(store, attr);
      } catch (const std::exception& e) {
        MT_THROW("init_process_group (gloo): rank ", rank, " of ", size,
                 " could not meet the other ranks through MPI: ", e.what());
      }
#else
      MT_THROW("init_process_group (gloo): this build of mantissa has no MPI rendezvous");
#endif
    } else {
      std::unique_ptr<detail::RendezvousStore> store;
      try {
        store = detail::open_rendezvous_store(store_path, timeout);
        connect(*store, attr);
        // Every rank has read every address once connect()'s barrier passes, so the keys can
        // go: a later job meeting in the same store must not find them.
        store->remove_own_keys();
      } catch (const std::exception& e) {
        if (store) store->remove_own_keys();
        MT_THROW("init_process_group (gloo): rank ", rank, " of ", size,
                 " could not meet the other ranks through ",
                 store ? store->describe() : "the store '" + store_path + "'", " within ",
                 timeout.count(), " ms: ", e.what());
      }
    }
    worker_ = std::thread([this] { run(); });
  }

  ~GlooProcessGroup() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    queue_cv_.notify_all();
    worker_.join();
  }

  std::string backend() const override { return "gloo"; }

  std::shared_ptr<Work> allreduce(const Tensor& tensor, ReduceOp op) override {
    check_collective_tensor("allreduce", tensor, "gloo", false);
    return submit("allreduce", 0, {tensor}, [this, tensor, op](uint32_t tag) {
      allreduce_raw(tensor.data_ptr(), tensor.dtype(), tensor.numel(), op, tag);
    });
  }

  std::shared_ptr<Work> broadcast(const Tensor& tensor, int root) override {
    check_collective_tensor("broadcast", tensor, "gloo", false);
    check_root("broadcast", root, size());
    return submit("broadcast", 1, {tensor}, [this, tensor, root](uint32_t tag) {
      if (tensor.numel() == 0) return;
      dispatch_dtype<kFloatingTypes>(tensor.dtype(), "broadcast", tensor.device(), [&](auto t) {
        using T = typename decltype(t)::type;
        gloo::BroadcastOptions opts(context_);
        opts.setOutput<T>(static_cast<T*>(tensor.data_ptr()), tensor.numel());
        opts.setRoot(root);
        opts.setTag(tag);
        opts.setTimeout(timeout());
        gloo::broadcast(opts);
      });
    });
  }

  std::shared_ptr<Work> allgather(const Tensor& output, const Tensor& input) override {
    check_collective_tensor("allgather", input, "gloo", false);
    check_collective_tensor("allgather", output, "gloo", false);
    check_same_dtype_device("allgather", output, input);
    MT_CHECK(output.numel() == input.numel() * size(), "allgather: expected an output of ", size(),
             " x ", input.numel(), " elements for input shape ", input.shape(), ", got shape ",
             output.shape());
    return submit("allgather", 2, {output, input}, [this, output, input](uint32_t tag) {
      if (input.numel() == 0) return;
      dispatch_dtype<kFloatingTypes>(input.dtype(), "allgather", input.device(), [&](auto t) {
        using T = typename decltype(t)::type;
        gloo::AllgatherOptions opts(context_);
        opts.setInput<T>(static_cast<T*>(input.data_ptr()), input.numel());
        opts.setOutput<T>(static_cast<T*>(output.data_ptr()), output.numel());
        opts.setTag(tag);
        opts.setTimeout(timeout());
        gloo::allgather(opts);
      });
    });
  }

  std::shared_ptr<Work> reduce_scatter(const Tensor& output, const Tensor& input,
                                       ReduceOp op) override {
    check_collective_tensor("reduce_scatter", input, "gloo", false);
    check_collective_tensor("reduce_scatter", output, "gloo", false);
    check_same_dtype_device("reduce_scatter", output, input);
    MT_CHECK(input.numel() == output.numel() * size(), "reduce_scatter: expected an input of ",
             size(), " x ", output.numel(), " elements for output shape ", output.shape(),
             ", got shape ", input.shape());
    Tensor scratch = input.clone();
    return submit(
        "reduce_scatter", 3, {output, scratch}, [this, output, scratch, op](uint32_t tag) {
          allreduce_raw(scratch.data_ptr(), scratch.dtype(), scratch.numel(), op, tag);
          const auto bytes = static_cast<size_t>(output.nbytes());
          if (bytes > 0)
            std::memcpy(output.data_ptr(),
                        static_cast<const char*>(scratch.data_ptr()) + rank() * bytes, bytes);
        });
  }

  std::shared_ptr<Work> barrier() override {
    return submit("barrier", 4, {}, [this](uint32_t tag) {
      gloo::BarrierOptions opts(context_);
      opts.setTag(tag);
      opts.setTimeout(timeout());
      gloo::barrier(opts);
    });
  }

 private:
  static constexpr uint32_t kNumOpKinds = 5;
  struct Task {
    const char* op;
    uint32_t kind;
    std::function<void(uint32_t)> run;
    std::shared_ptr<ThreadWork> work;
  };

  void allreduce_raw(void* data, DType dtype, int64_t numel, ReduceOp op, uint32_t tag) {
    if (numel == 0) return;
    dispatch_dtype<kFloatingTypes>(dtype, "allreduce", Device::cpu(), [&](auto t) {
      using T = typename decltype(t)::type;
      gloo::AllreduceOptions opts(context_);
      opts.setOutput<T>(static_cast<T*>(data), numel);
      opts.setReduceFunction(reduce_function<T>(op));
      opts.setTag(tag);
      opts.setTimeout(timeout());
      gloo::allreduce(opts);
      if (op == ReduceOp::Avg) divide_in_place<T>(data, numel, size());
    });
  }

  // Gloo's full mesh over `store`, then a barrier: every rank is connected when it returns.
  void connect(gloo::rendezvous::Store& store, const gloo::transport::tcp::attr& attr) {
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank(), size());
    context->setTimeout(timeout());
    context->connectFullMesh(store, device);
    context_ = context;
    gloo::BarrierOptions barrier(context_);
    barrier.setTimeout(timeout());
    gloo::barrier(barrier);
  }

  std::shared_ptr<Work> submit(const char* op, uint32_t kind, std::vector<Tensor> keep_alive,
                               std::function<void(uint32_t)> run) {
    auto work = std::make_shared<ThreadWork>(std::move(keep_alive));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(Task{op, kind, std::move(run), work});
    }
    queue_cv_.notify_one();
    return work;
  }

  // The peer a Gloo error names: its message holds the peer's address for a closed connection;
  // with two ranks the peer is the other one whatever happened.
  std::string describe_failure(const char* op, const std::string& what) const {
    const bool timed_out =
        what.find("Timed out") != std::string::npos || what.find("timed out") != std::string::npos;
    std::string peer;
    if (size() == 2) peer = ", peer rank " + std::to_string(1 - rank());
    return ::mantissa::detail::str_cat(
        op, " failed on rank ", rank(), " of ", size(), peer, ": ",
        timed_out ? ::mantissa::detail::str_cat("timed out after ", timeout().count(), " ms")
                  : std::string("the connection failed"),
        " (gloo: ", what, ")");
  }

  void run() {
    uint32_t seq = 0;
    for (;;) {
      Task task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      if (!first_error_.empty()) {
        task.work->finish(::mantissa::detail::str_cat(
            task.op, " on rank ", rank(),
            ": the process group failed earlier and cannot be used: ", first_error_));
        continue;
      }
      try {
        // The op's kind is part of the tag, so a rank that runs barrier where its peer runs
        // allreduce waits for messages that never come instead of taking the wrong ones.
        task.run(seq++ * kNumOpKinds + task.kind);
        task.work->finish("");
      } catch (const std::exception& e) {
        first_error_ = describe_failure(task.op, e.what());
        task.work->finish(first_error_);
      }
    }
  }

  std::shared_ptr<gloo::Context> context_;
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable queue_cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::string first_error_;  // only the worker thread touches it
};

}  // namespace

std::shared_ptr<ProcessGroup> make_gloo_group(int rank, int size, Rendezvous rendezvous,
                                              const std::string& store_path,
                                              const std::string& hostname, const std::string& iface,
                                              std::chrono::milliseconds timeout) {
  return std::make_shared<GlooProcessGroup>(rank, size, rendezvous, store_path, hostname, iface,
                                            timeout);
}

}  // namespace mantissa::distributed::detail
