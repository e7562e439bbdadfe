// The block bookkeeping of the CUDA caching allocator, kept free of the CUDA runtime so that it is
// compiled in every build and unit-tested on the CPU with a fake RawMemory
// (tests/test_caching_allocator.cpp). cuda/allocator.cpp plugs cudaMalloc/cudaFree and
// CUDA events in behind RawMemory; docs/cuda.md describes the design for users.
//
// Memory comes from the raw allocator in segments: requests up to 1 MiB ("small") are carved out
// of 2 MiB segments, larger ones get a segment rounded up to 2 MiB. A segment belongs to one
// stream and one pool (the general pool 0, or the private pool of a CUDA graph), and is cut into
// blocks: a request takes the best-fitting free block of its (pool, stream, size class), split when
// the rest is worth keeping, and a freed block merges with its free neighbours. A block freed on
// stream S is handed out again only on S, where later work is ordered after its last use; a
// block that other streams used as well (record_stream) waits for an event on each of them.
// Those events are not looked at while a graph capture is underway (querying an event there
// would invalidate the capture), so such blocks stay out of circulation until it ends.
//
// CacheMode::Bypass turns the cache off for memory checkers (compute-sanitizer sees one
// cudaMalloc per tensor, of its exact size, and a cudaFree as soon as it may be freed): no
// rounding, splitting or reuse. Graph pools still keep their memory until their graph is gone,
// and nothing is freed during a capture; the statistics count as usual.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "cuda/memory.h"

namespace mantissa::detail {

using StreamId = uintptr_t;  // a cudaStream_t as an integer (0: the legacy default stream)
using PoolId = uint64_t;     // 0: the general pool; others: private pools of CUDA graphs
using EventHandle = void*;   // a cudaEvent_t

// What the bookkeeping needs from the device. alloc() returns nullptr when the device is out of
// memory (any other failure throws); free() must not throw (BlockAllocator::free, which storage
// destructors call, may reach it); the event functions let a block used on several streams be
// reused only once all of them are past it.
class RawMemory {
 public:
  virtual ~RawMemory() = default;
  virtual void* alloc(size_t nbytes) = 0;
  virtual void free(void* ptr) = 0;
  virtual EventHandle record_event(StreamId stream) = 0;  // recorded on `stream` now
  virtual bool event_done(EventHandle event) = 0;
  virtual void destroy_event(EventHandle event) = 0;
  // For the out-of-memory message, e.g. "1.00 GiB free of 80.00 GiB"; "" if unknown.
  virtual std::string device_memory_info() = 0;
};

inline constexpr size_t kMinBlockSize = 512;              // every size is rounded to this
inline constexpr size_t kSmallSize = size_t{1} << 20;     // largest "small" request
inline constexpr size_t kSmallSegment = size_t{2} << 20;  // small blocks are carved from these
inline constexpr size_t kLargeRound = size_t{2} << 20;    // large segments are multiples of this

enum class CacheMode : uint8_t { Caching, Bypass };
// The environment variable that selects CacheMode::Bypass for the CUDA allocator ("1"; "0" or
// unset: caching). Read once, when the allocator of a device is created.
inline constexpr const char* kAllocatorBypassEnv = "MANTISSA_CUDA_ALLOCATOR_BYPASS";
// The mode the environment asks for; throws mantissa::Error for a value other than "", "0", "1".
CacheMode cache_mode_from_env();

// "1.50 MiB"
std::string format_bytes(double bytes);

class BlockAllocator {
 public:
  // `device_name` (e.g. "cuda:0") is used in messages only.
  BlockAllocator(std::string device_name, RawMemory* raw, CacheMode mode = CacheMode::Caching);
  ~BlockAllocator();  // returns every segment to the raw allocator
  BlockAllocator(const BlockAllocator&) = delete;
  BlockAllocator& operator=(const BlockAllocator&) = delete;

  // A block of at least `nbytes` for use on `stream` (nullptr for 0 bytes). Throws
  // mantissa::Error when the device is out of memory even after releasing the cache.
  void* allocate(size_t nbytes, StreamId stream);
  // Must not throw: called from storage destructors. Unknown pointers are ignored (and counted).
  void free(void* ptr) noexcept;
  // Marks the block containing `ptr` as used by `stream` as well as by its own stream, so that
  // when it is freed it is reused only after `stream` has finished the work queued so far.
  void record_stream(void* ptr, StreamId stream);

  // Returns every unused whole segment (general pool, and pools of destroyed graphs) to the raw
  // allocator. Does nothing while a graph capture is underway (a free would break the capture).
  void empty_cache();
  cuda::MemoryStats stats() const;
  void reset_peaks();

  // ---- CUDA graphs ----------------------------------------------------------------------------
  // A private pool's memory is never given to the general pool while the pool lives: a graph
  // replays into the same addresses it captured.
  PoolId create_pool();
  // Allocations on `stream` come from `pool` until end_pool_use(stream).
  void begin_pool_use(StreamId stream, PoolId pool);
  void end_pool_use(StreamId stream);
  // The owner (a graph) is gone: its free segments are released now, the rest as they are freed.
  void release_pool(PoolId pool);
  // While a capture is underway no raw free happens, and events are neither recorded nor
  // queried: both wait for its end.
  void begin_capture();
  void end_capture();

  size_t block_size_of(void* ptr) const;  // 0 if `ptr` is not a live block (for tests)

 private:
  struct Block;
  struct BySize {
    bool operator()(const Block* a, const Block* b) const;
  };
  using FreeList = std::set<Block*, BySize>;
  using ListKey = std::tuple<PoolId, StreamId, bool>;  // pool, stream, small

  Block* take_free_block(const ListKey& key, size_t size);
  Block* new_segment(const ListKey& key, size_t size);
  Block* split(Block* block, size_t size);
  void insert_free(Block* block);  // merges with free neighbours
  void release_segment(Block* block);
  void release_free_segments(bool general_pool_too);
  void process_events();
  [[noreturn]] void throw_oom(size_t requested, size_t rounded);

  const std::string device_name_;
  RawMemory* const raw_;
  const CacheMode mode_;
  mutable std::mutex mutex_;
  std::map<ListKey, FreeList> free_lists_;
  std::map<uintptr_t, Block*> live_;                // allocated blocks by address
  std::set<Block*> segments_;                       // the first block of every segment
  std::vector<std::unique_ptr<Block>> all_blocks_;  // owns every Block object, reused via spare_
  std::vector<Block*> spare_;
  std::vector<std::pair<Block*, std::vector<EventHandle>>> pending_;  // freed, awaiting events
  std::vector<Block*> deferred_;  // freed during a capture with other streams' uses
  std::unordered_map<StreamId, PoolId> pool_of_stream_;
  std::map<PoolId, bool> pools_;  // live private pools -> retired?
  PoolId next_pool_ = 1;
  int captures_underway_ = 0;
  cuda::MemoryStats stats_;
};

}  // namespace mantissa::detail
