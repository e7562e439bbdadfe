// Statistics and control of the CUDA caching allocator (cuda/allocator.cpp), in the
// spirit of torch.cuda.memory_stats() / empty_cache(). Declared in every build: without CUDA,
// memory_stats() throws (the build has no CUDA devices) and empty_cache() does nothing.
#pragma once

#include <cstdint>

namespace mantissa::cuda {

struct MemoryStats {
  int64_t allocated_bytes = 0;       // held by live tensors (block sizes, after rounding)
  int64_t reserved_bytes = 0;        // obtained from cudaMalloc: allocated + cached
  int64_t cached_bytes = 0;          // reserved but free, kept for reuse
  int64_t peak_allocated_bytes = 0;  // since start or the last reset_peak_memory_stats()
  int64_t peak_reserved_bytes = 0;
  int64_t requested_bytes = 0;  // held by live tensors, as requested (before rounding)
  int64_t num_allocations = 0;  // allocate() calls that returned memory
  int64_t num_cache_hits = 0;   // ... of which were served from the cache
  int64_t num_cuda_mallocs = 0;
  int64_t num_cuda_frees = 0;
  int64_t num_oom_retries = 0;      // cudaMalloc failures retried after emptying the cache
  int64_t num_segments = 0;         // cudaMalloc'd segments currently held
  int64_t num_splits = 0;           // blocks split to serve a smaller request
  int64_t num_merges = 0;           // freed blocks merged with a free neighbour
  int64_t num_capture_mallocs = 0;  // cudaMalloc calls made while a CUDA graph was captured
  int64_t graph_pool_bytes = 0;     // reserved bytes held by private pools of CUDA graphs
  // MANTISSA_CUDA_ALLOCATOR_BYPASS=1: one cudaMalloc/cudaFree per tensor, nothing cached (for
  // memory checkers; see docs/cuda.md). Tests of caching behaviour skip when it is set.
  bool cache_bypassed = false;
};

// Stats of cuda:`device`; throws mantissa::Error if that device does not exist (or the build has
// no CUDA).
MemoryStats memory_stats(int device = 0);
// Resets the peaks to the current values.
void reset_peak_memory_stats(int device = 0);
// Returns every cached (unused) block of every device to CUDA. Live tensors are unaffected.
void empty_cache();

}  // namespace mantissa::cuda
