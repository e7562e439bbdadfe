#include "cuda/block_allocator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string_view>
#include <utility>

#include "engine/error.h"
#include "engine/logging.h"

namespace mantissa::detail {

enum class BlockState : uint8_t { Allocated, Pending, Free };

struct BlockAllocator::Block {
  uintptr_t ptr = 0;
  size_t size = 0;
  size_t requested = 0;  // while allocated
  ListKey key{};         // pool, stream, small: fixed by the segment
  BlockState state = BlockState::Free;
  Block* prev = nullptr;  // neighbours within the segment
  Block* next = nullptr;
  std::vector<StreamId> uses;  // other streams that used it (record_stream)
};

namespace {

size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

PoolId pool_of(const std::tuple<PoolId, StreamId, bool>& key) { return std::get<0>(key); }
bool is_small(const std::tuple<PoolId, StreamId, bool>& key) { return std::get<2>(key); }

}  // namespace

std::string format_bytes(double bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 6) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

CacheMode cache_mode_from_env() {
  const char* env = std::getenv(kAllocatorBypassEnv);
  const std::string_view value = env == nullptr ? "" : env;
  MT_CHECK(value.empty() || value == "0" || value == "1", kAllocatorBypassEnv,
           ": expected 1 (bypass the CUDA caching allocator) or 0, got '", value, "'");
  return value == "1" ? CacheMode::Bypass : CacheMode::Caching;
}

bool BlockAllocator::BySize::operator()(const Block* a, const Block* b) const {
  return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
}

BlockAllocator::BlockAllocator(std::string device_name, RawMemory* raw, CacheMode mode)
    : device_name_(std::move(device_name)), raw_(raw), mode_(mode) {
  stats_.cache_bypassed = mode == CacheMode::Bypass;
}

BlockAllocator::~BlockAllocator() {
  for (auto& [block, events] : pending_)
    for (EventHandle e : events) raw_->destroy_event(e);
  for (Block* seg : segments_) raw_->free(reinterpret_cast<void*>(seg->ptr));
}

void* BlockAllocator::allocate(size_t nbytes, StreamId stream) {
  if (nbytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  // Beyond this, rounding would overflow; no device has that much memory anyway.
  if (nbytes > std::numeric_limits<size_t>::max() / 2) throw_oom(nbytes, nbytes);
  // Querying events during a capture would invalidate it (PyTorch defers them the same way):
  // blocks waiting for other streams stay out of circulation until the capture ends.
  if (captures_underway_ == 0) process_events();
  const bool bypass = mode_ == CacheMode::Bypass;
  const size_t size = bypass ? nbytes : round_up(nbytes, kMinBlockSize);
  const auto pool_it = pool_of_stream_.find(stream);
  const ListKey key{pool_it == pool_of_stream_.end() ? 0 : pool_it->second, stream,
                    size <= kSmallSize};
  Block* block = bypass ? nullptr : take_free_block(key, size);
  if (block != nullptr) {
    ++stats_.num_cache_hits;
  } else {
    block = new_segment(key, size);
    if (block == nullptr) throw_oom(nbytes, size);
  }
  block->state = BlockState::Allocated;  // before split(), so the rest does not merge back
  if (!bypass) block = split(block, size);
  block->requested = nbytes;
  live_.emplace(block->ptr, block);
  ++stats_.num_allocations;
  stats_.allocated_bytes += static_cast<int64_t>(block->size);
  stats_.requested_bytes += static_cast<int64_t>(nbytes);
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  return reinterpret_cast<void*>(block->ptr);
}

void BlockAllocator::free(void* ptr) noexcept {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == live_.end()) {
    log().error("{} allocator: free of unknown pointer {} ignored", device_name_, ptr);
    return;
  }
  Block* block = it->second;
  live_.erase(it);
  stats_.allocated_bytes -= static_cast<int64_t>(block->size);
  stats_.requested_bytes -= static_cast<int64_t>(block->requested);
  if (block->uses.empty()) {
    insert_free(block);
    return;
  }
  block->state = BlockState::Pending;
  if (captures_underway_ > 0) {
    // An event recorded now would become part of the graph; record it when the capture ends.
    deferred_.push_back(block);
    return;
  }
  std::vector<EventHandle> events;
  try {
    for (StreamId s : block->uses) events.push_back(raw_->record_event(s));
  } catch (const std::exception& e) {
    // Without the events the block cannot be reused safely: keep it out of circulation.
    log().error("{} allocator: cannot record an event for a freed block ({}); block {} leaked",
                device_name_, e.what(), ptr);
    for (EventHandle ev : events) raw_->destroy_event(ev);
    return;
  }
  pending_.emplace_back(block, std::move(events));
}

void BlockAllocator::record_stream(void* ptr, StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  auto it = live_.upper_bound(p);
  MT_CHECK(it != live_.begin(), "record_stream: ", ptr, " is not memory of a live ", device_name_,
           " tensor");
  --it;
  Block* block = it->second;
  MT_CHECK(p < block->ptr + block->size, "record_stream: ", ptr, " is not memory of a live ",
           device_name_, " tensor");
  if (stream == std::get<1>(block->key)) return;
  if (std::find(block->uses.begin(), block->uses.end(), stream) == block->uses.end())
    block->uses.push_back(stream);
}

BlockAllocator::Block* BlockAllocator::take_free_block(const ListKey& key, size_t size) {
  auto list_it = free_lists_.find(key);
  if (list_it == free_lists_.end()) return nullptr;
  Block probe;
  probe.size = size;
  auto it = list_it->second.lower_bound(&probe);  // best fit: smallest block that is big enough
  if (it == list_it->second.end()) return nullptr;
  Block* block = *it;
  list_it->second.erase(it);
  return block;
}

BlockAllocator::Block* BlockAllocator::new_segment(const ListKey& key, size_t size) {
  const size_t seg_size = mode_ == CacheMode::Bypass ? size
                          : is_small(key)            ? kSmallSegment
                                                     : round_up(size, kLargeRound);
  void* p = raw_->alloc(seg_size);
  if (p == nullptr && captures_underway_ == 0) {
    // Out of memory: give the cache back (it may be fragmented across streams and size classes)
    // and try once more. Not during a capture: a free there would invalidate it.
    ++stats_.num_oom_retries;
    process_events();
    release_free_segments(/*general_pool_too=*/true);
    p = raw_->alloc(seg_size);
  }
  if (p == nullptr) return nullptr;
  ++stats_.num_cuda_mallocs;
  ++stats_.num_segments;
  if (captures_underway_ > 0) ++stats_.num_capture_mallocs;
  if (pool_of(key) != 0) stats_.graph_pool_bytes += static_cast<int64_t>(seg_size);
  stats_.reserved_bytes += static_cast<int64_t>(seg_size);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  Block* block = nullptr;
  if (!spare_.empty()) {
    block = spare_.back();
    spare_.pop_back();
    *block = Block{};
  } else {
    all_blocks_.push_back(std::make_unique<Block>());
    block = all_blocks_.back().get();
  }
  block->ptr = reinterpret_cast<uintptr_t>(p);
  block->size = seg_size;
  block->key = key;
  segments_.insert(block);
  return block;
}

// Cuts `block` (not in any list) down to `size` when the rest is worth keeping; the rest becomes
// a free block of the same segment.
BlockAllocator::Block* BlockAllocator::split(Block* block, size_t size) {
  const size_t rest = block->size - size;
  // A small rest is useful to small requests; a large block is split only when the rest could
  // serve a large request, so small requests never fragment large segments.
  const bool worth_it = is_small(block->key) ? rest >= kMinBlockSize : rest > kSmallSize;
  if (!worth_it) return block;
  Block* tail = nullptr;
  if (!spare_.empty()) {
    tail = spare_.back();
    spare_.pop_back();
    *tail = Block{};
  } else {
    all_blocks_.push_back(std::make_unique<Block>());
    tail = all_blocks_.back().get();
  }
  tail->ptr = block->ptr + size;
  tail->size = rest;
  tail->key = block->key;
  tail->prev = block;
  tail->next = block->next;
  if (block->next != nullptr) block->next->prev = tail;
  block->next = tail;
  block->size = size;
  ++stats_.num_splits;
  insert_free(tail);
  return block;
}

void BlockAllocator::insert_free(Block* block) {
  block->state = BlockState::Free;
  block->uses.clear();
  FreeList& list = free_lists_[block->key];
  if (Block* prev = block->prev; prev != nullptr && prev->state == BlockState::Free) {
    list.erase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next != nullptr) block->next->prev = prev;
    spare_.push_back(block);
    block = prev;
    ++stats_.num_merges;
  }
  if (Block* next = block->next; next != nullptr && next->state == BlockState::Free) {
    list.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->prev = block;
    spare_.push_back(next);
    ++stats_.num_merges;
  }
  const PoolId pool = pool_of(block->key);
  const bool whole_segment = block->prev == nullptr && block->next == nullptr;
  if (whole_segment && captures_underway_ == 0) {
    auto it = pools_.find(pool);
    const bool pool_gone = pool != 0 && (it == pools_.end() || it->second);
    // Bypassed, a block of the general pool goes back at once; a live graph's pool keeps its
    // memory either way (replays use those addresses).
    if (pool_gone || (pool == 0 && mode_ == CacheMode::Bypass)) {
      release_segment(block);
      return;
    }
  }
  // Bypassed, a block kept here is never handed out again (allocate() takes no free block): it
  // waits for empty_cache(), the end of the capture or the release of its pool.
  list.insert(block);
}

