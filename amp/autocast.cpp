#include "amp/autocast.h"

#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "autograd/autocast_seam.h"
#include "autograd/functions.h"
#include "autograd/node.h"
#include "engine/logging.h"

namespace mantissa::amp {
namespace {

// Casts of weights (float32 leaves that require grad), made once per outermost scope. The cast
// keeps its autograd history, so every use in the scope backpropagates into the weight. An entry
// without a cast is a weight an op rounded itself (a direct cast, see autograd/autocast_seam.h):
// the first cast of it in the scope reroutes that op's input through the cast's node. A flat
// list that keeps its capacity between steps, indexed by a hash map once a scope casts many
// weights.
struct CastEntry {
  const TensorImpl* key;
  DType dtype;
  Tensor weight;  // holding it keeps its address unique for the scope
  Tensor cast;    // undefined for a direct cast not yet shared
  std::weak_ptr<autograd::Node> direct_node;
  uint32_t direct_input = 0;
  uint32_t direct_version = 0;  // the weight's version when the op rounded it
};
struct CastCache {
  static constexpr size_t kScanLimit = 32;
  std::vector<CastEntry> entries;
  std::unordered_map<const TensorImpl*, std::vector<size_t>> index;  // above kScanLimit only

  CastEntry* find(const Tensor& t, DType dtype) {
    const TensorImpl* key = t.unsafe_impl();
    if (entries.size() <= kScanLimit) {
      for (auto& e : entries)
        if (e.key == key && e.dtype == dtype) return &e;
      return nullptr;
    }
    const auto it = index.find(key);
    if (it == index.end()) return nullptr;
    for (size_t i : it->second)
      if (entries[i].dtype == dtype) return &entries[i];
    return nullptr;
  }
  void add(CastEntry e) {
    entries.push_back(std::move(e));
    if (entries.size() == kScanLimit + 1) {
      for (size_t i = 0; i < entries.size(); ++i) index[entries[i].key].push_back(i);
    } else if (entries.size() > kScanLimit + 1) {
      index[entries.back().key].push_back(entries.size() - 1);
    }
  }
  void clear() {
    entries.clear();
    index.clear();
  }
};
CastCache& cache() {
  thread_local CastCache c;
  return c;
}

bool eligible_for_lower(const Tensor& t, DType target) {
  return is_floating(t.dtype()) && t.dtype() != kFloat64 && t.dtype() != target;
}

bool cacheable(const Tensor& t) {
  return t.requires_grad() && t.is_leaf() && autograd::GradMode::is_enabled();
}

Tensor cast_with_cache(const Tensor& t, DType target) {
  if (!cacheable(t)) return t.to(target);
  CastEntry* e = cache().find(t, target);
  if (e == nullptr) {
    Tensor cast = t.to(target);
    cache().add({t.unsafe_impl(), target, t, cast, {}, 0, 0});
    return cast;
  }
  if (!e->cast.defined()) {
    // The weight's first use rounded it itself; from now on both uses go through this cast. If
    // the weight changed in place since (a step inside the scope), the first use's rounding is
    // not this cast: it keeps its own gradient path.
    e->cast = t.to(target);
    auto node = e->direct_node.lock();
    if (node && e->direct_version == t.version()) {
      node->next_edges.at(e->direct_input) = autograd::gradient_edge(e->cast);
    }
    e->direct_node.reset();
  }
  return e->cast;
}

// The dtype autocast lowers a float32 `t` to for `op` on t's device, or nullopt.
std::optional<DType> lowered_dtype(OpId op, const Tensor& t) {
  const auto& st = autocast_state::current().device[static_cast<int>(t.device().type())];
  if (!st.enabled || st.tf32 || t.dtype() != kFloat32) return std::nullopt;
  if (cast_policy(op) != CastPolicy::LowerPrecision) return std::nullopt;
  return st.dtype;
}

// A weight with no cast in this scope yet.
std::optional<DType> direct_cast_dtype(OpId op, const Tensor& t) {
  const std::optional<DType> dt = cacheable(t) ? lowered_dtype(op, t) : std::nullopt;
  if (dt && cache().find(t, *dt) != nullptr) return std::nullopt;
  return dt;
}

// Anything else, which is never cached.
std::optional<DType> lowers(OpId op, const Tensor& t) {
  return cacheable(t) ? std::nullopt : lowered_dtype(op, t);
}

bool widens(OpId op, const Tensor& t) {
  const auto& st = autocast_state::current().device[static_cast<int>(t.device().type())];
  return st.enabled && !st.tf32 && is_reduced_float(t.dtype()) &&
         cast_policy(op) == CastPolicy::Float32;
}

void record_direct_cast(const Tensor& t, DType dtype, const std::shared_ptr<autograd::Node>& node,
                        uint32_t input_nr) {
  cache().add({t.unsafe_impl(), dtype, t, Tensor(), node, input_nr, t.version()});
}

Tensor cast_hook(OpId op, const Tensor& t) {
  const auto& st = autocast_state::current().device[static_cast<int>(t.device().type())];
  if (!st.enabled || st.tf32 || !is_floating(t.dtype())) return t;
  switch (cast_policy(op)) {
    case CastPolicy::LowerPrecision:
      return eligible_for_lower(t, st.dtype) ? cast_with_cache(t, st.dtype) : t;
    case CastPolicy::Float32:
      return is_reduced_float(t.dtype()) ? t.to(kFloat32) : t;
    case CastPolicy::Promote:
    case CastPolicy::None:
      break;
  }
  return t;
}

void refresh_any_cast(autocast_state::ThreadState& s) {
  s.any_cast = false;
  for (const auto& d : s.device) s.any_cast = s.any_cast || (d.enabled && !d.tf32);
}

[[maybe_unused]] const bool hook_installed = [] {
  ::mantissa::autocast::set_cast_hook(&cast_hook);
  ::mantissa::autocast::set_direct_cast_hooks(
      {&direct_cast_dtype, &record_direct_cast, &widens, &lowers});
  return true;
}();

}  // namespace

Precision::Precision(DType dtype) {
  switch (dtype) {
    case kFloat32:
      kind_ = Float32;
      break;
    case kFloat16:
      kind_ = Float16;
      break;
    case kBFloat16:
      kind_ = BFloat16;
      break;
    default:
      MT_THROW("autocast: unsupported precision ", dtype,
               " (expected float32, tf32, float16 or bfloat16)");
  }
}

Precision Precision::parse(std::string_view name) {
  if (name == "float32" || name == "fp32" || name == "off") return Float32;
  if (name == "tf32") return TF32;
  if (name == "float16" || name == "fp16" || name == "half") return Float16;
  if (name == "bfloat16" || name == "bf16") return BFloat16;
  MT_THROW("unknown precision '", name, "' (expected float32, tf32, float16 or bfloat16)");
}

std::string_view Precision::name() const {
  switch (kind_) {
    case Float32:
      return "float32";
    case TF32:
      return "tf32";
    case Float16:
      return "float16";
    case BFloat16:
      return "bfloat16";
  }
  return "unknown";
}

DType Precision::dtype() const {
  return kind_ == Float16 ? kFloat16 : kind_ == BFloat16 ? kBFloat16 : kFloat32;
}

Precision default_precision(DeviceType t) {
  return t == DeviceType::CUDA ? Precision::Float16 : Precision::BFloat16;
}

autocast::autocast(DeviceType device_type, std::optional<Precision> precision, bool enabled)
    : device_type_(device_type) {
  // The precision in force, logged once when mixed precision is first used (the logger is not
  // created during static initialisation, so MANTISSA_LOG_LEVEL set by the program still counts).
  static const bool logged = [] {
    log().info("float32 matmul precision: {}; autocast defaults: float16 on cuda, bfloat16 on cpu",
               get_float32_matmul_precision() == MatmulPrecision::High ? "high (TF32 allowed)"
                                                                       : "highest (full float32)");
    return true;
  }();
  (void)logged;
  auto& s = autocast_state::current();
  auto& d = s.device[static_cast<int>(device_type)];
  saved_ = d;
  const Precision p = precision.value_or(default_precision(device_type));
  d.enabled = enabled && p.kind() != Precision::Float32;
  d.tf32 = p.kind() == Precision::TF32;
  d.dtype = p.dtype();
  ++s.depth;
  refresh_any_cast(s);
}

autocast::~autocast() {
  auto& s = autocast_state::current();
  s.device[static_cast<int>(device_type_)] = saved_;
  if (--s.depth == 0) clear_autocast_cache();
  refresh_any_cast(s);
}

bool is_autocast_enabled(DeviceType t) {
  return autocast_state::current().device[static_cast<int>(t)].enabled;
}

Precision current_precision(DeviceType t) {
  const auto& d = autocast_state::current().device[static_cast<int>(t)];
  if (!d.enabled) return Precision::Float32;
  if (d.tf32) return Precision::TF32;
  return d.dtype;
}

void clear_autocast_cache() { cache().clear(); }
size_t autocast_cache_size() { return cache().entries.size(); }

}  // namespace mantissa::amp
