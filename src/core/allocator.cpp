// Aligned host allocation with a counter tests can read.
#include "lockstep/core/allocator.h"

#include <atomic>
#include <cstdlib>
#include <new>

#include "lockstep/core/shape.h"

namespace lockstep {

static std::atomic<size_t> g_allocations{0};

void* aligned_alloc_bytes(size_t bytes) {
  size_t rounded = checked_round_up(bytes, kAlignment, "allocation");
  if (rounded == 0) rounded = kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (!p) throw std::bad_alloc();
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return p;
}

void aligned_free(void* p) { std::free(p); }

size_t allocation_count() { return g_allocations.load(std::memory_order_relaxed); }

}  // namespace lockstep
