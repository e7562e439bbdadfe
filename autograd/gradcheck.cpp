#include "autograd/gradcheck.h"

#include <cmath>

#include "autograd/backward.h"
#include "autograd/functions.h"
#include "autograd/node.h"

namespace mantissa::autograd {
namespace {

// Address of element `linear` (row-major over the tensor's shape) in a strided float64 tensor.
double* element(const Tensor& t, int64_t linear) {
  int64_t offset = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    offset += (linear % t.size(d)) * t.stride(d);
    linear /= t.size(d);
  }
  return static_cast<double*>(t.data_ptr()) + offset;
}

std::vector<double> evaluate(const GradcheckFn& fn, const std::vector<Tensor>& inputs) {
  NoGradGuard no_grad;
  return fn(inputs).to_vector<double>();
}

}  // namespace

bool gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, double eps, double atol,
               double rtol) {
  std::vector<size_t> checked;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].requires_grad()) continue;
    MT_CHECK(inputs[i].dtype() == kFloat64, "gradcheck: input ", i, " has dtype ",
             inputs[i].dtype(), "; gradcheck needs float64 inputs");
    checked.push_back(i);
  }
  MT_CHECK(!checked.empty(), "gradcheck: no input requires grad");

  const Tensor out = fn(inputs);
  MT_CHECK(out.dtype() == kFloat64, "gradcheck: the function returned ", out.dtype(),
           "; expected float64");
  const int64_t n_out = out.numel();
  std::vector<Tensor> wrt;
  for (size_t i : checked) wrt.push_back(inputs[i]);

  // Analytic Jacobian, one backward pass per output element.
  std::vector<std::vector<double>> analytic(checked.size());  // [input][out * numel_in + j]
  for (size_t k = 0; k < checked.size(); ++k)
    analytic[k].assign(static_cast<size_t>(n_out * inputs[checked[k]].numel()), 0.0);
  if (out.requires_grad()) {
    for (int64_t o = 0; o < n_out; ++o) {
      Tensor seed = zeros(out.shape(), TensorOptions(out.device()).dtype(kFloat64));
      *element(seed, o) = 1.0;
      auto grads = grad({out}, wrt, {seed}, /*retain_graph=*/true, /*allow_unused=*/true);
      for (size_t k = 0; k < checked.size(); ++k) {
        if (!grads[k].defined()) continue;
        const auto g = grads[k].to_vector<double>();
        for (size_t j = 0; j < g.size(); ++j) analytic[k][o * g.size() + j] = g[j];
      }
    }
  }

  // Numeric Jacobian by central differences, perturbing each input element in place.
  for (size_t k = 0; k < checked.size(); ++k) {
    const Tensor& x = inputs[checked[k]];
    const int64_t n_in = x.numel();
    for (int64_t j = 0; j < n_in; ++j) {
      double* p = element(x, j);
      const double orig = *p;
      *p = orig + eps;
      const auto plus = evaluate(fn, inputs);
      *p = orig - eps;
      const auto minus = evaluate(fn, inputs);
      *p = orig;
      for (int64_t o = 0; o < n_out; ++o) {
        const double numeric = (plus[o] - minus[o]) / (2.0 * eps);
        const double a = analytic[k][o * n_in + j];
        MT_CHECK(std::fabs(a - numeric) <= atol + rtol * std::fabs(numeric),
                 "gradcheck: Jacobian mismatch for input ", checked[k], " (shape ", x.shape(),
                 ") element ", j, ", output element ", o, ": analytic ", a, ", numeric ", numeric,
                 " (atol ", atol, ", rtol ", rtol, ")");
      }
    }
  }
  return true;
}

bool gradgradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, double eps,
                   double atol, double rtol) {
  std::vector<size_t> checked;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) checked.push_back(i);
  MT_CHECK(!checked.empty(), "gradgradcheck: no input requires grad");
  Shape out_shape;
  {
    NoGradGuard no_grad;
    out_shape = fn(inputs).shape();
  }
  // Fixed, varied, nonzero grad_outputs; an input of the checked map, so float64.
  const auto f64 = TensorOptions(inputs[checked[0]].device()).dtype(kFloat64);
  const Tensor v = (sin(arange(out_shape.numel(), f64) * 1.7 + 0.3) + 0.2)
                       .reshape(out_shape)
                       .detach()
                       .requires_grad_();
  // A formula may compute differently under create_graph (with the differentiable ops instead of
  // a kernel): the first gradient must be right, and the same in both passes, before its own
  // derivative is checked against it.
  gradcheck(fn, inputs, eps, atol, rtol);
  {
    EnableGradGuard grad_mode;
    const Tensor out = fn(inputs);
    std::vector<Tensor> wrt;
    for (size_t i : checked) wrt.push_back(inputs[i]);
    const Tensor seed = v.detach().to(out.dtype());
    const auto plain = grad({out}, wrt, {seed}, true, true, false);
    const auto recorded = grad({out}, wrt, {seed}, true, true, /*create_graph=*/true);
    for (size_t k = 0; k < wrt.size(); ++k) {
      MT_CHECK(plain[k].defined() == recorded[k].defined(), "gradgradcheck: input ", checked[k],
               " gets a gradient in only one of the plain and create_graph passes");
      if (!plain[k].defined()) continue;
      const auto a = recorded[k].to_vector<double>(), b = plain[k].to_vector<double>();
      for (size_t j = 0; j < a.size(); ++j) {
        MT_CHECK(std::fabs(a[j] - b[j]) <= atol + rtol * std::fabs(b[j]),
                 "gradgradcheck: the gradient of input ", checked[k], " (shape ", wrt[k].shape(),
                 ") element ", j, " is ", a[j], " under create_graph but ", b[j], " without it");
      }
    }
  }
  std::vector<Tensor> all = inputs;
  all.push_back(v);
  const GradcheckFn first_grads = [&fn, &checked,
                                   n = inputs.size()](const std::vector<Tensor>& xs) {
    EnableGradGuard grad_mode;  // gradcheck evaluates with grad mode off
    const std::vector<Tensor> x(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(n));
    const Tensor out = fn(x);
    std::vector<Tensor> wrt;
    for (size_t i : checked) wrt.push_back(x[i]);
    const std::vector<Tensor> gs = grad({out}, wrt, {xs.back().to(out.dtype())},
                                        /*retain_graph=*/true, /*allow_unused=*/true,
                                        /*create_graph=*/true);
    std::vector<Tensor> flat;
    for (size_t k = 0; k < gs.size(); ++k) {
      const Tensor g = gs[k].defined() ? gs[k] : zeros_like(wrt[k]);
      flat.push_back(g.to(kFloat64).reshape(Shape{-1}));
    }
    return cat(flat, 0);
  };
  return gradcheck(first_grads, all, eps, atol, rtol);
}

}  // namespace mantissa::autograd
