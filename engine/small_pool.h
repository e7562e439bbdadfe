// Thread-local free lists for the small fixed-size objects every op creates and destroys:
// tensor impls, storages, autograd nodes and their metadata. A training step of a small model
// makes ~100 of them; through malloc, the frees overflow glibc's per-thread cache and take its
// slow path, which costs more than the kernels of a 10x10 Linear layer. With
// std::allocate_shared(PoolAllocator<T>{}), a block goes back on this thread's list instead and
// the next object of the same size reuses it.
//
// Blocks freed on another thread join that thread's list (memory migrates, nothing leaks); a
// thread's list is freed when the thread exits. AddressSanitizer builds bypass the pool so that
// use-after-free stays visible.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <utility>

namespace mantissa::detail {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kPoolSmallObjects = false;
#else
inline constexpr bool kPoolSmallObjects = true;
#endif

template <size_t Size>
class FixedPool {
 public:
  static void* allocate() {
    if constexpr (kPoolSmallObjects) {
      List& l = list();
      if (l.head != nullptr) {
        Block* b = l.head;
        l.head = b->next;
        --l.count;
        return b;
      }
    }
    return ::operator new(Size);
  }
  static void deallocate(void* p) {
    if constexpr (kPoolSmallObjects) {
      // After this thread's list is gone (thread or program exit), blocks go straight back.
      if (!exited()) {
        List& l = list();
        if (l.count < kMaxCached) {
          l.head = new (p) Block{l.head};
          ++l.count;
          return;
        }
      }
    }
    ::operator delete(p);
  }

 private:
  static constexpr size_t kMaxCached = 4096;  // per thread and size
  struct Block {
    Block* next;
  };
  struct List {
    Block* head = nullptr;
    size_t count = 0;
    ~List() {
      exited() = true;
      while (head != nullptr) {
        Block* next = head->next;
        ::operator delete(head);
        head = next;
      }
    }
  };
  static List& list() {
    thread_local List l;
    return l;
  }
  // Trivially destructible, so it stays readable after the list's destructor has run.
  static bool& exited() {
    thread_local bool e = false;
    return e;
  }
};

template <typename T>
struct PoolAllocator {
  using value_type = T;
  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "pooled types use new's alignment");
  static constexpr size_t kBlock = (sizeof(T) + 15) / 16 * 16;

  PoolAllocator() = default;
  template <typename U>
  PoolAllocator(const PoolAllocator<U>&) {}  // NOLINT: rebinding, as allocate_shared needs

  // Arrays of a few elements (a node's edges: std::vector with this allocator) share one pool
  // of kArrayBlock-byte blocks.
  static constexpr size_t kArrayBlock = 128;

  T* allocate(size_t n) {
    if (n == 1) return static_cast<T*>(FixedPool<kBlock>::allocate());
    if (n * sizeof(T) <= kArrayBlock) return static_cast<T*>(FixedPool<kArrayBlock>::allocate());
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) {
    if (n == 1) return FixedPool<kBlock>::deallocate(p);
    if (n * sizeof(T) <= kArrayBlock) return FixedPool<kArrayBlock>::deallocate(p);
    ::operator delete(p);
  }
  template <typename U>
  bool operator==(const PoolAllocator<U>&) const {
    return true;
  }
};

// std::make_shared<T>(args...) with the control block and T in a pooled block.
template <typename T, typename... Args>
std::shared_ptr<T> make_pooled(Args&&... args) {
  return std::allocate_shared<T>(PoolAllocator<T>{}, std::forward<Args>(args)...);
}

}  // namespace mantissa::detail
