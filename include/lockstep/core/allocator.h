// 64-byte aligned host memory. All tensor storage and executable arenas come from here.
#pragma once
#include <cstddef>

namespace lockstep {

constexpr size_t kAlignment = 64;
void* aligned_alloc_bytes(size_t bytes);
void aligned_free(void* p);
// Bytes allocated so far through this allocator (for tests that check "no per-step allocation").
size_t allocation_count();

}  // namespace lockstep
