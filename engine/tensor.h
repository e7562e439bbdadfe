// Tensor: a strided view of a Storage with a dtype, plus the slot autograd hangs its state on.
//
// Tensor is a cheap handle (one shared_ptr); copies alias the same data, as in PyTorch.
// Metadata accessors are defined here in the engine. Methods that are ops (views, math,
// conversions) are declared here and defined next to their autograd formulas in autograd/ops,
// so that every op call records its backward when grad mode asks for it.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/device.h"
#include "engine/dtype.h"
#include "engine/scalar.h"
#include "engine/shape.h"
#include "engine/storage.h"

namespace mantissa {

namespace autograd {
struct AutogradMeta;  // autograd/node.h
class Node;           // autograd/node.h
}  // namespace autograd

struct TensorImpl {
  TensorImpl() = default;
  // Copy-constructs the shapes in place: a default-constructed impl would zero both first, which
  // costs as much as the copies on the path every op's outputs and views take.
  TensorImpl(Storage s, const Shape& sizes_in, const Shape& strides_in, int64_t offset_in,
             DType dtype_in)
      : storage(std::move(s)),
        sizes(sizes_in),
        strides(strides_in),
        offset(offset_in),
        dtype(dtype_in) {
    refresh_contiguous();
  }
  // With the sizes' row-major strides (contiguous_strides): contiguous by construction.
  struct RowMajor {};
  TensorImpl(Storage s, const Shape& sizes_in, const Shape& strides_in, DType dtype_in, RowMajor)
      : storage(std::move(s)), sizes(sizes_in), strides(strides_in), dtype(dtype_in) {}

  Storage storage;
  Shape sizes;
  Shape strides;
  int64_t offset = 0;  // in elements
  DType dtype = DType::Float32;
  bool contiguous = true;
  std::shared_ptr<autograd::AutogradMeta> autograd;  // null until autograd needs it
  // Set by the view ops (autograd/view_history.h): the tensor this one is a view of, never itself
  // a view, so that an in-place op through the view can rewrite the base's history; the storage
  // version this view's history was last brought up to date at; and whether the view was made
  // with grad mode on (only those views carry gradients through in-place ops).
  std::shared_ptr<TensorImpl> view_base;
  uint32_t view_version = 0;
  bool view_differentiable = false;

  void refresh_contiguous();
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- metadata --------------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().sizes; }
  const Shape& sizes() const { return impl().sizes; }
  int64_t size(int64_t dim) const {
    const TensorImpl& i = impl();
    if (dim >= 0 && dim < i.sizes.size()) [[likely]]
      return i.sizes[dim];
    return size_wrapped(dim);
  }
  const Shape& strides() const { return impl().strides; }
  int64_t stride(int64_t dim) const {
    const TensorImpl& i = impl();
    if (dim >= 0 && dim < i.strides.size()) [[likely]]
      return i.strides[dim];
    return stride_wrapped(dim);
  }
  int64_t storage_offset() const { return impl().offset; }
  int64_t dim() const { return impl().sizes.size(); }
  int64_t numel() const { return impl().sizes.numel(); }
  DType dtype() const { return impl().dtype; }
  DType scalar_type() const { return impl().dtype; }
  Device device() const { return impl().storage->device; }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_floating_point() const { return is_floating(dtype()); }
  bool is_contiguous() const { return impl().contiguous; }
  int64_t element_size() const { return itemsize(dtype()); }
  int64_t nbytes() const { return numel() * element_size(); }
  const Storage& storage() const { return impl().storage; }
  void* data_ptr() const {
    const TensorImpl& i = impl();
    return static_cast<char*>(i.storage->data) + i.offset * itemsize(i.dtype);
  }
  template <typename T>
  T* data() const;  // checks T against dtype()
  TensorImpl* unsafe_impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  // Incremented by every in-place op on this tensor or a view of it.
  uint32_t version() const { return impl().storage->version; }
  void bump_version() const { ++impl().storage->version; }

  // ---- values ----------------------------------------------------------------------------
  template <typename T>
  T item() const;  // one-element tensor -> T (copies from the device if needed)
  template <typename T>
  std::vector<T> to_vector() const;  // every element in row-major order, converted to T
  std::string str() const;           // PyTorch-like repr

  // ---- conversions (differentiable where PyTorch's are) ----------------------------------
  // to(device, non_blocking) and to(dtype) are ops (below): with a pinned CPU side, a
  // non_blocking copy is queued on the current CUDA stream and the host does not wait for it
  // (PyTorch semantics; with pageable memory the host always waits).
  Tensor to(Device device, DType dtype) const;
  Tensor cpu() const { return to(Device::cpu()); }
  Tensor cuda(int index = 0) const { return to(Device::cuda(index)); }
  Tensor detach() const;
  // A copy in pinned (page-locked) host memory, for fast and non_blocking host<->GPU copies
  // (this tensor if already pinned). CPU tensors only; needs CUDA (engine/pinned_memory.cpp).
  Tensor pin_memory() const;
  bool is_pinned() const;

