#include "engine/factory.h"

#include <cmath>
#include <cstring>

#include "engine/backend_hooks.h"
#include "engine/graph_capture.h"
#include "engine/kernel_tables.h"
#include "engine/scalar_range.h"
#include "engine/small_pool.h"

namespace mantissa {
namespace {

Tensor finish(Tensor t, const TensorOptions& options) {
  if (options.requires_grad_) {
    MT_CHECK(is_floating(t.dtype()), "only floating-point tensors can require gradients, got ",
             t.dtype());
    t.requires_grad_(true);
  }
  return t;
}

// full and full_like: `op` names the refusal of a value the dtype cannot hold.
Tensor filled(const char* op, const Shape& shape, const Scalar& value,
              const TensorOptions& options) {
  TensorOptions o = options;
  if (!o.dtype_) o.dtype_ = value.is_floating() ? kFloat32 : value.is_bool() ? kBool : kInt64;
  check_fits(op, value, *o.dtype_);
  Tensor t = empty(shape, o.requires_grad(false));
  fill_kernel(t.device())(t, value);
  return finish(t, options);
}

Tensor allocate(const Shape& shape, const Shape& strides, DType dtype, Device device) {
  for (int64_t s : shape) MT_CHECK(s >= 0, "empty: negative dimension in shape ", shape);
  const int64_t extent = checked_extent(shape, strides, "empty_strided");
  const int64_t bytes = checked_nbytes(Shape{extent}, itemsize(dtype), "empty_strided");
  return Tensor(detail::make_pooled<TensorImpl>(
      detail::make_pooled<StorageImpl>(static_cast<size_t>(bytes), device), shape, strides, 0,
      dtype));
}

Generator& pick(Generator* gen, Device device) { return gen ? *gen : default_generator(device); }
// The counters for `t`'s elements, from `gen` or the device's default generator.
PhiloxState draw(Generator* gen, const Tensor& t, const char* op) {
  detail::not_capturable(t.device(), detail::Uncapturable::RandomDraw, op);
  return pick(gen, t.device()).advance(static_cast<uint64_t>(t.numel()));
}

}  // namespace

Tensor empty(const Shape& shape, const TensorOptions& options) {
  if (!options.device_.is_cpu()) check_device_exists(options.device_);
  // Every op's outputs come through here: the strides (as contiguous_strides makes them), the
  // size check and the element count in one pass, and no contiguity check.
  Shape strides = shape;
  int64_t stride = 1, numel = 1;
  bool overflow = false;
  for (int64_t i = shape.size() - 1; i >= 0; --i) {
    const int64_t n = shape[i];
    MT_CHECK(n >= 0, "empty: negative dimension in shape ", shape);
    strides[i] = stride;
    overflow |= __builtin_mul_overflow(stride, n > 1 ? n : 1, &stride);
    overflow |= __builtin_mul_overflow(numel, n, &numel);
  }
  const DType dtype = options.dtype_or(kFloat32);
  int64_t bytes = 0;
  overflow |= __builtin_mul_overflow(numel, itemsize(dtype), &bytes);
  // An empty shape may overflow on the way (the 0 comes last); then it has no elements.
  if (overflow) [[unlikely]] {
    bool has_zero = false;
    for (int64_t n : shape) has_zero |= n == 0;
    if (!has_zero) (void)checked_nbytes(shape, itemsize(dtype), "empty");  // throws
    bytes = 0;
  }
  Tensor t(detail::make_pooled<TensorImpl>(
      detail::make_pooled<StorageImpl>(static_cast<size_t>(bytes), options.device_), shape, strides,
      dtype, TensorImpl::RowMajor{}));
  return finish(std::move(t), options);
}

Tensor empty_strided(const Shape& shape, const Shape& strides, const TensorOptions& options) {
  MT_CHECK(shape.size() == strides.size(), "empty_strided: shape ", shape, " and strides ", strides,
           " have different lengths");
  check_device_exists(options.device_);
  return finish(allocate(shape, strides, options.dtype_or(kFloat32), options.device_), options);
}

Tensor full(const Shape& shape, const Scalar& value, const TensorOptions& options) {
  return filled("full", shape, value, options);
}

Tensor zeros(const Shape& shape, const TensorOptions& options) {
  return full(shape, 0.0, options.dtype(options.dtype_or(kFloat32)));
}
Tensor ones(const Shape& shape, const TensorOptions& options) {
  return full(shape, 1.0, options.dtype(options.dtype_or(kFloat32)));
}
Tensor scalar_tensor(const Scalar& value, const TensorOptions& options) {
  return full(Shape{}, value, options);
}

Tensor empty_like(const Tensor& t, std::optional<DType> dtype) {
  return empty(t.shape(), TensorOptions(t.device()).dtype(dtype.value_or(t.dtype())));
}
Tensor zeros_like(const Tensor& t, std::optional<DType> dtype) { return full_like(t, 0, dtype); }
Tensor ones_like(const Tensor& t, std::optional<DType> dtype) { return full_like(t, 1, dtype); }
Tensor full_like(const Tensor& t, const Scalar& value, std::optional<DType> dtype) {
  return filled("full_like", t.shape(), value,
                TensorOptions(t.device()).dtype(dtype.value_or(t.dtype())));
}

Tensor arange(const Scalar& end, const TensorOptions& options) {
  return arange(0, end, 1, options);
}

Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step,
              const TensorOptions& options) {
  const bool integral = !start.is_floating() && !end.is_floating() && !step.is_floating();
  const DType dtype = options.dtype_or(integral ? kInt64 : kFloat32);
  const double s = start.to_double(), e = end.to_double(), st = step.to_double();
  MT_CHECK(st != 0.0, "arange: step must be nonzero");
  MT_CHECK(std::isfinite(s) && std::isfinite(e), "arange: unsupported range ", s, " -> ", e);
  MT_CHECK((st > 0 && e >= s) || (st < 0 && e <= s), "arange: upper bound and larger bound ",
           "inconsistent with step sign (start ", s, ", end ", e, ", step ", st, ")");
  const int64_t n =
      integral
          ? (end.to_int64() - start.to_int64() + step.to_int64() - (step.to_int64() > 0 ? 1 : -1)) /
                step.to_int64()
          : static_cast<int64_t>(std::ceil((e - s) / st));
  Tensor t = empty({n}, options.dtype(dtype).requires_grad(false));
  if (n > 0) arange_kernel(t.device())(t, start, step);
  return finish(t, options);
}

