// 64-byte aligned host memory (large blocks on huge pages). All tensor storage and executable
// arenas come from here.
#pragma once
#include <cstddef>

namespace lockstep {

/// Byte alignment of every allocation: a cache line, and an AVX-512 vector.
constexpr size_t kAlignment = 64;
/// `bytes` of host memory aligned to kAlignment (throws lockstep::Error when out of memory).
/// Blocks of 4 MiB or more start on a 2 MiB boundary, in whole 2 MiB pages advised for
/// transparent huge pages (madvise MADV_HUGEPAGE); LOCKSTEP_HUGE_PAGES=0 turns that off.
void* aligned_alloc_bytes(size_t bytes);
/// Frees memory from aligned_alloc_bytes (nullptr is ignored).
void aligned_free(void* p);
/// Bytes allocated so far through this allocator (for tests that check "no per-step allocation").
size_t allocation_count();
/// Bytes of the blocks from aligned_alloc_bytes not yet freed (huge-page blocks at their size,
/// others as malloc_usable_size counts them), over all threads: what tensors and arenas hold.
size_t allocated_bytes();
/// The most allocated_bytes() has been since the process started or the last
/// reset_peak_allocated_bytes(): a compiled step's peak, measured rather than planned.
size_t peak_allocated_bytes();
/// Restarts peak_allocated_bytes() from allocated_bytes() now.
void reset_peak_allocated_bytes();

}  // namespace lockstep
