// Tensor's math methods and operators, and the in-place forms, all expressed with the
// functional ops. In-place ops refuse leaves that require grad, bump the version counter, and
// when recording, make the new node self's history (and its base's, for a view).
#include "autograd/ops/elementwise_common.h"
#include "engine/scalar_range.h"

namespace mantissa {
namespace {

using autograd::BackwardContext;
using autograd::Recorder;
using Grads = std::vector<Tensor>;

void check_inplace_types(const char* op, const Tensor& self, DType result, const Shape& other) {
  const auto rank = [](DType t) { return t == kBool ? 0 : is_floating(t) ? 2 : 1; };
  MT_CHECK(rank(result) <= rank(self.dtype()), op, ": result type ", result,
           " can't be cast to the desired output type ", self.dtype());
  const Shape shape = broadcast_shapes(self.shape(), other, op);
  MT_CHECK(shape == self.shape(), op, ": output with shape ", self.shape(),
           " doesn't match the broadcast shape ", shape);
}

// Runs kernel(out, self, other) for an in-place op whose promoted dtype is `r`. PyTorch computes
// in `r` and rounds once into self: float16 self += float32 other must not round `other` to
// float16 first (1 + (2^-11 + 2^-20) is 1 + 2^-10 in float16, not a tie rounded down to 1).
template <typename Kernel>
void compute_inplace(const Tensor& self, const Tensor& other, DType r, Kernel kernel) {
  if (r == self.dtype()) {
    const Tensor o = other.dtype() == r ? other : other.detach().to(r);
    kernel(self, self, ops::broadcast_view(o, self.shape()));
    return;
  }
  Tensor tmp = empty(self.shape(), TensorOptions(self.device()).dtype(r));
  kernel(tmp, self.detach().to(r), ops::broadcast_view(other.detach().to(r), self.shape()));
  detail::copy_into(self, tmp);
}

// self = self + alpha * other, in place.
Tensor& add_inplace(Tensor& self, const Tensor& other, const Scalar& alpha, const char* op) {
  autograd::check_inplace(op, self, {&other});
  ops::check_same_device(op, self, other);
  const DType r = result_type(self, other);
  check_inplace_types(op, self, r, other.shape());
  Recorder rec{"AddBackward0", {&self, &other}};  // edges capture self's old history
  compute_inplace(self, other, r, [&](const Tensor& out, const Tensor& a, const Tensor& b) {
    add_kernel(self.device())(out, a, b, alpha);
  });
  self.bump_version();
  if (rec) {
    rec.finish_inplace(self,
                       [alpha, sa = self.shape(), sb = other.shape(),
                        tb = other.dtype()](BackwardContext& ctx) -> Grads {
                         const Tensor g = ctx.grad();
                         Tensor gb;
                         if (ctx.needs(1)) gb = autograd::sum_to(g * alpha, sb).to(tb);
                         return {ctx.needs(0) ? g : Tensor(), gb};
                       });
  }
  return self;
}

// self = self op other for mul/div, in place.
Tensor& muldiv_inplace(Tensor& self, const Tensor& other, bool divide) {
  const char* op = divide ? "div_" : "mul_";
  autograd::check_inplace(op, self, {&other});
  ops::check_same_device(op, self, other);
  DType r = result_type(self, other);
  if (divide && !is_floating(r)) r = kFloat32;
  check_inplace_types(op, self, r, other.shape());
  Recorder rec{divide ? "DivBackward0" : "MulBackward0", {&self, &other}};
  if (rec) rec.save(self.clone().detach()).save(other);
  compute_inplace(self, other, r, (divide ? div_kernel : mul_kernel)(self.device()));
  self.bump_version();
  if (rec) {
    rec.finish_inplace(self,
                       [divide, sa = self.shape(), sb = other.shape(),
                        tb = other.dtype()](BackwardContext& ctx) -> Grads {
                         const Tensor g = ctx.grad(), x = ctx.saved(0),
                                      y = ctx.saved(1).to(g.dtype());
                         Tensor gx, gy;
                         if (ctx.needs(0)) gx = autograd::sum_to(divide ? g / y : g * y, sa);
                         if (ctx.needs(1))
                           gy = autograd::sum_to(divide ? -g * x / (y * y) : g * x, sb).to(tb);
                         return {gx, gy};
                       });
  }
  return self;
}

}  // namespace

// ---- methods --------------------------------------------------------------------------------

// ---- in place -------------------------------------------------------------------------------
Tensor& Tensor::copy_(const Tensor& src) {
  autograd::check_inplace("copy_", *this, {&src});
  Recorder rec{"CopyBackwards", {this, &src}};
  detail::copy_into(*this, src);
  bump_version();
  if (rec) {
    rec.finish_inplace(
        *this,
        [ss = src.shape(), st = src.dtype(), sd = src.device()](BackwardContext& ctx) -> Grads {
          const Tensor g = ctx.grad();
          return {ctx.needs(0) ? zeros_like(g) : Tensor(),
                  ctx.needs(1) ? autograd::sum_to(g, ss).to(sd).to(st) : Tensor()};
        });
  }
  return *this;
}

Tensor& Tensor::fill_(const Scalar& value) {
  autograd::check_inplace("fill_", *this);
  check_fits("fill_", value, dtype());
  fill_kernel(device())(*this, value);
  bump_version();
  if (requires_grad() && autograd::GradMode::is_enabled()) {
    Recorder rec{"FillBackward0", {this}};
    rec.finish_inplace(*this,
                       [](BackwardContext& ctx) -> Grads { return {zeros_like(ctx.grad())}; });
  }
  return *this;
}

Tensor& Tensor::add_(const Tensor& o, const Scalar& alpha) {
  return add_inplace(*this, o, alpha, "add_");
}
Tensor& Tensor::add_(const Scalar& o) {
  return add_inplace(*this, ops::scalar_operand(*this, o), 1, "add_");
}
Tensor& Tensor::sub_(const Tensor& o, const Scalar& alpha) {
  MT_CHECK(dtype() != kBool && o.dtype() != kBool,
           "sub_: subtraction, the `-` operator, with a "
           "bool tensor is not supported; use logical_not() to invert a mask");
  const Scalar neg = alpha.is_floating() ? Scalar(-alpha.to_double()) : Scalar(-alpha.to_int64());
  return add_inplace(*this, o, neg, "sub_");
}
Tensor& Tensor::mul_(const Tensor& o) { return muldiv_inplace(*this, o, false); }
Tensor& Tensor::mul_(const Scalar& o) {
  return muldiv_inplace(*this, ops::scalar_operand(*this, o), false);
}
Tensor& Tensor::div_(const Tensor& o) { return muldiv_inplace(*this, o, true); }
Tensor& Tensor::div_(const Scalar& o) {
  return muldiv_inplace(*this, ops::scalar_operand(*this, o), true);
}

// ---- operators ------------------------------------------------------------------------------
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, const Scalar& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Scalar& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Scalar& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Scalar& b) { return div(a, b); }
Tensor operator+(const Scalar& a, const Tensor& b) { return add(b, a); }
Tensor operator-(const Scalar& a, const Tensor& b) { return sub(ops::scalar_operand(b, a), b); }
Tensor operator*(const Scalar& a, const Tensor& b) { return mul(b, a); }
Tensor operator/(const Scalar& a, const Tensor& b) { return div(ops::scalar_operand(b, a), b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor& operator+=(Tensor& a, const Tensor& b) { return a.add_(b); }
Tensor& operator-=(Tensor& a, const Tensor& b) { return a.sub_(b); }
Tensor& operator*=(Tensor& a, const Tensor& b) { return a.mul_(b); }
Tensor& operator/=(Tensor& a, const Tensor& b) { return a.div_(b); }
Tensor& operator+=(Tensor& a, const Scalar& b) { return a.add_(b); }
Tensor& operator*=(Tensor& a, const Scalar& b) { return a.mul_(b); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, const Scalar& b) { return eq(a, ops::scalar_operand(a, b)); }
Tensor operator!=(const Tensor& a, const Scalar& b) { return ne(a, ops::scalar_operand(a, b)); }
Tensor operator<(const Tensor& a, const Scalar& b) { return lt(a, ops::scalar_operand(a, b)); }
Tensor operator<=(const Tensor& a, const Scalar& b) { return le(a, ops::scalar_operand(a, b)); }
Tensor operator>(const Tensor& a, const Scalar& b) { return gt(a, ops::scalar_operand(a, b)); }
Tensor operator>=(const Tensor& a, const Scalar& b) { return ge(a, ops::scalar_operand(a, b)); }

Tensor logical_and_op(const Tensor& a, const Tensor& b) {
  return where(a.to(kBool), b.to(kBool), zeros({}, TensorOptions(a.device()).dtype(kBool)));
}
Tensor logical_or_op(const Tensor& a, const Tensor& b) {
  return where(a.to(kBool), ones({}, TensorOptions(a.device()).dtype(kBool)), b.to(kBool));
}
Tensor logical_not_op(const Tensor& a) { return a.to(kBool) == false; }
Tensor operator&(const Tensor& a, const Tensor& b) { return logical_and(a, b); }
Tensor operator|(const Tensor& a, const Tensor& b) { return logical_or(a, b); }
Tensor operator!(const Tensor& a) { return logical_not(a); }

}  // namespace mantissa
