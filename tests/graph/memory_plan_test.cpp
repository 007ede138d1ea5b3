// The memory planner as a pure function (graph/internal/memory_plan.h): lifetimes in, offsets
// out. Buffers live at the same time never overlap; buffers that do not may share bytes.
#include "graph/internal/memory_plan.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "lockstep/core/error.h"

namespace lockstep {

namespace {

bool overlap_in_time(const BufferLife& a, const BufferLife& b) {
  return a.first <= b.last && b.first <= a.last;
}

bool overlap_in_space(size_t a, size_t an, size_t b, size_t bn) { return a < b + bn && b < a + an; }

}  // namespace

TEST(MemoryPlan, AChainReusesTheBytesOfDeadBuffers) {
  // a -> b -> c -> d, each read only by the next: at most two live at once.
  std::vector<BufferLife> bufs = {{1000, 0, 1}, {1000, 1, 2}, {1000, 2, 3}, {1000, 3, 4}};
  MemoryPlan plan = plan_memory(bufs, 64);
  EXPECT_EQ(plan.unplanned_bytes, 4 * 1024u);  // each rounded up to 64
  EXPECT_EQ(plan.arena_bytes, 2 * 1024u);
  EXPECT_EQ(plan.offsets[0], plan.offsets[2]);
  EXPECT_NE(plan.offsets[0], plan.offsets[1]);
}

TEST(MemoryPlan, LiveBuffersNeverShareBytesAndOffsetsAreAligned) {
  std::vector<BufferLife> bufs;
  for (int i = 0; i < 40; ++i)
    bufs.push_back({size_t(37 * (i % 7) + 5 * i + 1), i % 11, i % 11 + (i % 5)});
  MemoryPlan plan = plan_memory(bufs, 64);
  for (size_t i = 0; i < bufs.size(); ++i) {
    EXPECT_EQ(plan.offsets[i] % 64, 0u);
    EXPECT_LE(plan.offsets[i] + bufs[i].bytes, plan.arena_bytes);
    for (size_t j = i + 1; j < bufs.size(); ++j)
      if (overlap_in_time(bufs[i], bufs[j]))
        EXPECT_FALSE(
            overlap_in_space(plan.offsets[i], bufs[i].bytes, plan.offsets[j], bufs[j].bytes))
            << i << " and " << j;
  }
  EXPECT_LE(plan.arena_bytes, plan.unplanned_bytes);
}

TEST(MemoryPlan, TheBiggestBufferGoesFirstAtOffsetZero) {
  MemoryPlan plan = plan_memory({{10, 0, 5}, {5000, 0, 5}, {100, 0, 5}}, 64);
  EXPECT_EQ(plan.offsets[1], 0u);
  EXPECT_EQ(plan.arena_bytes, 5056u + 128u + 64u);
}

TEST(MemoryPlan, ImpossibleSizesAreAnErrorNotAWrap) {
  const size_t huge = std::numeric_limits<size_t>::max() - 10;
  try {
    plan_memory({{huge, 0, 1}}, 64);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("overflows"), std::string::npos) << e.what();
  }
  EXPECT_THROW(plan_memory({{1, 0, 0}}, 48), Error);  // not a power of two
}

TEST(MemoryPlan, NoBuffersNeedNoArena) {
  MemoryPlan plan = plan_memory({}, 64);
  EXPECT_EQ(plan.arena_bytes, 0u);
  EXPECT_TRUE(plan.offsets.empty());
}

}  // namespace lockstep
