#include "nn/clip_grad.h"

#include <cmath>

#include "autograd/functions.h"
#include "autograd/node.h"
#include "engine/error.h"

namespace mantissa::nn {
namespace {

std::vector<Tensor> defined_grads(const std::vector<Tensor>& parameters) {
  std::vector<Tensor> grads;
  for (const Tensor& p : parameters) {
    if (!p.defined()) continue;
    if (Tensor g = p.grad(); g.defined()) grads.push_back(g.detach());
  }
  return grads;
}

// PyTorch computes the clip coefficient as 0-d tensor ops in the total norm's dtype:
// clamp(max_norm * reciprocal(total + 1e-6), max=1). Doing the same in that precision on the
// host keeps the scaled gradients identical.
template <typename M>
double coefficient_in(double total, double max_norm) {
  const M coef = (M(1) / (static_cast<M>(total) + static_cast<M>(1e-6))) * static_cast<M>(max_norm);
  return static_cast<double>(coef > M(1) ? M(1) : coef);  // clamp keeps NaN
}

// The norm of the per-gradient norms (each on its gradient's device, then on the first
// gradient's, in the promoted dtype), as a 0-d tensor; `dtype` receives that dtype.
Tensor total_norm(const std::vector<Tensor>& grads, double norm_type, DType* dtype) {
  *dtype = grads[0].dtype();
  for (const Tensor& g : grads) *dtype = promote_types(*dtype, g.dtype());
  std::vector<Tensor> norms;
  norms.reserve(grads.size());
  for (const Tensor& g : grads) norms.push_back(norm(g, norm_type).to(grads[0].device(), *dtype));
  return norm(stack(norms), norm_type);
}

}  // namespace

double clip_coefficient(double total, double max_norm, DType dtype) {
  return dtype == kFloat64 ? coefficient_in<double>(total, max_norm)
                           : coefficient_in<float>(total, max_norm);
}

double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  autograd::NoGradGuard no_grad;
  const std::vector<Tensor> grads = defined_grads(parameters);
  if (grads.empty()) return 0.0;
  DType dtype;
  const double total = total_norm(grads, norm_type, &dtype).item<double>();
  if (error_if_nonfinite && !std::isfinite(total)) {
    MT_THROW("clip_grad_norm_: The total norm of order ", norm_type,
             " for gradients from `parameters` is non-finite, so it cannot be clipped. To "
             "disable this error and scale the gradients by the non-finite norm anyway, set "
             "`error_if_nonfinite=False`");
  }
  const double coef = clip_coefficient(total, max_norm, dtype);
  if (!(coef >= 1.0)) {  // also scales by a NaN coefficient, as PyTorch does
    for (Tensor g : grads) g.mul_(coef);
  }
  return total;
}

Tensor clip_grad_norm_on_device_(const std::vector<Tensor>& parameters, double max_norm) {
  autograd::NoGradGuard no_grad;
  const std::vector<Tensor> grads = defined_grads(parameters);
  if (grads.empty()) return Tensor();
  DType dtype;
  const Tensor total = total_norm(grads, 2.0, &dtype);
  // clip_coefficient's operations, one by one in the norm's dtype; clamp keeps NaN.
  const Tensor coef = clamp(reciprocal(total + 1e-6) * max_norm, std::nullopt, 1.0);
  for (Tensor g : grads) g.mul_(coef.to(g.device()));
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value) {
  autograd::NoGradGuard no_grad;
  for (Tensor g : defined_grads(parameters)) g.copy_(clamp(g, -clip_value, clip_value));
}

}  // namespace mantissa::nn