Tensor linspace(double start, double end, int64_t steps, const TensorOptions& options) {
  MT_CHECK(steps >= 0, "linspace: number of steps must be non-negative, got ", steps);
  Tensor t = empty({steps}, options.dtype(options.dtype_or(kFloat32)).requires_grad(false));
  if (steps > 0) linspace_kernel(t.device())(t, start, end);
  return finish(t, options);
}

Tensor& uniform_(Tensor& t, double low, double high, Generator* gen) {
  MT_CHECK(low <= high, "uniform_: expects low <= high, got low ", low, " and high ", high);
  uniform_kernel(t.device())(t, low, high, draw(gen, t, "uniform_"));
  t.bump_version();
  return t;
}
Tensor& normal_(Tensor& t, double mean, double stddev, Generator* gen) {
  MT_CHECK(stddev >= 0.0, "normal_: expects std >= 0.0, got ", stddev);
  normal_kernel(t.device())(t, mean, stddev, draw(gen, t, "normal_"));
  t.bump_version();
  return t;
}
Tensor& bernoulli_(Tensor& t, double p, Generator* gen) {
  MT_CHECK(p >= 0.0 && p <= 1.0, "bernoulli_: expects 0 <= p <= 1, got ", p);
  bernoulli_kernel(t.device())(t, p, draw(gen, t, "bernoulli_ (dropout)"));
  t.bump_version();
  return t;
}

Tensor rand(const Shape& shape, const TensorOptions& options, Generator* gen) {
  Tensor t = empty(shape, options.requires_grad(false));
  MT_CHECK(is_floating(t.dtype()), "rand: expected a floating dtype, got ", t.dtype());
  uniform_(t, 0.0, 1.0, gen);
  return finish(t, options);
}
Tensor randn(const Shape& shape, const TensorOptions& options, Generator* gen) {
  Tensor t = empty(shape, options.requires_grad(false));
  MT_CHECK(is_floating(t.dtype()), "randn: expected a floating dtype, got ", t.dtype());
  normal_(t, 0.0, 1.0, gen);
  return finish(t, options);
}
Tensor randint(int64_t low, int64_t high, const Shape& shape, const TensorOptions& options,
               Generator* gen) {
  MT_CHECK(low < high, "randint: expects low < high, got low ", low, " and high ", high);
  Tensor t = empty(shape, options.dtype(options.dtype_or(kInt64)).requires_grad(false));
  randint_kernel(t.device())(t, low, high, draw(gen, t, "randint"));
  return finish(t, options);
}
Tensor rand_like(const Tensor& t, Generator* gen) {
  return rand(t.shape(), TensorOptions(t.device()).dtype(t.dtype()), gen);
}
Tensor randn_like(const Tensor& t, Generator* gen) {
  return randn(t.shape(), TensorOptions(t.device()).dtype(t.dtype()), gen);
}

