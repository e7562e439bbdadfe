// The CPU allocator: 64-byte aligned blocks, cached by size class for reuse.
//
// A training step frees and reallocates the same sizes every iteration. Handing them back to
// malloc costs twice: aligned allocations bypass glibc's fast per-thread caches (memalign
// splits and coalesces chunks on every call), and large blocks go back to the kernel and fault
// in again page by page. So freed blocks are kept in per-size-class free lists, as PyTorch's
// CUDA caching allocator does for device memory, up to a cap on cached bytes
// (MANTISSA_CPU_CACHE_MB, default 1 GiB). Blocks up to 4 KiB freed on a thread are first kept in
// that thread's own lists (at most 64 per size class), so a small model's step takes no lock;
// cpu_empty_cache() frees the shared lists and the calling thread's. The statistics are
// counters updated without a lock: exact when the allocator is quiet, approximate (e.g. a peak
// momentarily below the allocated bytes) while other threads allocate.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/allocator.h"

namespace mantissa {

struct CpuMemoryStats {
  int64_t allocated_bytes = 0;       // held by live tensors (after size-class rounding)
  int64_t cached_bytes = 0;          // freed, kept for reuse (shared, and this thread's own)
  int64_t peak_allocated_bytes = 0;  // since start or reset_cpu_peak_memory_stats()
  int64_t num_allocations = 0;
  int64_t num_cache_hits = 0;
};

namespace detail {
Allocator* caching_cpu_allocator();
}  // namespace detail

CpuMemoryStats cpu_memory_stats();
void reset_cpu_peak_memory_stats();
// Returns the cached blocks to the system: the shared lists and the calling thread's own (other
// threads keep theirs until they exit). Live tensors are unaffected.
void cpu_empty_cache();

}  // namespace mantissa
