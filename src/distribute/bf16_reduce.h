// Internal: the arithmetic of Communicator::allreduce_sum_bf16 shared by the backends: pack a
// bucket into bfloat16 (the wire format), sum n ranks' bf16 slices in f32 in rank order, and
// unpack bf16 sums into the bucket. Conversions run on the calling (communication) thread in
// 64 Ki-element pieces, which core's bulk converters keep serial: no OpenMP team competing
// with the replica's compute threads.
#pragma once
#include <algorithm>
#include <span>
#include <vector>

#include "lockstep/core/dtype.h"
#include "lockstep/distribute/collective.h"

namespace lockstep::distribute::detail {

constexpr size_t kBf16Piece = size_t(1) << 16;

// Floats in the bucket; throws on a null buffer with a count.
inline size_t bucket_floats(std::span<const FloatBuffer> bucket, int rank, const char* op) {
  size_t total = 0;
  for (const auto& b : bucket) {
    if (b.data == nullptr && b.count > 0) {
      throw CollectiveError(std::string(op) + ": null buffer with " + std::to_string(b.count) +
                            " floats on rank " + std::to_string(rank));
    }
    total += b.count;
  }
  return total;
}

// The bucket's floats, rounded to bf16, into dst[0..total); dst[total..padded) = 0.
inline void pack_bf16(std::span<const FloatBuffer> bucket, bf16* dst, size_t padded) {
  size_t offset = 0;
  for (const auto& b : bucket) {
    for (size_t i = 0; i < b.count; i += kBf16Piece)
      f32_to_bf16(b.data + i, dst + offset + i, int64_t(std::min(kBf16Piece, b.count - i)));
    offset += b.count;
  }
  std::fill(dst + offset, dst + padded, bf16{});
}

// out[i] = bf16(sum over r = 0..n-1, in order, in f32, of slices[r * chunk + i]).
inline void sum_bf16_slices(const bf16* slices, int n, size_t chunk, bf16* out) {
  float acc[1024];
  for (size_t b = 0; b < chunk; b += 1024) {
    const size_t len = std::min<size_t>(1024, chunk - b);
    for (size_t i = 0; i < len; ++i) acc[i] = bf16_to_f32(slices[b + i]);
    for (int r = 1; r < n; ++r) {
      const bf16* s = slices + size_t(r) * chunk + b;
      for (size_t i = 0; i < len; ++i) acc[i] += bf16_to_f32(s[i]);
    }
    f32_to_bf16(acc, out + b, int64_t(len));
  }
}

// The bucket's floats = src[0..total) widened to f32.
inline void unpack_bf16(const bf16* src, std::span<const FloatBuffer> bucket) {
  for (const auto& b : bucket) {
    for (size_t i = 0; i < b.count; i += kBf16Piece)
      bf16_to_f32(src + i, b.data + i, int64_t(std::min(kBf16Piece, b.count - i)));
    src += b.count;
  }
}

}  // namespace lockstep::distribute::detail
