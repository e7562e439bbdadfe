// scaled_dot_product_attention on cuDNN's fused flash attention, forward and backward, through the
// cuDNN frontend's graph API (its header-only C++ library; the `nvidia-cudnn-frontend` package on
// PyPI ships it, CMake finds it with -DCUDNN_FRONTEND_ROOT). The frontend rather than the backend
// API it wraps: its sdpa node is the pattern of matmuls, masks and softmax statistics that cuDNN's
// flash-attention engines match, which the backend API would have us spell out descriptor by
// descriptor, and it is what NVIDIA tests that pattern with.
//
// The B = batch x heads of the op become cuDNN's batch (heads 1): q [B, 1, L, E], k [B, 1, S, E],
// v [B, 1, S, Ev], all contiguous. The forward writes out and the softmax statistics, which are
// the op's lse (the logsumexp of the scaled scores, float32); the backward takes them with out and
// grad_out. One graph per shape, dtype, causality, scale and direction is built once (validated,
// lowered, planned with heuristics mode A, checked for support) and cached for the process; its
// workspace comes from the caching allocator and is released as soon as the call is enqueued.
//
// Not asked, by design (counted "Dtype", "HeadDim", "Mask", "Dropout", "Disabled", and
// "NotBuilt" in a build without the frontend): float32/float64, head dims other than a multiple
// of 8 up to 128 or unequal for q and v, an explicit mask (its gradient, and rows masked
// entirely, which the op defines as NaN), dropout (cuDNN draws other random bits than the op's
// Philox counters, and the CPU is the reference), and fast_path_enabled("cuda.cudnn_attention")
// off. A graph cuDNN refuses to build or plan is a refusal ("Unsupported"), remembered for its
// key; strict fast paths then throw with cuDNN's message.
#include "kernels/cuda/cudnn_attention.h"

#include <string>

#include "cuda/cudnn_handle.h"
#include "engine/error.h"
#include "engine/fast_path_stats.h"

#if MANTISSA_HAS_CUDNN_FRONTEND
#include <cudnn_frontend.h>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "cuda/device_guard.h"
#include "engine/factory.h"
#endif

namespace mantissa::cuda {
namespace {

constexpr const char* kPath = "cuda.cudnn_attention";

// Why cuDNN is not asked for this call (nullptr: it is).
const char* not_asked(const AttentionForwardArgs& a) {
  const int64_t E = a.q.size(2), Ev = a.v.size(2);
  if (!fast_path_enabled(kPath)) return "Disabled";
  if (a.q.dtype() != kFloat16 && a.q.dtype() != kBFloat16) return "Dtype";
  if (E != Ev || E % 8 != 0 || E > 128) return "HeadDim";
  if (a.mask.defined()) return "Mask";
  if (a.dropout_p > 0) return "Dropout";
#if !MANTISSA_HAS_CUDNN_FRONTEND
  return "NotBuilt";
#else
  return nullptr;
#endif
}

// Counts a fallback by design; throws instead when the path is strict.
bool decline(const char* reason, const AttentionForwardArgs& a, const char* what) {
  MT_CHECK(!::mantissa::detail::count_fallback(kPath, reason, /*refusal=*/false, a.q.dtype()),
           "scaled_dot_product_attention: cuDNN's fused attention ", what, " is not asked (",
           reason, ": q ", a.q.shape(), " ", a.q.dtype(), ", v ", a.v.shape(),
           a.mask.defined() ? ", attn_mask" : "", a.dropout_p > 0 ? ", dropout" : "",
           ") and the path is strict (set_strict_fast_path(\"cuda.cudnn_attention\", true))");
  return false;
}

#if MANTISSA_HAS_CUDNN_FRONTEND
namespace fe = cudnn_frontend;

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kGradO, kGradQ, kGradK, kGradV };

struct Key {
  int device;
  DType dtype;
  int64_t B, L, S, E;
  bool causal;
  float scale;
  bool backward;
  auto tie() const { return std::tie(device, dtype, B, L, S, E, causal, scale, backward); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;
  std::string refusal;  // non-empty: cuDNN declined this key
};

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

// [B, 1, rows, cols], contiguous.
TensorPtr input(fe::graph::Graph& g, const char* name, int64_t uid, int64_t B, int64_t rows,
                int64_t cols) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({B, 1, rows, cols})
                      .set_stride({rows * cols, rows * cols, cols, 1}));
}

void as_output(const TensorPtr& t, int64_t uid, int64_t B, int64_t rows, int64_t cols) {
  t->set_output(true)
      .set_uid(uid)
      .set_dim({B, 1, rows, cols})
      .set_stride({rows * cols, rows * cols, cols, 1});
}

