#include "amp/overflow_monitor.h"

#include <algorithm>
#include <cmath>

#include "autograd/functions.h"
#include "autograd/node.h"
#include "engine/logging.h"

namespace mantissa::amp {

TensorStats tensor_stats(const Tensor& t) {
  TensorStats s;
  if (!t.defined() || t.numel() == 0 || !is_floating(t.dtype())) return s;
  autograd::NoGradGuard no_grad;
  const Tensor x = t.detach().to(kFloat64);
  const Tensor a = abs(x);
  const Tensor nan = x != x;
  s.num_nan = sum(nan).item<int64_t>();
  s.num_inf = sum(a == INFINITY).item<int64_t>();
  const Tensor finite_abs = where(nan, zeros_like(a), a);
  s.max_abs = amax(finite_abs).item<double>();
  if (s.num_inf > 0) s.max_abs = INFINITY;
  const Tensor nonzero = x != 0.0;
  s.num_nonzero = sum(nonzero).item<int64_t>();
  if (s.num_nonzero > 0) {
    const int64_t flushed = sum(logical_and(nonzero, a <= std::ldexp(1.0, -25))).item<int64_t>();
    s.fp16_underflow_fraction = static_cast<double>(flushed) / static_cast<double>(s.num_nonzero);
  }
  return s;
}

namespace {
void merge(TensorStats& into, const TensorStats& s, int64_t calls_before) {
  // Underflow fraction is averaged over non-zero values across calls.
  const double total_nonzero = static_cast<double>(into.num_nonzero + s.num_nonzero);
  into.fp16_underflow_fraction = total_nonzero > 0
                                     ? (into.fp16_underflow_fraction * into.num_nonzero +
                                        s.fp16_underflow_fraction * s.num_nonzero) /
                                           total_nonzero
                                     : 0.0;
  into.max_abs = calls_before == 0 ? s.max_abs : std::max(into.max_abs, s.max_abs);
  into.num_inf += s.num_inf;
  into.num_nan += s.num_nan;
  into.num_nonzero += s.num_nonzero;
}
}  // namespace

OverflowMonitor::OverflowMonitor(nn::Module& root) {
  for (auto& [name, module] : root.named_modules()) {
    if (name.empty()) continue;
    const size_t index = stats_.size();
    stats_.push_back({name, module->type_name(), {}, {}, 0, 0});
    const int handle = module->register_forward_hook([this, index](nn::Module&, const Tensor& out) {
      record(index, out, false);
      if (out.requires_grad() && !out.is_leaf()) {
        out.register_hook([this, index](const Tensor& g) { record(index, g, true); });
      }
    });
    attached_.emplace_back(module, handle);
  }
}

OverflowMonitor::~OverflowMonitor() {
  for (auto& [module, handle] : attached_) module->remove_forward_hook(handle);
}

void OverflowMonitor::record(size_t index, const Tensor& value, bool is_grad) {
  ModuleStats& m = stats_[index];
  const TensorStats s = tensor_stats(value);
  int64_t& calls = is_grad ? m.grad_calls : m.forward_calls;
  merge(is_grad ? m.grad : m.forward, s, calls);
  ++calls;
  if (!s.finite() && !first_nonfinite_) {
    first_nonfinite_ = m.name + (is_grad ? " (gradient)" : " (forward)");
    log().warn("overflow monitor: first non-finite value in {} ({}): {} inf, {} nan",
               *first_nonfinite_, m.type, s.num_inf, s.num_nan);
  }
}

const ModuleStats* OverflowMonitor::find(const std::string& name) const {
  for (const auto& m : stats_)
    if (m.name == name) return &m;
  return nullptr;
}

void OverflowMonitor::report() const {
  for (const auto& m : stats_) {
    const bool bad = !m.forward.finite() || !m.grad.finite();
    log().log(bad ? spdlog::level::warn : spdlog::level::info,
              "{} ({}): forward max|x| {:.4g} inf {} nan {} fp16-underflow {:.2f}%; gradient "
              "max|x| {:.4g} inf {} nan {} fp16-underflow {:.2f}%",
              m.name, m.type, m.forward.max_abs, m.forward.num_inf, m.forward.num_nan,
              100.0 * m.forward.fp16_underflow_fraction, m.grad.max_abs, m.grad.num_inf,
              m.grad.num_nan, 100.0 * m.grad.fp16_underflow_fraction);
  }
  if (first_nonfinite_) log().warn("first non-finite value: {}", *first_nonfinite_);
}

void OverflowMonitor::reset() {
  for (auto& m : stats_) m = ModuleStats{m.name, m.type, {}, {}, 0, 0};
  first_nonfinite_.reset();
}

}  // namespace mantissa::amp