  // ---- views -----------------------------------------------------------------------------
  Tensor t() const;
  Tensor slice(int64_t dim, std::optional<int64_t> start = std::nullopt,
               std::optional<int64_t> end = std::nullopt, int64_t step = 1) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }

  // ---- ops: every overload the op list (engine/ops.def) marks MT_SIG_METHOD, with its first
  // parameter as the tensor called on: x.sum({1}, true) is mt::sum(x, {1}, true). Declared by a
  // header the build makes from the list (engine/tensor_methods.in), defined beside the ops'
  // entries (autograd/op_entries.cpp); autograd/functions.h has the whole functional API.
#include "engine/tensor_methods.h"

  // ---- in place (bump the version counter) -----------------------------------------------
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(const Scalar& value);
  Tensor& zero_() { return fill_(0); }
  Tensor& add_(const Tensor& other, const Scalar& alpha = 1);
  Tensor& add_(const Scalar& other);
  Tensor& sub_(const Tensor& other, const Scalar& alpha = 1);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(const Scalar& other);
  Tensor& div_(const Tensor& other);
  Tensor& div_(const Scalar& other);
  Tensor& masked_fill_(const Tensor& mask, const Scalar& value);
  Tensor& masked_fill_(const Tensor& mask, const Tensor& value);

  // ---- autograd (defined in autograd/) ---------------------------------------------------
  bool requires_grad() const;
  Tensor& requires_grad_(bool enabled = true);
  Tensor& set_requires_grad(bool enabled) { return requires_grad_(enabled); }
  // The accumulated gradient (undefined if none yet). Writable: optimizers update it in place.
  Tensor grad() const;
  void set_grad(const Tensor& grad) const;
  bool is_leaf() const;
  std::shared_ptr<autograd::Node> grad_fn() const;
  // create_graph records the backward pass, so that gradients can be differentiated again
  // (autograd/backward.h); it implies retain_graph.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false,
                bool create_graph = false) const;
  // Keeps .grad of a non-leaf after backward (PyTorch's retain_grad).
  void retain_grad() const;
  // Calls `hook` with this tensor's gradient during backward (non-leaf tensors: the summed
  // gradient flowing into its grad_fn; leaves: the gradient about to be accumulated). As in
  // PyTorch, a hook may return a tensor of the gradient's shape to use in its place; one that
  // returns void or an undefined tensor leaves the gradient as it is. Hooks run in registration
  // order, each seeing the previous one's result, and before retain_grad() stores the gradient.
  template <typename Hook>
  void register_hook(Hook&& hook) const {
    using Result = std::invoke_result_t<Hook&, const Tensor&>;
    if constexpr (std::is_void_v<Result>) {
      add_grad_hook([h = std::forward<Hook>(hook)](const Tensor& g) mutable {
        h(g);
        return Tensor();
      });
    } else {
      static_assert(std::is_convertible_v<Result, Tensor>,
                    "register_hook: a hook returns void or a Tensor");
      add_grad_hook(std::function<Tensor(const Tensor&)>(std::forward<Hook>(hook)));
    }
  }
  void add_grad_hook(std::function<Tensor(const Tensor&)> hook) const;
  // Leaves only (PyTorch's register_post_accumulate_grad_hook): calls `hook` with this tensor
  // once a backward pass has accumulated its gradient into .grad (the hook reads tensor.grad()).
  // Returns a handle for remove_post_accumulate_grad_hook.
  int register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const;
  void remove_post_accumulate_grad_hook(int handle) const;

 private:
  // Inline: every op and kernel reads metadata through these, many times per call.
  TensorImpl& impl() const {
    if (impl_ == nullptr) [[unlikely]]
      throw_undefined();
    return *impl_;
  }
  [[noreturn]] static void throw_undefined();
  int64_t size_wrapped(int64_t dim) const;  // negative or out-of-range dims
  int64_t stride_wrapped(int64_t dim) const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Operators (differentiable; defined with their ops in autograd/ops).
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, const Scalar& b);
Tensor operator-(const Tensor& a, const Scalar& b);
Tensor operator*(const Tensor& a, const Scalar& b);
Tensor operator/(const Tensor& a, const Scalar& b);
Tensor operator+(const Scalar& a, const Tensor& b);
Tensor operator-(const Scalar& a, const Tensor& b);
Tensor operator*(const Scalar& a, const Tensor& b);
Tensor operator/(const Scalar& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor& operator+=(Tensor& a, const Tensor& b);
Tensor& operator-=(Tensor& a, const Tensor& b);
Tensor& operator*=(Tensor& a, const Tensor& b);
Tensor& operator/=(Tensor& a, const Tensor& b);
Tensor& operator+=(Tensor& a, const Scalar& b);
Tensor& operator*=(Tensor& a, const Scalar& b);
// Comparisons return bool tensors, as in PyTorch.
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, const Scalar& b);
Tensor operator!=(const Tensor& a, const Scalar& b);
Tensor operator<(const Tensor& a, const Scalar& b);
Tensor operator<=(const Tensor& a, const Scalar& b);
Tensor operator>(const Tensor& a, const Scalar& b);
Tensor operator>=(const Tensor& a, const Scalar& b);

// ---- template definitions -----------------------------------------------------------------
namespace detail {
[[noreturn]] void throw_data_dtype_mismatch(DType want, DType have);
}

template <typename T>
T* Tensor::data() const {
  if (dtype_of_v<T> != dtype()) detail::throw_data_dtype_mismatch(dtype_of_v<T>, dtype());
  return static_cast<T*>(data_ptr());
}

}  // namespace mantissa
