#include "autograd/view_history.h"

#include <utility>

#include "autograd/functions.h"
#include "engine/factory.h"
#include "engine/kernel_tables.h"
#include "engine/small_pool.h"

namespace mantissa::autograd {
namespace {

// Where a tensor's elements are in its storage.
struct Geometry {
  Shape sizes, strides;
  int64_t offset = 0;
  static Geometry of(const TensorImpl& t) { return {t.sizes, t.strides, t.offset}; }
};

bool overlaps(const Shape& sizes, const Shape& strides) {
  for (int64_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] > 1 && strides[d] == 0) return true;
  return false;
}

// A fresh tensor laid out like the base (same strides), on the gradient's device and dtype, so
// that the view's geometry, taken relative to the base's offset, picks the view's part of it.
Tensor like_base(const Geometry& base, const Tensor& g) {
  return empty_strided(base.sizes, base.strides, TensorOptions(g.device()).dtype(g.dtype()));
}
Tensor part(const Tensor& laid_out_like_base, const Geometry& base, const Geometry& view) {
  return detail::make_view(laid_out_like_base, view.sizes, view.strides,
                           laid_out_like_base.storage_offset() + view.offset - base.offset);
}

// The gradient of a view's base from the view's gradient: zeros with g written into the view's
// part (summed where the view repeats elements, as an expanded view does).
Tensor scatter_to_base(const Tensor& g, const Geometry& base, const Geometry& view) {
  Tensor result = like_base(base, g);
  fill_kernel(g.device())(result, 0);
  if (g.numel() == 0) return result;
  if (!overlaps(view.sizes, view.strides)) {
    detail::copy_into(part(result, base, view), g);
    return result;
  }
  // Storage positions of the view's elements, then one index_add over the base's storage span.
  const int64_t span = result.storage()->nbytes / result.element_size();
  const Tensor positions =
      part(arange(span, TensorOptions(g.device()).dtype(kInt64)), base, view).contiguous();
  Tensor flat = zeros(Shape{span}, TensorOptions(g.device()).dtype(g.dtype()));
  flat = index_add(flat, 0, positions.reshape({-1}), g.contiguous().reshape({-1}));
  return detail::make_view(flat, base.sizes, base.strides, 0);
}

// The history of a view whose base changed in place: the view's part of the base's gradient.
class AsStridedBackward final : public Node {
 public:
  AsStridedBackward(Geometry base, Geometry view, DType dtype)
      : base_(std::move(base)), view_(std::move(view)), dtype_(dtype) {}
  std::string name() const override { return "AsStridedBackward0"; }
  std::optional<DType> grad_dtype(uint32_t) const override { return dtype_; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    if (!grads[0].defined()) return {Tensor()};
    return {scatter_to_base(grads[0], base_, view_)};
  }

 private:
  Geometry base_, view_;
  DType dtype_;
};

// The base's history after an in-place op `fn` through one of its views: the incoming gradient
// goes to the base's old history, except on the view's part, which goes through fn's backward
// (whose other inputs get their gradients from it as well).
class CopySlices final : public Node {
 public:
  CopySlices(Geometry base, Geometry view, DType dtype, std::shared_ptr<FunctionNode> fn)
      : base_(std::move(base)), view_(std::move(view)), dtype_(dtype), fn_(std::move(fn)) {}
  std::string name() const override { return "CopySlices"; }
  std::optional<DType> grad_dtype(uint32_t) const override { return dtype_; }
  void release_saved() override { fn_->release_saved(); }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    std::vector<Tensor> out(next_edges.size());
    if (!grads[0].defined()) return out;
    Tensor result = like_base(base_, grads[0]);
    detail::copy_into(result, grads[0]);
    const Tensor slice = part(result, base_, view_);
    // A copy: the slice is overwritten below, and fn may hand the same tensor to another input.
    Tensor grad_slice = empty(slice.shape(), TensorOptions(slice.device()).dtype(slice.dtype()));
    detail::copy_into(grad_slice, slice);
    std::vector<Tensor> fn_grads = fn_->apply({std::move(grad_slice)});
    if (fn_grads[0].defined()) {
      detail::copy_into(slice, fn_grads[0]);
    } else if (slice.numel() > 0) {
      fill_kernel(slice.device())(slice, 0);
    }
    out[0] = std::move(result);
    for (size_t i = 1; i < fn_grads.size() && i < out.size(); ++i) out[i] = std::move(fn_grads[i]);
    return out;
  }

 private:
  Geometry base_, view_;
  DType dtype_;
  std::shared_ptr<FunctionNode> fn_;
};

// Gives `view` a history reading its part of its base's (through `base_edge`).
void set_view_history(const Tensor& view, Edge base_edge) {
  const TensorImpl& impl = *view.unsafe_impl();
  auto node = ::mantissa::detail::make_pooled<AsStridedBackward>(Geometry::of(*impl.view_base),
                                                                 Geometry::of(impl), impl.dtype);
  node->next_edges.push_back(std::move(base_edge));
  set_history(view, std::move(node));
}

}  // namespace

Tensor as_view(const Tensor& x, Tensor out) {
  TensorImpl& from = *x.unsafe_impl();
  TensorImpl& to = *out.unsafe_impl();
  to.view_base = from.view_base != nullptr ? from.view_base : x.impl_ptr();
  to.view_version = to.storage->version;
  to.view_differentiable =
      GradMode::is_enabled() && (from.view_base == nullptr || from.view_differentiable);
  return out;
}

void refresh_view_history(const Tensor& view) {
  TensorImpl& impl = *view.unsafe_impl();
  impl.view_version = impl.storage->version;
  if (!impl.view_differentiable) return;
  const TensorImpl& base = *impl.view_base;
  Edge edge = gradient_edge(Tensor(impl.view_base));
  if (edge.fn == nullptr) return;  // the base has no history, so neither has the view
  MT_CHECK(!overlaps(base.sizes, base.strides),
           "a view of a tensor whose elements overlap in memory (an expanded tensor of shape ",
           base.sizes, ", strides ", base.strides,
           ") was used after the tensor was modified in place; clone() the tensor first");
  set_view_history(view, std::move(edge));
}

bool has_internal_overlap(const Tensor& t) { return overlaps(t.shape(), t.strides()); }

void rebase_view_history(const Tensor& view, std::shared_ptr<FunctionNode> fn) {
  TensorImpl& impl = *view.unsafe_impl();
  const TensorImpl& b = *impl.view_base;
  MT_CHECK(!overlaps(b.sizes, b.strides), "in-place op on a view of a tensor whose elements ",
           "overlap in memory (an expanded tensor of shape ", b.sizes, ", strides ", b.strides,
           "); clone() the tensor first");
  const Tensor base(impl.view_base);
  auto copy_slices =
      ::mantissa::detail::make_pooled<CopySlices>(Geometry::of(b), Geometry::of(impl), b.dtype, fn);
  copy_slices->next_edges.reserve(fn->next_edges.size());
  copy_slices->next_edges.push_back(gradient_edge(base));
  for (size_t i = 1; i < fn->next_edges.size(); ++i)
    copy_slices->next_edges.push_back(fn->next_edges[i]);
  set_history(base, copy_slices);
  impl.view_version = impl.storage->version;
  set_view_history(view, Edge{std::move(copy_slices), 0});
}

}  // namespace mantissa::autograd