// Builds the graph of `k`; on a cuDNN refusal, returns the plan with its reason.
std::shared_ptr<Plan> build(const Key& k, cudnnHandle_t handle) {
  auto plan = std::make_shared<Plan>();
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(k.dtype == kFloat16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const TensorPtr q = input(*g, "q", kQ, k.B, k.L, k.E);
  const TensorPtr kk = input(*g, "k", kK, k.B, k.S, k.E);
  const TensorPtr v = input(*g, "v", kV, k.B, k.S, k.E);
  if (!k.backward) {
    auto [o, stats] = g->sdpa(q, kk, v,
                              fe::graph::SDPA_attributes()
                                  .set_name("mantissa_sdpa")
                                  .set_generate_stats(true)
                                  .set_causal_mask(k.causal)
                                  .set_attn_scale(k.scale));
    as_output(o, kO, k.B, k.L, k.E);
    as_output(stats, kStats, k.B, k.L, 1);
    stats->set_data_type(fe::DataType_t::FLOAT);
  } else {
    const TensorPtr o = input(*g, "o", kO, k.B, k.L, k.E);
    const TensorPtr dO = input(*g, "dO", kGradO, k.B, k.L, k.E);
    const TensorPtr stats = input(*g, "stats", kStats, k.B, k.L, 1);
    stats->set_data_type(fe::DataType_t::FLOAT);
    auto [dq, dk, dv] = g->sdpa_backward(q, kk, v, o, dO, stats,
                                         fe::graph::SDPA_backward_attributes()
                                             .set_name("mantissa_sdpa_backward")
                                             .set_causal_mask(k.causal)
                                             .set_attn_scale(k.scale));
    as_output(dq, kGradQ, k.B, k.L, k.E);
    as_output(dk, kGradK, k.B, k.S, k.E);
    as_output(dv, kGradV, k.B, k.S, k.E);
  }
  auto step = [&](const char* what, fe::error_t status) {
    if (status.is_good() || !plan->refusal.empty()) return;
    plan->refusal = std::string(what) + ": " + status.get_message();
  };
  step("validate", g->validate());
  if (plan->refusal.empty()) step("build_operation_graph", g->build_operation_graph(handle));
  if (plan->refusal.empty())
    step("create_execution_plans", g->create_execution_plans({fe::HeurMode_t::A}));
  if (plan->refusal.empty()) step("check_support", g->check_support());
  if (plan->refusal.empty()) step("build_plans", g->build_plans());
  if (plan->refusal.empty()) step("get_workspace_size", g->get_workspace_size(plan->workspace));
  plan->graph = std::move(g);
  return plan;
}

std::shared_ptr<Plan> plan_for(const Key& key, cudnnHandle_t handle) {
  static std::mutex mutex;
  static std::map<Key, std::shared_ptr<Plan>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, build(key, handle)).first;
  return it->second;
}

// Runs the graph of `key` on `pack`; false (counted as a refusal) when cuDNN declined the key.
bool run(const Key& key, std::unordered_map<int64_t, void*>& pack, const AttentionForwardArgs& a,
         const char* what) {
  DeviceGuard guard(key.device);
  CudnnLease lease(key.device);
  const std::shared_ptr<Plan> plan = plan_for(key, lease.handle());
  if (!plan->refusal.empty()) {
    lease.release();
    const std::string why = ::mantissa::detail::str_cat(
        "scaled_dot_product_attention: cuDNN ", cudnnGetVersion(), " declined the fused attention ",
        what, " (q ", a.q.shape(), " ", a.q.dtype(), ", k ", a.k.shape(),
        a.causal ? ", causal" : "", "): ", plan->refusal);
    MT_CHECK(
        !::mantissa::detail::count_fallback(kPath, "Unsupported", /*refusal=*/true, key.dtype, why),
        why);
    return false;
  }
  const Tensor workspace =
      plan->workspace > 0 ? empty({plan->workspace}, TensorOptions(kUInt8).device(a.q.device()))
                          : Tensor();
  fe::error_t status = plan->graph->execute(lease.handle(), pack,
                                            workspace.defined() ? workspace.data_ptr() : nullptr);
  MT_CHECK(status.is_good(), "scaled_dot_product_attention: cuDNN's fused attention ", what,
           " failed to run (q ", a.q.shape(), " ", a.q.dtype(), "): ", status.get_message());
  ::mantissa::detail::count_fast_path(kPath, what, key.dtype);
  return true;
}

Key key_of(const AttentionForwardArgs& a, bool backward) {
  return Key{a.q.device().index(),
             a.q.dtype(),
             a.q.size(0),
             a.q.size(1),
             a.k.size(1),
             a.q.size(2),
             a.causal,
             static_cast<float>(a.scale),
             backward};
}
#endif

}  // namespace

bool cudnn_attention_forward(const AttentionForwardArgs& a) {
  if (const char* reason = not_asked(a)) return decline(reason, a, "forward");
#if MANTISSA_HAS_CUDNN_FRONTEND
  std::unordered_map<int64_t, void*> pack = {{kQ, a.q.data_ptr()},
                                             {kK, a.k.data_ptr()},
                                             {kV, a.v.data_ptr()},
                                             {kO, a.out.data_ptr()},
                                             {kStats, a.lse.data_ptr()}};
  return run(key_of(a, false), pack, a, "forward");
#else
  return false;
#endif
}

bool cudnn_attention_backward(const AttentionBackwardArgs& g) {
  const AttentionForwardArgs& a = g.fwd;
  if (const char* reason = not_asked(a)) return decline(reason, a, "backward");
  if (g.grad_mask.defined()) return decline("Mask", a, "backward");
#if MANTISSA_HAS_CUDNN_FRONTEND
  std::unordered_map<int64_t, void*> pack = {
      {kQ, a.q.data_ptr()},          {kK, a.k.data_ptr()},          {kV, a.v.data_ptr()},
      {kO, a.out.data_ptr()},        {kStats, a.lse.data_ptr()},    {kGradO, g.grad_out.data_ptr()},
      {kGradQ, g.grad_q.data_ptr()}, {kGradK, g.grad_k.data_ptr()}, {kGradV, g.grad_v.data_ptr()}};
  return run(key_of(a, true), pack, a, "backward");
#else
  return false;
#endif
}

namespace {

// Tells the device report which frontend this file was compiled with (cuda/cudnn_handle.h).
[[maybe_unused]] const bool frontend_version_set = [] {
#if MANTISSA_HAS_CUDNN_FRONTEND
  set_cudnn_frontend_version(std::to_string(CUDNN_FRONTEND_MAJOR_VERSION) + "." +
                             std::to_string(CUDNN_FRONTEND_MINOR_VERSION) + "." +
                             std::to_string(CUDNN_FRONTEND_PATCH_VERSION));
#endif
  return true;
}();

}  // namespace

}  // namespace mantissa::cuda
