// Creating tensors: empty/zeros/ones/full, ranges, random, and from host data.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <vector>

#include "engine/generator.h"
#include "engine/tensor.h"

namespace mantissa {

// What a new tensor is: dtype (float32 when unset, int64 for randint/integer arange), device,
// and whether it requires grad. Converts implicitly from a DType or a Device, as in
// `zeros({2, 3}, kFloat16)` or `randn({4}, device)`.
struct TensorOptions {
  TensorOptions() = default;
  TensorOptions(DType d) : dtype_(d) {}                // NOLINT
  TensorOptions(Device d) : device_(d) {}              // NOLINT
  TensorOptions(DeviceType t) : device_(Device(t)) {}  // NOLINT
  TensorOptions dtype(DType d) const {
    auto o = *this;
    o.dtype_ = d;
    return o;
  }
  TensorOptions device(Device d) const {
    auto o = *this;
    o.device_ = d;
    return o;
  }
  TensorOptions requires_grad(bool r = true) const {
    auto o = *this;
    o.requires_grad_ = r;
    return o;
  }
  DType dtype_or(DType fallback) const { return dtype_.value_or(fallback); }

  std::optional<DType> dtype_;
  Device device_ = Device::cpu();
  bool requires_grad_ = false;
};

Tensor empty(const Shape& shape, const TensorOptions& options = {});
Tensor empty_strided(const Shape& shape, const Shape& strides, const TensorOptions& options = {});
Tensor zeros(const Shape& shape, const TensorOptions& options = {});
Tensor ones(const Shape& shape, const TensorOptions& options = {});
Tensor full(const Shape& shape, const Scalar& value, const TensorOptions& options = {});
Tensor scalar_tensor(const Scalar& value, const TensorOptions& options = {});
// *_like: same shape, dtype and device as `t` unless the options say otherwise.
Tensor empty_like(const Tensor& t, std::optional<DType> dtype = std::nullopt);
Tensor zeros_like(const Tensor& t, std::optional<DType> dtype = std::nullopt);
Tensor ones_like(const Tensor& t, std::optional<DType> dtype = std::nullopt);
Tensor full_like(const Tensor& t, const Scalar& value, std::optional<DType> dtype = std::nullopt);

// [start, end) with `step`; int64 when all three are integers, else float32 (or options' dtype).
Tensor arange(const Scalar& end, const TensorOptions& options = {});
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1,
              const TensorOptions& options = {});
Tensor linspace(double start, double end, int64_t steps, const TensorOptions& options = {});

// Random tensors from the device's default generator (or `gen`).
Tensor rand(const Shape& shape, const TensorOptions& options = {}, Generator* gen = nullptr);
Tensor randn(const Shape& shape, const TensorOptions& options = {}, Generator* gen = nullptr);
Tensor randint(int64_t low, int64_t high, const Shape& shape, const TensorOptions& options = {},
               Generator* gen = nullptr);
Tensor rand_like(const Tensor& t, Generator* gen = nullptr);
Tensor randn_like(const Tensor& t, Generator* gen = nullptr);
// In-place fills (no autograd history; bump the version counter).
Tensor& uniform_(Tensor& t, double low = 0.0, double high = 1.0, Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean = 0.0, double stddev = 1.0, Generator* gen = nullptr);
Tensor& bernoulli_(Tensor& t, double p, Generator* gen = nullptr);

// From host data (copied). The shape defaults to 1-D.
template <typename T>
Tensor from_vector(const std::vector<T>& values, std::optional<Shape> shape = std::nullopt,
                   const TensorOptions& options = {});
template <typename T>
Tensor tensor(std::initializer_list<T> values, const TensorOptions& options = {}) {
  return from_vector(std::vector<T>(values), std::nullopt, options);
}
// Wraps memory owned elsewhere (not copied). `deleter`, if given, runs when the last view dies.
Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device = Device::cpu(),
                 std::function<void(void*)> deleter = {});
Tensor from_blob(void* data, const Shape& shape, const Shape& strides, DType dtype,
                 Device device = Device::cpu(), std::function<void(void*)> deleter = {});

namespace detail {
// A view sharing t's storage (no autograd recording; the autograd layer wraps this).
Tensor make_view(const Tensor& t, const Shape& sizes, const Shape& strides, int64_t offset);
// dst <- src with dtype conversion and broadcasting of src to dst's shape; any devices.
void copy_into(const Tensor& dst, const Tensor& src, bool non_blocking = false);
// t itself if undefined or contiguous, else a contiguous copy (no autograd recording).
Tensor dense(const Tensor& t);
// Calls body(o) with a contiguous o that ends up in `out`: out itself when contiguous, else a
// temporary copied into out afterwards. For kernels that only write dense memory.
template <typename Body>
void with_dense_out(const Tensor& out, const Body& body) {
  if (out.is_contiguous()) {
    body(out);
    return;
  }
  Tensor tmp = empty(out.shape(), TensorOptions(out.device()).dtype(out.dtype()));
  body(tmp);
  copy_into(out, tmp);
}
}  // namespace detail

}  // namespace mantissa
