// cpu backend: branch-free math that GCC vectorises inside `#pragma omp simd` loops, shared by
// the elementwise kernels and the fused batch-norm activations.
#pragma once
#include <bit>
#include <cstdint>

namespace lockstep::cpu {

// sigmoid without a branch or a libm call, so the loops below vectorise (swish and its gradient
// run on every EfficientNet activation: with std::exp and the reference's branch, a scalar
// loop, they took 35% of a training step). e^-|x| from Cephes' expf polynomial (about 1 ulp);
// below -87.3 it is 0, as std::exp's result is there, and a NaN stays NaN.
inline float vec_sigmoid(float x) {
  const float a = x < 0 ? x : -x;  // -|x|
  const float t = a < -87.3f ? -87.3f : a;
  // n = round(t / ln 2) in m's low mantissa bits (1.5 * 2^23 added; std::floor and a float to
  // int conversion kept GCC 12 from vectorising the loops).
  const float m = t * 1.44269504088896341f + 12582912.f;
  const float n = m - 12582912.f;
  const float r = t - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.f;
  const float scale = std::bit_cast<float>((std::bit_cast<int32_t>(m) - 0x4B400000 + 127) << 23);
  const float e = a < -87.3f ? 0.f : er * scale;  // e^-|x|
  const float s = 1.f / (1.f + e);                // sigmoid(|x|)
  const float y = x >= 0 ? s : e * s;
  return x != x ? x : y;
}

}  // namespace lockstep::cpu
