#include "engine/tensor.h"

#include <ostream>

#include "engine/factory.h"
#include "engine/graph_capture.h"

namespace mantissa {

void TensorImpl::refresh_contiguous() {
  int64_t expected = 1;
  contiguous = true;
  for (int64_t i = sizes.size() - 1; i >= 0; --i) {
    if (sizes[i] == 1) continue;
    if (sizes[i] == 0) {
      contiguous = true;
      return;
    }
    if (strides[i] != expected) contiguous = false;
    expected *= sizes[i];
  }
}

void Tensor::throw_undefined() {
  MT_THROW("operation on an undefined tensor (default-constructed Tensor)");
}

int64_t Tensor::size_wrapped(int64_t d) const {
  const TensorImpl& i = impl();
  return i.sizes[wrap_dim(d, i.sizes.size(), "size")];
}
int64_t Tensor::stride_wrapped(int64_t d) const {
  const TensorImpl& i = impl();
  return i.strides[wrap_dim(d, i.strides.size(), "stride")];
}

template <typename T>
T Tensor::item() const {
  MT_CHECK(defined() && numel() == 1, "item: a Tensor with ", defined() ? numel() : 0,
           " elements cannot be converted to a scalar (shape ", defined() ? shape() : Shape{}, ")");
  detail::not_capturable(device(), detail::Uncapturable::HostRead, "item()");
  T value{};
  Tensor host = from_blob(&value, Shape{}, dtype_of_v<T>);
  detail::copy_into(host, detail::make_view(*this, Shape{}, Shape{}, storage_offset()));
  return value;
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  std::vector<T> out(static_cast<size_t>(numel()));
  if (out.empty()) return out;
  detail::not_capturable(device(), detail::Uncapturable::HostRead, "to_vector()");
  if constexpr (std::is_same_v<T, bool>) {
    Tensor host = empty(shape(), kBool);
    detail::copy_into(host, *this);
    const bool* p = host.data<bool>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = p[i];
  } else {
    Tensor host = from_blob(out.data(), shape(), dtype_of_v<T>);
    detail::copy_into(host, *this);
  }
  return out;
}

#define MT_INSTANTIATE_VALUE_ACCESS(T) \
  template T Tensor::item<T>() const;  \
  template std::vector<T> Tensor::to_vector<T>() const;
MT_INSTANTIATE_VALUE_ACCESS(float)
MT_INSTANTIATE_VALUE_ACCESS(double)
MT_INSTANTIATE_VALUE_ACCESS(Half)
MT_INSTANTIATE_VALUE_ACCESS(BFloat16)
MT_INSTANTIATE_VALUE_ACCESS(Float8E4M3FN)
MT_INSTANTIATE_VALUE_ACCESS(Float8E5M2)
MT_INSTANTIATE_VALUE_ACCESS(int32_t)
MT_INSTANTIATE_VALUE_ACCESS(int64_t)
MT_INSTANTIATE_VALUE_ACCESS(uint8_t)
MT_INSTANTIATE_VALUE_ACCESS(bool)
#undef MT_INSTANTIATE_VALUE_ACCESS

namespace detail {
void throw_data_dtype_mismatch(DType want, DType have) {
  MT_THROW("data<T>: requested ", want, " data from a tensor of dtype ", have);
}
}  // namespace detail

std::ostream& operator<<(std::ostream& os, const Scalar& s) {
  if (s.is_floating()) return os << s.to_double();
  if (s.is_bool()) return os << (s.to<bool>() ? "True" : "False");
  return os << s.to_int64();
}

}  // namespace mantissa
