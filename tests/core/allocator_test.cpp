// The host allocator: 64-byte alignment, and blocks of 4 MiB or more on 2 MiB boundaries, whole
// 2 MiB pages, advised for transparent huge pages (src/core/allocator.cpp); its byte counters.
#include "lockstep/core/allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

namespace lockstep {
namespace {

TEST(Allocator, SmallBlocksAreCacheLineAligned) {
  for (size_t bytes : {size_t(1), size_t(100), size_t(3) << 20}) {
    void* p = aligned_alloc_bytes(bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kAlignment, 0u) << bytes;
    std::memset(p, 1, bytes);
    aligned_free(p);
  }
}

TEST(Allocator, LargeBlocksStartOnHugePageBoundariesAndAreUsable) {
  const size_t before = allocation_count();
  for (size_t bytes : {size_t(4) << 20, (size_t(5) << 20) + 17}) {
    auto* p = static_cast<unsigned char*>(aligned_alloc_bytes(bytes));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (size_t(2) << 20), 0u) << bytes;
    std::memset(p, 7, bytes);
    EXPECT_EQ(p[0], 7);
    EXPECT_EQ(p[bytes - 1], 7);
    aligned_free(p);
  }
  EXPECT_EQ(allocation_count(), before + 2);
}

TEST(Allocator, CountsLiveBytesAndTheirPeak) {
  const size_t base = allocated_bytes();
  reset_peak_allocated_bytes();
  EXPECT_EQ(peak_allocated_bytes(), base);
  void* a = aligned_alloc_bytes(size_t(3) << 20);
  void* b = aligned_alloc_bytes(1000);
  const size_t both = allocated_bytes() - base;
  EXPECT_GE(both, (size_t(3) << 20) + 1000);
  EXPECT_LE(both, (size_t(3) << 20) + 1000 + 4096);  // malloc's rounding, not a page more
  aligned_free(a);
  EXPECT_LT(allocated_bytes() - base, size_t(4096));  // b alone
  EXPECT_EQ(peak_allocated_bytes(), base + both);     // the peak stays where both were live
  aligned_free(b);
  EXPECT_EQ(allocated_bytes(), base);
  aligned_free(nullptr);
  EXPECT_EQ(allocated_bytes(), base);
}

}  // namespace
}  // namespace lockstep
