// logsumexp, prod, cumsum/cumprod, any/all, topk and sort, with their backward formulas.
//
// logsumexp is PyTorch's composition (amax, exp, sum, log) recorded as one node whose backward
// is g * exp(x - result). prod's backward multiplies g by the product of the other elements of
// each slice, built from exclusive scans from both ends, so zeros in the input need no special
// case; cumprod's backward is a kernel that handles zeros the same way. cumsum's backward is a
// reversed cumsum (itself recorded, so it can be differentiated again). sort and topk send the
// gradient back to the indices they return (a scatter). The prod, cumprod and softmax backwards
// run kernels and are first-order only.
#include <cmath>

#include "autograd/autocast_wrapper.h"
#include "autograd/functions.h"
#include "autograd/recorder.h"
#include "engine/kernel_tables.h"

namespace mantissa {
namespace {

using autograd::BackwardContext;
using autograd::Recorder;
using Grads = std::vector<Tensor>;

Tensor alloc(const Shape& shape, DType dtype, Device device) {
  return empty(shape, TensorOptions(device).dtype(dtype));
}

// The shapes of a reduction over one dim (or, without a dim, over all of them): keep has the
// reduced dims as 1, result is what the user gets.
struct OneDimReduction {
  Shape keep, result;
};
OneDimReduction one_dim_reduction(const Tensor& x, std::optional<int64_t> dim, bool keepdim,
                                  const char* op) {
  OneDimReduction r;
  const int64_t d = dim ? wrap_dim(*dim, x.dim(), op) : -1;
  for (int64_t i = 0; i < x.dim(); ++i) {
    const bool reduced = !dim || i == d;
    r.keep.push_back(reduced ? 1 : x.size(i));
    if (!reduced || (dim && keepdim)) r.result.push_back(reduced ? 1 : x.size(i));
  }
  return r;
}

// The user-facing view of a fresh keepdim-form output (not recorded: the op records on it).
Tensor result_view(const Tensor& keep_out, const Shape& result) {
  if (keep_out.shape() == result) return keep_out;
  return detail::make_view(keep_out, result, contiguous_strides(result), keep_out.storage_offset());
}

// The dtype an integer-promoting op (prod, cumsum, cumprod) computes in: the requested one, else
// int64 for integer and bool inputs, else the input's.
DType promoted(const Tensor& x, std::optional<DType> dtype) {
  return dtype.value_or(is_integral(x.dtype(), /*include_bool=*/true) ? kInt64 : x.dtype());
}

// ---- logsumexp ------------------------------------------------------------------------------
Tensor logsumexp_body(const Tensor& input, const Shape& dims, bool keepdim) {
  // Integer inputs reduce in the default floating dtype.
  const Tensor x = is_floating(input.dtype()) ? input : input.to(kFloat32);
  // Which dims are reduced (repeats are refused by amax and sum below).
  bool reduced[kMaxDims] = {};
  for (int64_t d = 0; d < x.dim(); ++d) reduced[d] = dims.empty();
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, x.dim(), "logsumexp");
    if (x.dim() > 0) reduced[w] = true;
  }
  Shape keep, result;
  for (int64_t d = 0; d < x.dim(); ++d) {
    keep.push_back(reduced[d] ? 1 : x.size(d));
    if (!reduced[d] || keepdim) result.push_back(reduced[d] ? 1 : x.size(d));
  }
  Tensor out_keep;
  {
    autograd::NoGradGuard no_grad;
    if (x.numel() != 0) {
      // An infinite max is not taken out: inf - inf would turn the sum into NaN.
      Tensor m = amax(x, dims, true);
      m = where(abs(m) != INFINITY, m, 0.0);
      out_keep = log(sum(exp(x - m), dims, true)) + m;
    } else {
      out_keep = log(sum(exp(x), dims, true));
    }
    out_keep = out_keep.contiguous();
  }
  const Tensor out = result_view(out_keep, result);
  if (Recorder rec{"LogsumexpBackward0", {&x}}) {
    rec.save(x).save(out_keep);
    rec.finish(out, [keep](BackwardContext& ctx) -> Grads {
      const Tensor g = ctx.grad().reshape(keep);
      return {g * exp(ctx.saved(0) - ctx.saved(1))};
    });
  }
  return out;
}

// ---- prod -----------------------------------------------------------------------------------
// g (keepdim form) times the product of the other elements of x's slice along d.
Tensor prod_backward(const Tensor& g, const Tensor& x, int64_t d) {
  if (x.dim() == 0) return g.reshape(Shape{});
  const Tensor left = alloc(x.shape(), x.dtype(), x.device());
  const Tensor right = alloc(x.shape(), x.dtype(), x.device());
  cumprod_kernel(x.device())(left, x, d, /*reverse=*/false, /*exclusive=*/true);
  cumprod_kernel(x.device())(right, x, d, /*reverse=*/true, /*exclusive=*/true);
  return g * (left * right);
}

