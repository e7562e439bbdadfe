#include "autograd/autocast_wrapper.h"

#include <optional>
#include <unordered_map>

#include "autograd/node.h"

namespace mantissa::autograd {
namespace {

// Casts of weights made in the current outermost scope. A flat list that keeps its capacity
// between steps, indexed by a hash map once a scope casts many weights. An entry remembers the
// weight's version: a weight changed in place inside the scope (an optimizer step) is cast anew.
struct CastEntry {
  const TensorImpl* key;
  DType dtype;
  uint32_t version;
  Tensor weight;  // holding it keeps its address unique for the scope
  Tensor cast;
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

bool cacheable(const Tensor& t) {
  return t.dtype() == kFloat32 && t.requires_grad() && t.is_leaf() && GradMode::is_enabled();
}

Tensor cast_cached(const Tensor& t, DType target) {
  if (!cacheable(t)) return t.to(target);
  if (CastEntry* e = cache().find(t, target)) {
    if (e->version != t.version()) {
      e->cast = t.to(target);
      e->version = t.version();
    }
    return e->cast;
  }
  Tensor cast = t.to(target);
  cache().add({t.unsafe_impl(), target, t.version(), t, cast});
  return cast;
}

const autocast_state::DeviceState& state_of(const Tensor& t) {
  return autocast_state::current().device[static_cast<int>(t.device().type())];
}

// A floating tensor on a device with a float16/bfloat16 scope.
bool on_cast_device(const Tensor& t) {
  if (!t.defined() || !is_floating(t.dtype())) return false;
  const auto& st = state_of(t);
  return st.enabled && !st.tf32;
}

// What a policy may cast: float64 takes part in promotion but is never cast.
bool eligible(const Tensor& t) { return on_cast_device(t) && t.dtype() != kFloat64; }

}  // namespace

void clear_autocast_cache() { cache().clear(); }
size_t autocast_cache_size() { return cache().entries.size(); }

namespace autocast_detail {

Tensor cast_for(CastPolicy policy, const Tensor& t, DType promote_to) {
  if (!eligible(t)) return t;
  switch (policy) {
    case CastPolicy::LowerPrecision:
    case CastPolicy::LowerPrecisionLoss:
    case CastPolicy::LowerPrecisionInput: {
      const DType target = state_of(t).dtype;
      return t.dtype() == target ? t : cast_cached(t, target);
    }
    case CastPolicy::Float32:
      return t.dtype() == kFloat32 ? t : t.to(kFloat32);
    case CastPolicy::Promote:
      return t.dtype() == promote_to ? t : t.to(promote_to);
    case CastPolicy::None:
    case CastPolicy::Banned:
      break;
  }
  return t;
}

void refuse_banned(const char* op, const std::vector<const Tensor*>& tensors) {
  for (const Tensor* t : tensors) {
    // PyTorch's message: the op's input is a probability, typically a sigmoid's output, which
    // float16/bfloat16 rounds to 0 or 1 where the loss and its gradient need the difference.
    MT_CHECK(!on_cast_device(*t), op, " is unsafe to autocast (", t->device(),
             " has an autocast scope): use binary_cross_entropy_with_logits (BCEWithLogitsLoss), "
             "which combines the sigmoid with the loss and is safe to autocast, or call ",
             op, " outside the scope");
  }
}

DType promote_dtype(const std::vector<const Tensor*>& tensors) {
  std::optional<DType> out;
  for (const Tensor* t : tensors) {
    if (!on_cast_device(*t)) continue;
    if (!out) out = state_of(*t).dtype;
    out = promote_types(*out, t->dtype());
  }
  return out.value_or(kFloat32);
}

}  // namespace autocast_detail
}  // namespace mantissa::autograd
