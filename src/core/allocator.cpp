// Aligned host allocation with counters tests can read: blocks allocated, bytes live and their
// peak.
#include "lockstep/core/allocator.h"

#include <malloc.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>

#include "lockstep/core/config.h"
#include "lockstep/core/env.h"
#include "lockstep/core/shape.h"

namespace lockstep {

static std::atomic<size_t> g_allocations{0};
static std::atomic<size_t> g_live_bytes{0}, g_peak_bytes{0};
// The sizes of the huge-page blocks: glibc keeps such a block in a mapping of its own whose
// usable size (malloc_usable_size) runs up to one alignment past the request, so they are
// counted at their requested size, looked up here on free (few: arenas and large tensors).
static std::mutex g_huge_mutex;
static std::unordered_map<const void*, size_t> g_huge_sizes;

static void count_allocated(size_t bytes) {
  const size_t live = g_live_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  size_t peak = g_peak_bytes.load(std::memory_order_relaxed);
  while (live > peak &&
         !g_peak_bytes.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

// Transparent huge pages for the large blocks (executable arenas, big tensors). Debian's kernel
// gives them only to memory that asks (transparent_hugepage/enabled = madvise), and a train
// step streams hundreds of MB of activations through its arena: with 4 KiB pages the memory-
// bound passes (batch norm, depthwise convolutions) miss the TLB every page. 2 MiB pages took
// MobileNetV2's f32 training step from 331-347 to 346-371 img/s (train_bench, 2 threads, 4
// alternating rounds; docs/benchmarks.md). PyTorch has the same switch (THP_MEM_ALLOC_ENABLE),
// which did not change its MobileNetV2 rate here. LOCKSTEP_HUGE_PAGES=0 turns it off.
constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kHugeFrom = size_t(4) << 20;  // smaller blocks would waste up to half a page

void* aligned_alloc_bytes(size_t bytes) {
  size_t rounded = checked_round_up(bytes, kAlignment, "allocation");
  if (rounded == 0) rounded = kAlignment;
  static const bool huge_pages = env::flag(env::huge_pages);
  const bool huge = huge_pages && rounded >= kHugeFrom;
  if (huge) rounded = checked_round_up(rounded, kHugePage, "allocation");
  void* p = std::aligned_alloc(huge ? kHugePage : kAlignment, rounded);
  if (!p) throw std::bad_alloc();
  if (huge) madvise(p, rounded, MADV_HUGEPAGE);  // a hint: without huge pages all works the same
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (huge) {
    std::lock_guard<std::mutex> lock(g_huge_mutex);
    g_huge_sizes[p] = rounded;
  }
  count_allocated(huge ? rounded : malloc_usable_size(p));
  return p;
}

void aligned_free(void* p) {
  if (!p) return;
  size_t bytes = 0;
  if (reinterpret_cast<uintptr_t>(p) % kHugePage == 0) {
    std::lock_guard<std::mutex> lock(g_huge_mutex);
    if (auto it = g_huge_sizes.find(p); it != g_huge_sizes.end()) {
      bytes = it->second;
      g_huge_sizes.erase(it);
    }
  }
  g_live_bytes.fetch_sub(bytes ? bytes : malloc_usable_size(p), std::memory_order_relaxed);
  std::free(p);
}

size_t allocation_count() { return g_allocations.load(std::memory_order_relaxed); }
size_t allocated_bytes() { return g_live_bytes.load(std::memory_order_relaxed); }
size_t peak_allocated_bytes() { return g_peak_bytes.load(std::memory_order_relaxed); }
void reset_peak_allocated_bytes() {
  g_peak_bytes.store(g_live_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace lockstep
