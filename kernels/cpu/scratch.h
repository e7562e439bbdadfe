// A grow-only scratch buffer, left uninitialised and reused across calls (each user keeps one
// per thread and role): fresh multi-megabyte allocations each call would cost a page fault per
// 4 KiB, and std::vector would also zero every element it regrows, which is more than the
// conversions and packings these buffers hold.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace mantissa::cpu {

template <typename T>
class Scratch {
 public:
  void resize(size_t n) {
    if (n > capacity_) {
      data_.reset(new T[n]);
      capacity_ = n;
    }
    size_ = n;
  }
  T* data() { return data_.get(); }
  size_t size() const { return size_; }
  // resize(n), then data().
  T* get(int64_t n) {
    resize(static_cast<size_t>(n));
    return data();
  }

 private:
  std::unique_ptr<T[]> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace mantissa::cpu
