// cpu backend: branch-free math that GCC vectorises inside `#pragma omp simd` loops, shared by
// the elementwise kernels and the fused batch-norm activations.
#pragma once
#include <bit>
#include <cstdint>

#include "lockstep/core/dtype.h"
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace lockstep::cpu {

// sigmoid without a branch or a libm call, so the loops below vectorise (swish and its gradient
// run on every EfficientNet activation: with std::exp and the reference's branch, a scalar
// loop, they took 35% of a training step). 1 / (1 + e^-x) with e^-x = 2^n e^r as in
// vec_sigmoid16 below (n = round(-x / ln 2) in m's low mantissa bits, 1.5 * 2^23 added, as
// std::floor and a float to int conversion kept GCC 12 from vectorising; e^r by its degree-6
// Taylor polynomial; 2^n built in the exponent bits) and an exact division: ~2.5e-7 relative,
// NaN stays NaN, x clamped to [-87.3, 87.3]. 21 cycles per 16 on this project's Zen 4, where
// the earlier form (e^-|x| by Cephes' expf and a blend on the sign) took 28.
inline float vec_sigmoid(float x) {
  float c = x > 87.3f ? 87.3f : x;
  c = c < -87.3f ? -87.3f : c;  // a NaN passes both
  const float m = c * -1.44269504088896341f + 12582912.f;
  const float n = m - 12582912.f;
  // ln 2 in two parts (Cody-Waite): n * 0.693359375 is exact, so r keeps its accuracy whether
  // or not the compiler contracts to FMA (without FMA, one constant lost up to 4e-6 at |x| ~ 87)
  const float r = -c - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.f / 720;
  p = p * r + 1.f / 120;
  p = p * r + 1.f / 24;
  p = p * r + 1.f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  const float scale = std::bit_cast<float>((std::bit_cast<int32_t>(m) - 0x4B400000 + 127) << 23);
  return 1.f / (1.f + p * scale);
}

#if defined(__AVX512F__)
// sigmoid of 16 floats as 1 / (1 + e^-x), for the swish after a convolution (swish_span).
// e^-x = 2^n e^r with n = round(-x / ln 2), r = -x - n ln 2 (one FMA: the rounding of ln 2 adds
// at most ~2e-7 at |x| = 87), e^r by its degree-6 Taylor polynomial (|r| <= ln 2 / 2: 1.2e-7),
// 2^n by vscalefps, and 1 / d by vrcp14ps and one Newton step. About 4e-7 relative against
// double precision, NaN stays NaN, x is clamped to [-87.3, 87.3] (sigmoid(-87.3) ~ 1.2e-38).
// 14 cycles per 16 on this project's Zen 4; oneDNN's swish post-op took 41 and vec_sigmoid's
// vectorised loop 20 (its exact division; tests/ops/swish_span_test.cpp).
inline __m512 vec_sigmoid16(__m512 x) {
  __m512 c = _mm512_min_ps(_mm512_set1_ps(87.3f), x);  // NaN: min / max return operand 2
  c = _mm512_max_ps(_mm512_set1_ps(-87.3f), c);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(-1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fnmsub_ps(n, _mm512_set1_ps(0.693147180559945f), c);  // -c - n ln 2
  __m512 p = _mm512_set1_ps(1.f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  const __m512 d = _mm512_add_ps(_mm512_scalef_ps(p, n), _mm512_set1_ps(1.f));
  const __m512 s = _mm512_rcp14_ps(d);
  return _mm512_fmadd_ps(_mm512_fnmadd_ps(d, s, _mm512_set1_ps(1.f)), s, s);
}

inline __m512 vec_swish16(__m512 x) { return _mm512_mul_ps(x, vec_sigmoid16(x)); }
#endif

// y = x * sigmoid(x) over n floats on the calling thread; y may be x.
inline void swish_span(const float* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 64 <= n; i += 64) {  // four independent chains: one alone is latency-bound
    const __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16),
                 c = _mm512_loadu_ps(x + i + 32), d = _mm512_loadu_ps(x + i + 48);
    _mm512_storeu_ps(y + i, vec_swish16(a));
    _mm512_storeu_ps(y + i + 16, vec_swish16(b));
    _mm512_storeu_ps(y + i + 32, vec_swish16(c));
    _mm512_storeu_ps(y + i + 48, vec_swish16(d));
  }
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, vec_swish16(_mm512_maskz_loadu_ps(m, x + i)));
  }
#else
  for (; i < n; ++i) y[i] = x[i] * vec_sigmoid(x[i]);
#endif
}

// The same on bfloat16: each element widened, swish in float32, rounded to nearest even.
inline void swish_span(const bf16* x, bf16* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BF16__)
  auto swish16 = [](const bf16* from, bf16* to) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(from));
    const __m512 f = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    const __m256bh r = _mm512_cvtneps_pbh(vec_swish16(f));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(to), reinterpret_cast<const __m256i&>(r));
  };
  for (; i + 16 <= n; i += 16) swish16(x + i, y + i);
  if (i < n) {  // the tail through a buffer, so that it rounds as the rest does
    bf16 tail[16] = {};
    for (int64_t k = i; k < n; ++k) tail[k - i] = x[k];
    swish16(tail, tail);
    for (int64_t k = i; k < n; ++k) y[k] = tail[k - i];
  }
#else
  for (; i < n; ++i) {
    const float v = bf16_to_f32(x[i]);
    y[i] = f32_to_bf16(v * vec_sigmoid(v));
  }
#endif
}

}  // namespace lockstep::cpu
