// Views (sharing storage) and conversions, with their backward formulas. A view's gradient is
// the incoming gradient mapped back to the input's shape: reshaped, transposed back, or
// scattered into zeros for slices.
#include <algorithm>
#include <numeric>

#include "autograd/op_bodies.h"
#include "autograd/recorder.h"
#include "autograd/view_history.h"

namespace mantissa {
namespace {

using autograd::BackwardContext;
using autograd::DoubleBackward;
using autograd::Recorder;
using Grads = std::vector<Tensor>;

// -1 inference and numel check for view/reshape.
Shape infer_shape(const Shape& requested, int64_t numel, const char* op) {
  Shape out = requested;
  int64_t known = 1, infer_at = -1;
  for (int64_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      MT_CHECK(infer_at < 0, op, ": only one dimension can be inferred, got shape ", requested);
      infer_at = i;
    } else {
      MT_CHECK(out[i] >= 0, op, ": invalid shape dimension ", out[i], " in ", requested);
      known *= out[i];
    }
  }
  if (infer_at >= 0) {
    MT_CHECK(known != 0 && numel % known == 0, op, ": shape ", requested,
             " is invalid for input of size ", numel);
    out[infer_at] = numel / known;
  }
  MT_CHECK(out.numel() == numel, op, ": shape ", requested, " is invalid for input of size ",
           numel);
  return out;
}

// Strides for viewing (sizes, strides) as `shape` without copying, if possible (PyTorch's rule).
std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides, const Shape& shape) {
  if (sizes.numel() == 0) return contiguous_strides(shape);
  Shape old_sizes = sizes, old_strides = strides;
  if (old_sizes.empty()) {
    old_sizes = Shape{1};
    old_strides = Shape{1};
  }
  Shape out(shape.size(), 0);
  int64_t view_d = shape.size() - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = old_sizes.size() - 1; d >= 0; --d) {
    tensor_numel *= old_sizes[d];
    if (d == 0 ||
        (old_sizes[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

// A view of x (of x's base, for autograd) with the given geometry.
Tensor view_with(const Tensor& x, const Shape& sizes, const Shape& strides, int64_t offset) {
  return autograd::as_view(x, detail::make_view(x, sizes, strides, offset));
}

// Records the backward of a view whose gradient is `reshape(grad, input_shape)`.
Tensor record_reshape_like(const char* name, const Tensor& x, Tensor out) {
  if (Recorder rec{name, {&x}}) {
    rec.finish(
        out,
        [shape = x.shape()](BackwardContext& ctx) -> Grads { return {ctx.grad().reshape(shape)}; },
        DoubleBackward::Supported);
  }
  return out;
}

// Zeros of `shape` with g written into the part `view_of` picks. Under create_graph it records
// a node whose gradient is the same part of its incoming gradient, taken by `redo` (the recorded
// view op), so that it can be differentiated again.
template <typename ViewOf, typename Redo>
Tensor embed_in_zeros(const char* name, const Tensor& g, const Shape& shape, const ViewOf& view_of,
                      const Redo& redo) {
  Tensor grad_in = zeros(shape, TensorOptions(g.device()).dtype(g.dtype()));
  detail::copy_into(view_of(grad_in), g);
  if (Recorder rec{name, {&g}}) {
    rec.finish(
        grad_in, [redo](BackwardContext& ctx) -> Grads { return {redo(ctx.grad())}; },
        DoubleBackward::Supported);
  }
  return grad_in;
}

// Records the backward of a view that picks part of x: zeros with the gradient written back.
// `view_of` makes the view of a tensor shaped like x without recording; `redo` is the view op.
template <typename ViewOf, typename Redo>
Tensor record_partial_view(const char* name, const char* backward_name, const Tensor& x, Tensor out,
                           ViewOf view_of, Redo redo) {
  if (Recorder rec{name, {&x}}) {
    rec.finish(
        out,
        [shape = x.shape(), view_of, redo, backward_name](BackwardContext& ctx) -> Grads {
          return {embed_in_zeros(backward_name, ctx.grad(), shape, view_of, redo)};
        },
        DoubleBackward::Supported);
  }
  return out;
}

}  // namespace

// ---- conversions ----------------------------------------------------------------------------
Tensor to_op(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor out = empty(x.shape(), TensorOptions(x.device()).dtype(dtype));
  detail::copy_into(out, x);
  if (is_floating(dtype)) {
    if (Recorder rec{"ToCopyBackward0", {&x}}) {
      rec.finish(
          out, [from = x.dtype()](BackwardContext& ctx) -> Grads { return {ctx.grad().to(from)}; },
          DoubleBackward::Supported);
    }
  }
  return out;
}

Tensor to_op(const Tensor& x, Device device, bool non_blocking) {
  if (x.device() == device) return x;
  Tensor out = empty(x.shape(), TensorOptions(device).dtype(x.dtype()));
  detail::copy_into(out, x, non_blocking);
  if (Recorder rec{"ToCopyBackward0", {&x}}) {
    rec.finish(
        out, [from = x.device()](BackwardContext& ctx) -> Grads { return {ctx.grad().to(from)}; },
        DoubleBackward::Supported);
  }
  return out;
}

Tensor clone_op(const Tensor& x) {
  Tensor out = empty(x.shape(), TensorOptions(x.device()).dtype(x.dtype()));
  detail::copy_into(out, x);
  if (Recorder rec{"CloneBackward0", {&x}}) {
    rec.finish(
        out, [](BackwardContext& ctx) -> Grads { return {ctx.grad()}; }, DoubleBackward::Supported);
  }
  return out;
}

Tensor contiguous_op(const Tensor& x) { return x.is_contiguous() ? x : clone(x); }

Tensor Tensor::to(Device d, DType t) const { return mantissa::to(mantissa::to(*this, d), t); }

// ---- views ----------------------------------------------------------------------------------
Tensor view_op(const Tensor& x, const Shape& requested) {
  const Shape shape = infer_shape(requested, x.numel(), "view");
  auto strides = view_strides(x.shape(), x.strides(), shape);
  MT_CHECK(strides.has_value(), "view: size ", requested, " is not compatible with the input's ",
           "size ", x.shape(), " and stride ", x.strides(),
           " (at least one dimension spans across "
           "two contiguous subspaces); use reshape(...) instead");
  return record_reshape_like("ViewBackward0", x, view_with(x, shape, *strides, x.storage_offset()));
}

Tensor reshape_op(const Tensor& x, const Shape& requested) {
  const Shape shape = infer_shape(requested, x.numel(), "reshape");
  if (auto strides = view_strides(x.shape(), x.strides(), shape)) {
    return record_reshape_like("ViewBackward0", x,
                               view_with(x, shape, *strides, x.storage_offset()));
  }
  return view(clone(x), shape);
}

Tensor transpose_op(const Tensor& x, int64_t dim0, int64_t dim1) {
  const int64_t a = wrap_dim(dim0, x.dim(), "transpose"), b = wrap_dim(dim1, x.dim(), "transpose");
  if (x.dim() == 0) return x;
  Shape sizes = x.shape(), strides = x.strides();
  std::swap(sizes[a], sizes[b]);
  std::swap(strides[a], strides[b]);
  Tensor out = view_with(x, sizes, strides, x.storage_offset());
  if (Recorder rec{"TransposeBackward0", {&x}}) {
    rec.finish(
        out, [a, b](BackwardContext& ctx) -> Grads { return {ctx.grad().transpose(a, b)}; },
        DoubleBackward::Supported);
  }
  return out;
}

Tensor permute_op(const Tensor& x, const Shape& dims) {
  MT_CHECK(dims.size() == x.dim(), "permute: number of dims don't match (input has ", x.dim(),
           " dims, permutation ", dims, ")");
  Shape sizes(x.dim(), 0), strides(x.dim(), 0), inverse(x.dim(), -1);
  for (int64_t i = 0; i < x.dim(); ++i) {
    const int64_t d = wrap_dim(dims[i], x.dim(), "permute");
    MT_CHECK(inverse[d] == -1, "permute: repeated dim in permutation ", dims);
    inverse[d] = i;
    sizes[i] = x.size(d);
    strides[i] = x.stride(d);
  }
  Tensor out = view_with(x, sizes, strides, x.storage_offset());
  if (Recorder rec{"PermuteBackward0", {&x}}) {
    rec.finish(
        out, [inverse](BackwardContext& ctx) -> Grads { return {ctx.grad().permute(inverse)}; },
        DoubleBackward::Supported);
  }
  return out;
}

// Unlike slice, narrow checks its bounds instead of clamping them (as PyTorch does); a negative
// start counts from the end.
Tensor narrow_op(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  MT_CHECK(x.dim() > 0, "narrow: cannot be applied to a 0-dim tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "narrow");
  const int64_t n = x.size(d);
  MT_CHECK(length >= 0, "narrow: length must be non-negative, got ", length, " (shape ", x.shape(),
           ", dim ", d, ")");
  MT_CHECK(start >= -n && start <= n, "narrow: start out of range (expected to be in range of [",
           -n, ", ", n, "], but got ", start, ") for dimension ", d, " of shape ", x.shape());
  if (start < 0) start += n;
  MT_CHECK(start + length <= n, "narrow: start (", start, ") + length (", length,
           ") exceeds dimension size (", n, ") of dimension ", d, " of shape ", x.shape());
  return x.slice(d, start, start + length);
}

Tensor Tensor::slice(int64_t dim, std::optional<int64_t> start_opt, std::optional<int64_t> end_opt,
                     int64_t step) const {
  MT_CHECK(this->dim() > 0, "slice: cannot be applied to a 0-dim tensor");
  MT_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t d = wrap_dim(dim, this->dim(), "slice");
  const int64_t n = size(d);
  int64_t start = start_opt.value_or(0), end = end_opt.value_or(n);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape sizes = shape(), strides = this->strides();
  sizes[d] = (end - start + step - 1) / step;
  strides[d] *= step;
  Tensor out = view_with(*this, sizes, strides, storage_offset() + start * stride(d));
  return record_partial_view(
      "SliceBackward0", "SliceBackwardBackward0", *this, out,
      [d, start, end, step](const Tensor& g) {
        Shape sz = g.shape(), st = g.strides();
        sz[d] = (end - start + step - 1) / step;
        st[d] *= step;
        return detail::make_view(g, sz, st, g.storage_offset() + start * g.stride(d));
      },
      [d, start, end, step](const Tensor& g) { return g.slice(d, start, end, step); });
}

Tensor select_op(const Tensor& x, int64_t dim, int64_t index) {
  MT_CHECK(x.dim() > 0, "select: cannot be applied to a 0-dim tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "select");
  const int64_t n = x.size(d);
  MT_CHECK(index >= -n && index < n, "select: index ", index, " is out of bounds for dimension ", d,
           " with size ", n);
  const int64_t i = index < 0 ? index + n : index;
  Shape sizes = x.shape(), strides = x.strides();
  sizes.erase(d);
  strides.erase(d);
  Tensor out = view_with(x, sizes, strides, x.storage_offset() + i * x.stride(d));
  return record_partial_view(
      "SelectBackward0", "SelectBackwardBackward0", x, out,
      [d, i](const Tensor& g) {
        Shape sz = g.shape(), st = g.strides();
        const int64_t off = g.storage_offset() + i * g.stride(d);
        sz.erase(d);
        st.erase(d);
        return detail::make_view(g, sz, st, off);
      },
      [d, i](const Tensor& g) { return g.select(d, i); });
}

Tensor squeeze_op(const Tensor& x, std::optional<int64_t> dim) {
  Shape sizes, strides;
  const int64_t only = dim ? wrap_dim(*dim, x.dim(), "squeeze") : -1;
  for (int64_t i = 0; i < x.dim(); ++i) {
    const bool drop = x.size(i) == 1 && (only < 0 || i == only);
    if (!drop) {
      sizes.push_back(x.size(i));
      strides.push_back(x.stride(i));
    }
  }
  return record_reshape_like("SqueezeBackward0", x,
                             view_with(x, sizes, strides, x.storage_offset()));
}

Tensor unsqueeze_op(const Tensor& x, int64_t dim) {
  const int64_t d = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Shape sizes = x.shape(), strides = x.strides();
  const int64_t new_stride = d < x.dim() ? x.size(d) * x.stride(d) : 1;
  sizes.insert(d, 1);
  strides.insert(d, new_stride);
  return record_reshape_like("UnsqueezeBackward0", x,
                             view_with(x, sizes, strides, x.storage_offset()));
}

Tensor expand_op(const Tensor& x, const Shape& shape) {
  MT_CHECK(shape.size() >= x.dim(), "expand: the number of sizes provided (", shape.size(),
           ") must be greater or equal to the number of dimensions in the tensor (", x.dim(), ")");
  const int64_t lead = shape.size() - x.dim();
  Shape sizes(shape.size(), 0), strides(shape.size(), 0);
  for (int64_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      MT_CHECK(shape[i] >= 0, "expand: -1 is not allowed in a leading, non-existing dimension ",
               shape);
      sizes[i] = shape[i];
      continue;
    }
    const int64_t have = x.size(i - lead);
    const int64_t want = shape[i] == -1 ? have : shape[i];
    MT_CHECK(have == want || have == 1, "expand: the expanded size of the tensor (", want,
             ") must match the existing size (", have, ") at non-singleton dimension ", i,
             ". Target sizes: ", shape, ". Tensor sizes: ", x.shape());
    sizes[i] = want;
    strides[i] = have == want ? x.stride(i - lead) : 0;
  }
  if (sizes == x.shape()) return x;
  (void)sizes.numel();  // throws when the expanded element count overflows int64
  Tensor out = view_with(x, sizes, strides, x.storage_offset());
  if (Recorder rec{"ExpandBackward0", {&x}}) {
    rec.finish(
        out,
        [shape = x.shape()](BackwardContext& ctx) -> Grads {
          return {autograd::sum_to(ctx.grad(), shape)};
        },
        DoubleBackward::Supported);
  }
  return out;
}

Tensor flatten_op(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  if (x.dim() == 0) return x.reshape({1});
  const int64_t s = wrap_dim(start_dim, x.dim(), "flatten"),
                e = wrap_dim(end_dim, x.dim(), "flatten");
  MT_CHECK(s <= e, "flatten: start_dim (", start_dim, ") cannot come after end_dim (", end_dim,
           ")");
  Shape shape;
  for (int64_t i = 0; i < s; ++i) shape.push_back(x.size(i));
  int64_t merged = 1;
  for (int64_t i = s; i <= e; ++i) merged *= x.size(i);
  shape.push_back(merged);
  for (int64_t i = e + 1; i < x.dim(); ++i) shape.push_back(x.size(i));
  return x.reshape(shape);
}

std::vector<Tensor> broadcast_tensors_op(const std::vector<Tensor>& tensors) {
  if (tensors.empty()) return {};
  Shape shape = tensors[0].shape();
  for (size_t i = 1; i < tensors.size(); ++i)
    shape = broadcast_shapes(shape, tensors[i].shape(), "broadcast_tensors");
  std::vector<Tensor> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) out.push_back(t.expand(shape));
  return out;
}

Tensor Tensor::t() const {
  MT_CHECK(dim() <= 2, "t: expects a tensor with <= 2 dimensions, but self is ", dim(), "D");
  return dim() < 2 ? *this : transpose(0, 1);
}

}  // namespace mantissa
