// Views and in-place ops, the way PyTorch keeps their gradients right.
//
// Every view made by a view op remembers its base (the tensor that is not itself a view). An
// in-place op through a view changes the base too, so its history is rewritten: the base gets a
// CopySlices node (the base's old history everywhere, the in-place op's backward on the view's
// part), and the view a history that reads its part of the base's new one. A view whose base was
// changed in place by another path (the base itself, a sibling view) finds the base's version
// moved on and takes the same kind of history the first time autograd looks at it.
#pragma once

#include <memory>

#include "autograd/recorder.h"

namespace mantissa::autograd {

// Marks `out` (just made with detail::make_view from x) as a view of x's base.
Tensor as_view(const Tensor& x, Tensor out);

// Brings a view's history up to date with its base's (see above); cheap when nothing changed.
void refresh_view_history(const Tensor& view);
inline void sync_view(const Tensor& t) {
  const TensorImpl* impl = t.unsafe_impl();
  if (impl != nullptr && impl->view_base != nullptr && impl->view_version != impl->storage->version)
      [[unlikely]]
    refresh_view_history(t);
}

// True when some element of t is stored at the same place as another (an expanded dim).
bool has_internal_overlap(const Tensor& t);

// Called by Recorder::finish_inplace for a view: gives the base a CopySlices node around `fn`
// and the view a history that reads it.
void rebase_view_history(const Tensor& view, std::shared_ptr<FunctionNode> fn);

}  // namespace mantissa::autograd
