// DType and Device names.
#include "lockstep/core/dtype.h"

#include <algorithm>

#include "lockstep/core/error.h"

#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace lockstep {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::bf16:
    case DType::f16:
      return 2;
    case DType::i64:
      return 8;
    case DType::u8:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "float32";
    case DType::bf16:
      return "bfloat16";
    case DType::f16:
      return "float16";
    case DType::i32:
      return "int32";
    case DType::i64:
      return "int64";
    case DType::u8:
      return "uint8";
  }
  return "?";
}

DType dtype_from_name(const std::string& n) {
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8})
    if (n == dtype_name(t)) return t;
  LS_FAIL("unknown dtype '", n, "' (expected float32, bfloat16, float16, int32, int64, uint8)");
}

// Chunks of 64 Ki elements per OpenMP iteration: small tensors stay on the calling thread.
static constexpr int64_t kChunk = 1 << 16;

static void to_f32_range(const bf16* s, float* d, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
    _mm512_storeu_ps(d + i, _mm512_castsi512_ps(w));
  }
#endif
  for (; i < n; ++i) d[i] = bf16_to_f32(s[i]);
}

static void to_bf16_range(const float* s, bf16* d, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512BF16__) && defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(s + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), reinterpret_cast<__m256i&>(h));
  }
#endif
  for (; i < n; ++i) d[i] = f32_to_bf16(s[i]);
}

void bf16_to_f32(const bf16* src, float* dst, int64_t n) {
  if (n <= kChunk) return to_f32_range(src, dst, n);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < (n + kChunk - 1) / kChunk; ++c)
    to_f32_range(src + c * kChunk, dst + c * kChunk, std::min(kChunk, n - c * kChunk));
}

void f32_to_bf16(const float* src, bf16* dst, int64_t n) {
  if (n <= kChunk) return to_bf16_range(src, dst, n);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < (n + kChunk - 1) / kChunk; ++c)
    to_bf16_range(src + c * kChunk, dst + c * kChunk, std::min(kChunk, n - c * kChunk));
}

std::string Device::str() const {
  return std::string(type == DeviceType::cpu ? "cpu:" : "cuda:") + std::to_string(index);
}

}  // namespace lockstep