void BlockAllocator::release_segment(Block* block) {
  raw_->free(reinterpret_cast<void*>(block->ptr));
  ++stats_.num_cuda_frees;
  --stats_.num_segments;
  stats_.reserved_bytes -= static_cast<int64_t>(block->size);
  if (pool_of(block->key) != 0) stats_.graph_pool_bytes -= static_cast<int64_t>(block->size);
  segments_.erase(block);
  spare_.push_back(block);
}

void BlockAllocator::release_free_segments(bool general_pool_too) {
  for (auto& [key, list] : free_lists_) {
    const PoolId pool = pool_of(key);
    if (pool == 0 && !general_pool_too) continue;
    if (pool != 0) {
      auto it = pools_.find(pool);
      if (it != pools_.end() && !it->second) continue;  // a live graph's memory
    }
    for (auto it = list.begin(); it != list.end();) {
      Block* block = *it;
      if (block->prev == nullptr && block->next == nullptr) {
        it = list.erase(it);
        release_segment(block);
      } else {
        ++it;
      }
    }
  }
}

void BlockAllocator::process_events() {
  for (size_t i = 0; i < pending_.size();) {
    auto& [block, events] = pending_[i];
    std::erase_if(events, [&](EventHandle e) {
      if (!raw_->event_done(e)) return false;
      raw_->destroy_event(e);
      return true;
    });
    if (events.empty()) {
      insert_free(block);
      pending_[i] = std::move(pending_.back());
      pending_.pop_back();
    } else {
      ++i;
    }
  }
}

void BlockAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (captures_underway_ > 0) return;
  process_events();
  release_free_segments(/*general_pool_too=*/true);
}

cuda::MemoryStats BlockAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  cuda::MemoryStats s = stats_;
  s.cached_bytes = s.reserved_bytes - s.allocated_bytes;
  return s;
}

void BlockAllocator::reset_peaks() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

PoolId BlockAllocator::create_pool() {
  std::lock_guard<std::mutex> lock(mutex_);
  const PoolId id = next_pool_++;
  pools_.emplace(id, false);
  return id;
}

void BlockAllocator::begin_pool_use(StreamId stream, PoolId pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pools_.find(pool);
  MT_CHECK(pool == 0 || (it != pools_.end() && !it->second), device_name_,
           " allocator: memory pool ", pool, " does not exist or was released");
  pool_of_stream_[stream] = pool;
}

void BlockAllocator::end_pool_use(StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  pool_of_stream_.erase(stream);
}

void BlockAllocator::release_pool(PoolId pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pools_.find(pool);
  if (it == pools_.end()) return;
  it->second = true;
  std::erase_if(pool_of_stream_, [&](const auto& kv) { return kv.second == pool; });
  if (captures_underway_ == 0) release_free_segments(/*general_pool_too=*/false);
}

void BlockAllocator::begin_capture() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++captures_underway_;
}

void BlockAllocator::end_capture() {
  std::lock_guard<std::mutex> lock(mutex_);
  MT_ASSERT(captures_underway_ > 0, "end_capture without begin_capture");
  if (--captures_underway_ > 0) return;
  std::vector<Block*> deferred = std::move(deferred_);
  deferred_.clear();
  for (Block* block : deferred) {
    std::vector<EventHandle> events;
    for (StreamId s : block->uses) events.push_back(raw_->record_event(s));
    pending_.emplace_back(block, std::move(events));
  }
  // What the capture freed could not go back to the device then.
  if (mode_ == CacheMode::Bypass) release_free_segments(/*general_pool_too=*/true);
}

size_t BlockAllocator::block_size_of(void* ptr) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(reinterpret_cast<uintptr_t>(ptr));
  return it == live_.end() ? 0 : it->second->size;
}

void BlockAllocator::throw_oom(size_t requested, size_t rounded) {
  const std::string info = raw_->device_memory_info();
  MT_THROW("CUDA out of memory on ", device_name_, ": tried to allocate ",
           format_bytes(static_cast<double>(requested)), " (", requested, " bytes, ",
           format_bytes(static_cast<double>(rounded)), " after rounding); mantissa has ",
           format_bytes(static_cast<double>(stats_.allocated_bytes)), " allocated and ",
           format_bytes(static_cast<double>(stats_.reserved_bytes)), " reserved (",
           format_bytes(static_cast<double>(stats_.reserved_bytes - stats_.allocated_bytes)),
           " of it cached) on this device",
           captures_underway_ > 0
               ? " (not retried: a CUDA graph capture is underway, during which nothing is freed)"
               : " (the cache was emptied and the allocation retried)",
           info.empty() ? "" : "; the device has ", info,
           ". Free tensors you no longer need, or reduce the batch size");
}

}  // namespace mantissa::detail