Tensor prod_body(const Tensor& x, std::optional<int64_t> dim, bool keepdim,
                 std::optional<DType> dtype) {
  const OneDimReduction r = one_dim_reduction(x, dim, keepdim, "prod");
  const DType target = promoted(x, dtype);
  // The kernel multiplies integer/bool inputs straight into int64; other requests cast first.
  const bool integral_in = is_integral(x.dtype(), true);
  const Tensor in = integral_in && is_integral(target, true) ? x : x.to(target);
  Tensor out = alloc(r.keep, is_floating(target) ? target : kInt64, x.device());
  prod_kernel(x.device())(out, in);
  Tensor res = result_view(out, r.result);
  if (!is_floating(target)) return res.dtype() == target ? res : res.to(target);
  if (Recorder rec{dim ? "ProdBackward1" : "ProdBackward0", {&in}}) {
    rec.save(in);
    const int64_t d = dim ? wrap_dim(*dim, x.dim(), "prod") : 0;
    rec.finish(res, [keep = r.keep, d, all = !dim](BackwardContext& ctx) -> Grads {
      const Tensor x = ctx.saved(0), g = ctx.grad().to(x.dtype()).reshape(keep);
      if (!all || x.dim() <= 1) return {prod_backward(g, x, d)};
      // Over everything: one slice of all elements.
      const Tensor flat = x.reshape(Shape{-1});
      return {prod_backward(g.reshape(Shape{1}), flat, 0).reshape(x.shape())};
    });
  }
  return res;
}

// ---- cumsum and cumprod ---------------------------------------------------------------------
// Inclusive sum along d, forward or reversed; each direction's backward is the other.
Tensor sum_scan(const Tensor& x, int64_t d, bool reverse) {
  Tensor out = alloc(x.shape(), x.dtype(), x.device());
  cumsum_kernel(x.device())(out, x, d, reverse, /*exclusive=*/false);
  if (is_floating(x.dtype())) {
    if (Recorder rec{"CumsumBackward0", {&x}}) {
      rec.finish(out, [d, reverse](BackwardContext& ctx) -> Grads {
        return {sum_scan(ctx.grad(), d, !reverse)};
      });
    }
  }
  return out;
}

// The input of a scan in the dtype it computes in (not bool: the kernels take numbers).
Tensor scan_input(const Tensor& x, std::optional<DType> dtype) {
  const DType target = promoted(x, dtype);
  MT_CHECK(target != kBool, "cumsum/cumprod: cannot accumulate in ", target);
  return x.dtype() == target ? x : x.to(target);
}

Tensor cumsum_body(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  const int64_t d = wrap_dim(dim, x.dim(), "cumsum");
  return sum_scan(scan_input(x, dtype), d, false);
}

Tensor cumprod_body(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  const int64_t d = wrap_dim(dim, x.dim(), "cumprod");
  const Tensor in = scan_input(x, dtype);
  Tensor out = alloc(in.shape(), in.dtype(), in.device());
  cumprod_kernel(in.device())(out, in, d, /*reverse=*/false, /*exclusive=*/false);
  if (is_floating(in.dtype())) {
    if (Recorder rec{"CumprodBackward0", {&in}}) {
      rec.save(in).save(out);
      rec.finish(out, [d](BackwardContext& ctx) -> Grads {
        const Tensor x = ctx.saved(0), y = ctx.saved(1);
        Tensor grad_in = alloc(x.shape(), x.dtype(), x.device());
        cumprod_backward_kernel(x.device())(grad_in, ctx.grad().to(x.dtype()), x, y, d);
        return {grad_in};
      });
    }
  }
  return out;
}

// ---- any and all ----------------------------------------------------------------------------
Tensor logic_reduce(const Tensor& x, std::optional<int64_t> dim, bool keepdim, bool is_all) {
  const char* op = is_all ? "all" : "any";
  const OneDimReduction r = one_dim_reduction(x, dim, keepdim, op);
  Tensor out = alloc(r.keep, x.dtype() == kUInt8 ? kUInt8 : kBool, x.device());
  (is_all ? all_kernel : any_kernel)(x.device())(out, x);
  return result_view(out, r.result);
}

