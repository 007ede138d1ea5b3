// The memory planner: buffer lifetimes in, arena offsets out (a pure function, unit-tested in
// tests/graph/memory_plan_test.cpp). Liveness-based reuse like ggml's allocator.
#pragma once
#include <cstddef>
#include <vector>

namespace lockstep {

// One buffer: its size and the schedule positions of its producer and last reader (inclusive).
struct BufferLife {
  size_t bytes = 0;
  int first = 0, last = 0;
};

struct MemoryPlan {
  std::vector<size_t> offsets;  // per buffer, aligned
  size_t arena_bytes = 0;       // the arena that holds them all
  size_t unplanned_bytes = 0;   // the sum of the aligned sizes (no reuse)
};

// Places the biggest buffer first, each at the lowest aligned offset that overlaps no buffer
// live at the same time. Two buffers overlap in time when [first, last] intervals intersect.
// Sizes and offsets are overflow-checked: an error names the sizes instead of wrapping.
MemoryPlan plan_memory(const std::vector<BufferLife>& buffers, size_t alignment);

}  // namespace lockstep
