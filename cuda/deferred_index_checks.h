// Index checks inside a CUDA graph. Eagerly, the CUDA index kernels (embedding, gather,
// scatter_add, index_select, index_add) record the first out-of-range index in a device flag and
// the host reads it back at once, throwing the CPU's message. A capture cannot wait for the device,
// so a captured index op gets a slot here instead: two words its kernel sets on a bad index,
// together with the op's name, dimension and size kept on the host. The next host read on that
// device (a copy to the CPU, item(), synchronize) reads every slot in use and throws the first bad
// index's message, naming the replayed graph as where it happened, and clears the slot.
//
// Slots are taken from one table per device, allocated and zeroed by Graph::capture_begin()
// before the capture starts (no allocation or memset may run inside it); a table holds
// kIndexCheckSlots slots for the life of the process, and a capture that would need more is
// refused with GraphCaptureError.
#pragma once

#include <cstdint>

namespace mantissa::cuda::detail {

inline constexpr int64_t kIndexCheckSlots = 16384;

// Makes sure cuda:`device` has its slot table (outside any capture).
void reserve_index_check_slots(int device);
// A fresh slot for a captured index op on cuda:`device`: {set, index}, zero until its kernel
// sees an index outside [0, size) along `dim`.
unsigned long long* index_check_slot(int device, const char* op, int64_t dim, int64_t size);
// Once the host has waited for cuda:`device`: throws the first bad index that a replayed graph
// recorded there (and clears its slot). Costs nothing until a capture has taken a slot.
void raise_deferred_index_errors(int device);

}  // namespace mantissa::cuda::detail