// ---- sort and topk --------------------------------------------------------------------------
// Records the gradient of values = x gathered at `indices` along d: a scatter back.
void record_gather_back(const char* node, const Tensor& x, const Tensor& values,
                        const Tensor& indices, int64_t d) {
  if (!is_floating(x.dtype())) return;
  if (Recorder rec{node, {&x}}) {
    rec.save(indices);
    rec.finish(values, [d, shape = x.shape()](BackwardContext& ctx) -> Grads {
      const Tensor g = ctx.grad();
      if (shape.size() == 0) return {g.reshape(Shape{})};
      return {scatter_add(zeros(shape, TensorOptions(g.device()).dtype(g.dtype())), d, ctx.saved(0),
                          g)};
    });
  }
}

ValuesIndices sorted_along(const Tensor& x, int64_t d, bool descending) {
  Tensor values = alloc(x.shape(), x.dtype(), x.device());
  Tensor indices = alloc(x.shape(), kInt64, x.device());
  sort_kernel(x.device())(values, indices, x, d, descending);
  return {values, indices};
}

ValuesIndices sort_body(const Tensor& x, int64_t dim, bool descending) {
  const int64_t d = wrap_dim(dim, x.dim(), "sort");
  ValuesIndices res = sorted_along(x, d, descending);
  record_gather_back("SortBackward0", x, res.values, res.indices, d);
  return res;
}

ValuesIndices topk_body(const Tensor& x, int64_t k, int64_t dim, bool largest) {
  const int64_t d = wrap_dim(dim, x.dim(), "topk");
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  MT_CHECK(k >= 0 && k <= n, "topk: selected index k out of range (k = ", k, ", dim ", d,
           " of size ", n, " in input ", x.shape(), ")");
  ValuesIndices all = sorted_along(x, d, largest);
  ValuesIndices res = all;
  if (x.dim() > 0 && k < n) {
    autograd::NoGradGuard no_grad;
    res = {all.values.narrow(d, 0, k).contiguous(), all.indices.narrow(d, 0, k).contiguous()};
  }
  record_gather_back("TopkBackward0", x, res.values, res.indices, d);
  return res;
}

}  // namespace

Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim) {
  return autograd::with_autocast<OpId::logsumexp>(logsumexp_body, x, dims, keepdim);
}

Tensor prod(const Tensor& x, std::optional<DType> dtype) {
  return autograd::with_autocast<OpId::prod>(prod_body, x, std::optional<int64_t>(), false, dtype);
}
Tensor prod(const Tensor& x, int64_t dim, bool keepdim, std::optional<DType> dtype) {
  return autograd::with_autocast<OpId::prod>(prod_body, x, std::optional<int64_t>(dim), keepdim,
                                             dtype);
}

Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  return autograd::with_autocast<OpId::cumsum>(cumsum_body, x, dim, dtype);
}
Tensor cumprod(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  return autograd::with_autocast<OpId::cumprod>(cumprod_body, x, dim, dtype);
}

Tensor any(const Tensor& x) { return logic_reduce(x, std::nullopt, false, false); }
Tensor any(const Tensor& x, int64_t dim, bool keepdim) {
  return logic_reduce(x, dim, keepdim, false);
}
Tensor all(const Tensor& x) { return logic_reduce(x, std::nullopt, false, true); }
Tensor all(const Tensor& x, int64_t dim, bool keepdim) {
  return logic_reduce(x, dim, keepdim, true);
}

ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool /*sorted*/) {
  return autograd::with_autocast<OpId::topk>(topk_body, x, k, dim, largest);
}
ValuesIndices sort(const Tensor& x, int64_t dim, bool descending, bool /*stable*/) {
  return autograd::with_autocast<OpId::sort>(sort_body, x, dim, descending);
}

// ---- Tensor methods -------------------------------------------------------------------------
Tensor Tensor::logsumexp(const Shape& dims, bool keepdim) const {
  return mantissa::logsumexp(*this, dims, keepdim);
}
Tensor Tensor::prod() const { return mantissa::prod(*this); }
Tensor Tensor::prod(int64_t dim, bool keepdim) const { return mantissa::prod(*this, dim, keepdim); }
Tensor Tensor::cumsum(int64_t dim) const { return mantissa::cumsum(*this, dim); }
Tensor Tensor::cumprod(int64_t dim) const { return mantissa::cumprod(*this, dim); }
Tensor Tensor::any() const { return mantissa::any(*this); }
Tensor Tensor::any(int64_t dim, bool keepdim) const { return mantissa::any(*this, dim, keepdim); }
Tensor Tensor::all() const { return mantissa::all(*this); }
Tensor Tensor::all(int64_t dim, bool keepdim) const { return mantissa::all(*this, dim, keepdim); }

}  // namespace mantissa
