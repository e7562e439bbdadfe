// A vector whose first N elements live inside the object: the per-op records autograd keeps
// (saved tensors, output shapes) usually number one to four, and a heap block for each of them
// cost more than the bookkeeping itself on small models. Elements past N go to a std::vector.
#pragma once

#include <array>
#include <cstddef>
#include <utility>
#include <vector>

namespace mantissa::detail {

template <typename T, size_t N>
class InlineVector {
 public:
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return i < N ? inline_[i] : spill_[i - N]; }
  const T& operator[](size_t i) const { return i < N ? inline_[i] : spill_[i - N]; }

  template <typename... Args>
  T& emplace_back(Args&&... args) {
    T* slot = nullptr;
    if (size_ < N) {
      inline_[size_] = T(std::forward<Args>(args)...);
      slot = &inline_[size_];
    } else {
      slot = &spill_.emplace_back(std::forward<Args>(args)...);
    }
    ++size_;
    return *slot;
  }
  void push_back(T value) { emplace_back(std::move(value)); }

  template <typename F>
  void for_each(F&& f) {
    for (size_t i = 0; i < size_; ++i) f((*this)[i]);
  }

 private:
  std::array<T, N> inline_{};
  std::vector<T> spill_;
  size_t size_ = 0;
};

}  // namespace mantissa::detail
