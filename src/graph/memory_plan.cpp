// The memory planner (graph/internal/memory_plan.h).
#include "graph/internal/memory_plan.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <utility>

#include "lockstep/core/error.h"

namespace lockstep {

namespace {

size_t checked_add(size_t a, size_t b) {
  LS_CHECK(a <= std::numeric_limits<size_t>::max() - b, "memory plan: ", a, " + ", b,
           " bytes overflows; the program's tensors are impossibly large");
  return a + b;
}

size_t aligned(size_t bytes, size_t alignment) {
  return checked_add(bytes, alignment - 1) / alignment * alignment;
}

}  // namespace

MemoryPlan plan_memory(const std::vector<BufferLife>& buffers, size_t alignment) {
  LS_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, "memory plan: alignment ",
           alignment, " is not a power of two");
  MemoryPlan plan;
  plan.offsets.assign(buffers.size(), 0);
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return buffers[a].bytes > buffers[b].bytes; });
  std::vector<size_t> placed;
  for (size_t b : order) {
    const BufferLife& B = buffers[b];
    const size_t size = aligned(B.bytes, alignment);
    plan.unplanned_bytes = checked_add(plan.unplanned_bytes, size);
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t p : placed) {
      const BufferLife& P = buffers[p];
      if (P.first <= B.last && B.first <= P.last)
        busy.push_back({plan.offsets[p], plan.offsets[p] + aligned(P.bytes, alignment)});
    }
    std::sort(busy.begin(), busy.end());
    size_t off = 0;
    for (auto [lo, hi] : busy) {
      if (checked_add(off, size) <= lo) break;
      off = std::max(off, hi);
    }
    plan.offsets[b] = off;
    plan.arena_bytes = std::max(plan.arena_bytes, checked_add(off, size));
    placed.push_back(b);
  }
  return plan;
}

}  // namespace lockstep