template <typename T>
Tensor from_vector(const std::vector<T>& values, std::optional<Shape> shape,
                   const TensorOptions& options) {
  const Shape s = shape.value_or(Shape{static_cast<int64_t>(values.size())});
  MT_CHECK(s.numel() == static_cast<int64_t>(values.size()), "from_vector: shape ", s, " needs ",
           s.numel(), " values, got ", values.size());
  Tensor host = empty(s, TensorOptions(dtype_of_v<T>));
  if constexpr (std::is_same_v<T, bool>) {
    auto* p = host.data<bool>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  } else if (!values.empty()) {
    std::memcpy(host.data_ptr(), values.data(), values.size() * sizeof(T));
  }
  const DType dtype = options.dtype_or(dtype_of_v<T>);
  Tensor out = host;
  if (dtype != host.dtype() || options.device_ != host.device()) {
    out = empty(s, TensorOptions(options.device_).dtype(dtype));
    detail::copy_into(out, host);
  }
  return finish(out, options);
}
#define MT_INSTANTIATE_FROM_VECTOR(T) \
  template Tensor from_vector<T>(const std::vector<T>&, std::optional<Shape>, const TensorOptions&);
MT_INSTANTIATE_FROM_VECTOR(float)
MT_INSTANTIATE_FROM_VECTOR(double)
MT_INSTANTIATE_FROM_VECTOR(Half)
MT_INSTANTIATE_FROM_VECTOR(BFloat16)
MT_INSTANTIATE_FROM_VECTOR(int32_t)
MT_INSTANTIATE_FROM_VECTOR(int64_t)
MT_INSTANTIATE_FROM_VECTOR(uint8_t)
MT_INSTANTIATE_FROM_VECTOR(bool)
#undef MT_INSTANTIATE_FROM_VECTOR

Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device,
                 std::function<void(void*)> deleter) {
  return from_blob(data, shape, contiguous_strides(shape), dtype, device, std::move(deleter));
}

Tensor from_blob(void* data, const Shape& shape, const Shape& strides, DType dtype, Device device,
                 std::function<void(void*)> deleter) {
  check_device_exists(device);
  MT_CHECK(shape.size() == strides.size(), "from_blob: shape ", shape, " and strides ", strides,
           " have different lengths");
  const int64_t extent = checked_extent(shape, strides, "from_blob");
  const int64_t bytes = checked_nbytes(Shape{extent}, itemsize(dtype), "from_blob");
  return Tensor(detail::make_pooled<TensorImpl>(
      std::make_shared<StorageImpl>(data, static_cast<size_t>(bytes), device, std::move(deleter)),
      shape, strides, 0, dtype));
}

namespace detail {

Tensor make_view(const Tensor& t, const Shape& sizes, const Shape& strides, int64_t offset) {
  return Tensor(detail::make_pooled<TensorImpl>(t.storage(), sizes, strides, offset, t.dtype()));
}

Tensor dense(const Tensor& t) {
  if (!t.defined() || t.is_contiguous()) return t;
  Tensor c = empty(t.shape(), TensorOptions(t.device()).dtype(t.dtype()));
  copy_into(c, t);
  return c;
}

void copy_into(const Tensor& dst, const Tensor& src, bool non_blocking) {
  Tensor s = src;
  if (!(s.shape() == dst.shape())) {
    const Shape b = broadcast_shapes(dst.shape(), s.shape(), "copy_");
    MT_CHECK(b == dst.shape(), "copy_: source of shape ", src.shape(),
             " cannot be broadcast to destination of shape ", dst.shape());
    Shape strides(dst.dim(), 0);
    const int64_t lead = dst.dim() - s.dim();
    for (int64_t i = 0; i < s.dim(); ++i) strides[lead + i] = s.size(i) == 1 ? 0 : s.stride(i);
    s = make_view(s, dst.shape(), strides, s.storage_offset());
  }
  if (dst.numel() == 0) return;
  if (dst.device() == s.device()) {
    copy_kernel(dst.device())(dst, s);
    return;
  }
  // Across devices: materialise a dense copy on the source device (in the source dtype), move
  // the bytes, then let the destination device's copy kernel convert and scatter.
  Tensor dense = s;
  if (!s.is_contiguous()) {
    dense = empty(s.shape(), TensorOptions(s.device()).dtype(s.dtype()));
    copy_kernel(s.device())(dense, s);
  }
  Tensor staged = dst;
  if (!dst.is_contiguous() || dst.dtype() != dense.dtype())
    staged = empty(dst.shape(), TensorOptions(dst.device()).dtype(dense.dtype()));
  const CudaHooks* hooks = cuda_hooks();
  MT_CHECK(hooks != nullptr, "copy_: cannot copy between ", s.device(), " and ", dst.device(),
           " in a build without CUDA");
  // A staging buffer is pageable memory that dies here, so only a direct copy may be asynchronous.
  hooks->copy_bytes(staged.data_ptr(), staged.device(), dense.data_ptr(), dense.device(),
                    static_cast<size_t>(dense.nbytes()),
                    non_blocking && dense.is_same(s) && staged.is_same(dst));
  if (!staged.is_same(dst)) copy_kernel(dst.device())(dst, staged);
}

}  // namespace detail
}  // namespace mantissa
