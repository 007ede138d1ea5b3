// Math shared by the reference and cpu elementwise/reduction/loss kernels, so that both
// backends compute exactly the same per-element and per-row formulas.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "lockstep/core/rng.h"
#include "lockstep/graph/op_registry.h"
#include "ops/internal/op_util.h"

namespace lockstep::ew {

// ---- scalar activations ----
inline float sigmoid(float x) {
  if (x >= 0) return 1.f / (1.f + std::exp(-x));
  float e = std::exp(x);
  return e / (1.f + e);
}
constexpr float kSqrtHalf = 0.70710678118654752f, kInvSqrt2Pi = 0.39894228040143268f;
constexpr float kGeluC = 0.79788456080286536f, kGeluA = 0.044715f;
inline float gelu(float x, bool approx) {
  if (!approx) return 0.5f * x * (1.f + std::erf(x * kSqrtHalf));
  return 0.5f * x * (1.f + std::tanh(kGeluC * (x + kGeluA * x * x * x)));
}
inline float gelu_grad(float x, bool approx) {
  if (!approx)
    return 0.5f * (1.f + std::erf(x * kSqrtHalf)) + x * kInvSqrt2Pi * std::exp(-0.5f * x * x);
  float t = std::tanh(kGeluC * (x + kGeluA * x * x * x));
  return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kGeluC * (1.f + 3.f * kGeluA * x * x);
}
inline float softplus(float x) { return std::log1p(std::exp(-std::fabs(x))) + (x > 0 ? x : 0.f); }

// A producer's fused activation (conv2d's "activation") of its output v, held in double (the
// reference's accumulator): relu and relu6 clamp v, the others act on float(v) as the unfused op.
inline float fused_activation(FusedActivation a, double v) {
  switch (a) {
    case FusedActivation::linear:
      return float(v);
    case FusedActivation::relu:
      return float(std::max(v, 0.0));
    case FusedActivation::relu6:
      return float(std::min(std::max(v, 0.0), 6.0));
    case FusedActivation::sigmoid:
      return sigmoid(float(v));
    case FusedActivation::swish: {
      const float y = float(v);
      return y * sigmoid(y);
    }
    case FusedActivation::gelu:
      return gelu(float(v), false);
  }
  return float(v);
}

// Calls reg(op, make) for each f32 -> f32 unary op; make(node) returns the scalar function
// (call it in the kernel factory: it reads the node's attributes).
template <class Reg>
void unary_ops(Reg&& reg) {
  reg(op::neg, [](const Node&) { return [](float x) { return -x; }; });
  reg(op::exp, [](const Node&) { return [](float x) { return std::exp(x); }; });
  reg(op::log, [](const Node&) { return [](float x) { return std::log(x); }; });
  reg(op::sqrt, [](const Node&) { return [](float x) { return std::sqrt(x); }; });
  reg(op::square, [](const Node&) { return [](float x) { return x * x; }; });
  reg(op::abs, [](const Node&) { return [](float x) { return std::fabs(x); }; });
  reg(op::scale_shift, [](const Node& n) {
    float s = float(attr_f(n, "scale")), t = float(attr_f(n, "shift"));
    return [s, t](float x) { return x * s + t; };
  });
  // relu and relu6 pass NaN through, as TensorFlow and PyTorch do (NaN <= 0 is false).
  reg(op::relu, [](const Node&) { return [](float x) { return x <= 0 ? 0.f : x; }; });
  reg(op::relu6,
      [](const Node&) { return [](float x) { return x <= 0 ? 0.f : (x >= 6 ? 6.f : x); }; });
  reg(op::sigmoid, [](const Node&) { return [](float x) { return sigmoid(x); }; });
  reg(op::tanh, [](const Node&) { return [](float x) { return std::tanh(x); }; });
  reg(op::gelu, [](const Node& n) {
    bool a = attr_b(n, "approximate");
    return [a](float x) { return gelu(x, a); };
  });
  reg(op::swish, [](const Node&) { return [](float x) { return x * sigmoid(x); }; });
  reg(op::leaky_relu, [](const Node& n) {
    float al = float(attr_f(n, "alpha"));
    return [al](float x) { return x > 0 ? x : al * x; };
  });
  reg(op::elu, [](const Node& n) {
    float al = float(attr_f(n, "alpha"));
    return [al](float x) { return x > 0 ? x : al * std::expm1(x); };
  });
  reg(op::softplus, [](const Node&) { return [](float x) { return softplus(x); }; });
}

// Gradient ops (dy, v) -> dx, where v is the op's output (relu, relu6, sigmoid, tanh) or input.
template <class Reg>
void unary_grad_ops(Reg&& reg) {
  reg(op::relu_grad,
      [](const Node&) { return [](float dy, float y) { return y > 0 ? dy : 0.f; }; });
  reg(op::relu6_grad,
      [](const Node&) { return [](float dy, float y) { return (y > 0 && y < 6) ? dy : 0.f; }; });
  reg(op::sigmoid_grad,
      [](const Node&) { return [](float dy, float y) { return dy * y * (1.f - y); }; });
  reg(op::tanh_grad,
      [](const Node&) { return [](float dy, float y) { return dy * (1.f - y * y); }; });
  reg(op::gelu_grad, [](const Node& n) {
    bool a = attr_b(n, "approximate");
    return [a](float dy, float x) { return dy * gelu_grad(x, a); };
  });
  reg(op::swish_grad, [](const Node&) {
    return [](float dy, float x) {
      float s = sigmoid(x);
      return dy * (s + x * s * (1.f - s));
    };
  });
  reg(op::leaky_relu_grad, [](const Node& n) {
    float al = float(attr_f(n, "alpha"));
    return [al](float dy, float x) { return x > 0 ? dy : al * dy; };
  });
  reg(op::elu_grad, [](const Node& n) {
    float al = float(attr_f(n, "alpha"));
    return [al](float dy, float x) { return x > 0 ? dy : dy * al * std::exp(x); };
  });
  reg(op::softplus_grad,
      [](const Node&) { return [](float dy, float x) { return dy * sigmoid(x); }; });
  reg(op::abs_grad, [](const Node&) {
    return [](float dy, float x) { return x > 0 ? dy : (x < 0 ? -dy : 0.f); };
  });
}

// Broadcasting binary ops.
template <class Reg>
void binary_ops(Reg&& reg) {
  reg(op::add, [](float a, float b) { return a + b; });
  reg(op::sub, [](float a, float b) { return a - b; });
  reg(op::mul, [](float a, float b) { return a * b; });
  reg(op::div, [](float a, float b) { return a / b; });
  reg(op::maximum, [](float a, float b) { return a > b ? a : b; });
  reg(op::minimum, [](float a, float b) { return a < b ? a : b; });
}

// Visits every element of `out` in row-major order as f(i, offset_in_a, offset_in_b), with a and
// b right-aligned against out and size-1 dims repeated (numpy broadcasting).
template <class F>
void broadcast_loop(const Shape& out, const Shape& a, const Shape& b, F f) {
  const int r = out.rank();
  int64_t n = out.numel();
  if (n <= 0) return;
  int64_t sa[Shape::kMaxRank], sb[Shape::kMaxRank], idx[Shape::kMaxRank] = {};
  auto strides = [&](const Shape& s, int64_t* st) {
    int lead = r - s.rank();
    int64_t acc = 1;
    for (int i = r - 1; i >= 0; --i) {
      int64_t d = i >= lead ? s[i - lead] : 1;
      st[i] = d == 1 ? 0 : acc;
      acc *= d;
    }
  };
  strides(a, sa);
  strides(b, sb);
  int64_t oa = 0, ob = 0;
  for (int64_t i = 0; i < n; ++i) {
    f(i, oa, ob);
    for (int d = r - 1; d >= 0; --d) {
      oa += sa[d];
      ob += sb[d];
      if (++idx[d] < out[d]) break;
      oa -= sa[d] * out[d];
      ob -= sb[d] * out[d];
      idx[d] = 0;
    }
  }
}

// Reduction axes of a reduce_* node (missing/empty = all) and x's shape with them set to 1.
inline std::vector<int64_t> reduce_axes(const Node& n, int rank) {
  std::vector<int64_t> axes = attr_ints(n, "axes");
  if (axes.empty())
    for (int i = 0; i < rank; ++i) axes.push_back(i);
  return ops::normalise_axes(axes, rank);
}
inline Shape keep_shape(const Shape& x, const std::vector<int64_t>& axes) {
  Shape s = x;
  for (int64_t a : axes) s[int(a)] = 1;
  return s;
}

// ---- softmax rows: C elements `st` apart ----
inline void softmax_row(const float* x, float* y, int64_t C, int64_t st) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < C; ++j) m = std::max(m, x[j * st]);
  float s = 0;
  for (int64_t j = 0; j < C; ++j) s += (y[j * st] = std::exp(x[j * st] - m));
  float inv = 1.f / s;
  for (int64_t j = 0; j < C; ++j) y[j * st] *= inv;
}
inline float logsumexp_row(const float* x, int64_t C, int64_t st = 1) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < C; ++j) m = std::max(m, x[j * st]);
  float s = 0;
  for (int64_t j = 0; j < C; ++j) s += std::exp(x[j * st] - m);
  return m + std::log(s);
}
inline void log_softmax_row(const float* x, float* y, int64_t C, int64_t st) {
  float lse = logsumexp_row(x, C, st);
  for (int64_t j = 0; j < C; ++j) y[j * st] = x[j * st] - lse;
}
inline void softmax_grad_row(const float* dy, const float* y, float* dx, int64_t C, int64_t st) {
  float dot = 0;
  for (int64_t j = 0; j < C; ++j) dot += dy[j * st] * y[j * st];
  for (int64_t j = 0; j < C; ++j) dx[j * st] = y[j * st] * (dy[j * st] - dot);
}
inline void log_softmax_grad_row(const float* dy, const float* y, float* dx, int64_t C,
                                 int64_t st) {
  float s = 0;
  for (int64_t j = 0; j < C; ++j) s += dy[j * st];
  for (int64_t j = 0; j < C; ++j) dx[j * st] = dy[j * st] - std::exp(y[j * st]) * s;
}

// ---- losses (one row of C logits) ----
// Smoothed target of class j: onehot * (1 - ls) + ls / C (Keras).
inline float sparse_xent_row(const float* z, int64_t C, int64_t label, float ls) {
  float lse = logsumexp_row(z, C), zsum = 0;
  for (int64_t j = 0; j < C; ++j) zsum += z[j];
  return lse - (1.f - ls) * z[label] - (ls / float(C)) * zsum;
}
inline void sparse_xent_grad_row(const float* z, int64_t C, int64_t label, float ls, float dy,
                                 float* dz) {
  softmax_row(z, dz, C, 1);
  float u = ls / float(C);
  for (int64_t j = 0; j < C; ++j) dz[j] = dy * (dz[j] - u);
  dz[label] -= dy * (1.f - ls);
}
inline float xent_row(const float* z, const float* t, int64_t C, float ls) {
  float lse = logsumexp_row(z, C), loss = 0, u = ls / float(C);
  for (int64_t j = 0; j < C; ++j) loss += (t[j] * (1.f - ls) + u) * (lse - z[j]);
  return loss;
}
inline void xent_grad_row(const float* z, const float* t, int64_t C, float ls, float dy, float* dz,
                          float* dt) {
  float lse = logsumexp_row(z, C), tsum = 0, u = ls / float(C);
  for (int64_t j = 0; j < C; ++j) tsum += t[j] * (1.f - ls) + u;
  for (int64_t j = 0; j < C; ++j) {
    dz[j] = dy * (std::exp(z[j] - lse) * tsum - (t[j] * (1.f - ls) + u));
    dt[j] = dy * (1.f - ls) * (lse - z[j]);
  }
}
inline float sigmoid_xent(float z, float t) {
  return (z > 0 ? z : 0.f) - z * t + std::log1p(std::exp(-std::fabs(z)));
}
inline int64_t argmax_row(const float* p, int64_t C) {
  int64_t best = 0;
  for (int64_t j = 1; j < C; ++j)
    if (p[j] > p[best]) best = j;
  return best;
}

// Sparse labels stored as int32 or float32.
struct Labels {
  const int32_t* i = nullptr;
  const float* f = nullptr;
  int64_t operator[](int64_t r) const { return i ? int64_t(i[r]) : int64_t(std::floor(f[r])); }
};
inline Labels labels_of(const Tensor& t) {
  Labels l;
  if (t.dtype() == DType::i32)
    l.i = t.data<int32_t>();
  else
    l.f = t.data<float>();
  return l;
}
// Throws (call serially, before any parallel loop) when a label lies outside [0, C).
inline void check_labels(const Node& n, const Labels& l, int64_t rows, int64_t C) {
  for (int64_t r = 0; r < rows; ++r) {
    bool ok = l.i ? (l.i[r] >= 0 && l.i[r] < C) : (l.f[r] >= 0 && l.f[r] < float(C));
    if (!ok) {
      std::string label = l.i ? std::to_string(l.i[r]) : detail::concat(l.f[r]);
      LS_FAIL(n.op, (n.name.empty() ? "" : " '" + n.name + "'"), ": labels out of range for ", C,
              " classes (label ", label, " at row ", r, ", expected [0, ", C, "))");
    }
  }
}

// ---- dropout: Philox keyed by (attr seed, node id, replica, model seed), counter = step ----
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
// The node's part of the key (attr seed, node id): computed once, in the kernel factory.
inline uint64_t node_key(const Node& n) {
  return splitmix64(splitmix64(uint64_t(attr_i(n, "seed"))) ^ uint64_t(n.id));
}
// Op determinism (StepInfo::first_row >= 0): the replica is left out, since draws are keyed by
// the example's global row instead (dropout_rows, first_index).
inline bool keyed_by_row(const StepInfo* s) { return s && s->first_row >= 0; }
inline uint64_t dropout_key(uint64_t node_key, const StepInfo* s) {
  uint64_t k = splitmix64(node_key ^ uint64_t(s && !keyed_by_row(s) ? s->replica : 0));
  return splitmix64(k ^ (s ? s->seed : 0));
}
// The global index of the first image / row of this step (0 unless keyed by row).
inline uint64_t first_index(const StepInfo* s) {
  return keyed_by_row(s) ? uint64_t(s->first_row) : 0;
}
// How dropout walks its tensor: `rows` rows of `row_len` elements, row r drawing Philox blocks
// counter_base(r) + 0, 1, ... (4 elements per block). Normally one flat row from counter 0;
// keyed by row, dim 0 is the batch and row r starts at ((first_row + r) << 32), so an
// example's mask does not depend on how the global batch is split.
struct DropoutRows {
  int64_t rows = 1, row_len = 0;
  uint64_t first = 0;
  bool keyed = false;
  uint64_t counter_base(int64_t r) const { return keyed ? (first + uint64_t(r)) << 32 : 0; }
};
inline DropoutRows dropout_rows(const Tensor& x, const StepInfo* s) {
  DropoutRows d;
  d.row_len = x.numel();
  if (keyed_by_row(s) && x.rank() >= 1 && x.dim(0) > 0) {
    d.keyed = true;
    d.rows = x.dim(0);
    d.row_len = x.numel() / d.rows;
    d.first = uint64_t(s->first_row);
  }
  return d;
}
inline uint64_t dropout_key(const Node& n, const StepInfo* s) {
  return dropout_key(node_key(n), s);
}
// Elements [4*blk, 4*blk + 4) of y and mask (clipped to n).
// Counter (step, counter_base + blk).
inline void dropout_block(uint64_t key, uint64_t step, int64_t blk, const float* x, float* y,
                          float* mask, int64_t n, float rate, float scale,
                          uint64_t counter_base = 0) {
  auto r = philox4x32(key, step, counter_base + uint64_t(blk));
  for (int k = 0; k < 4; ++k) {
    int64_t i = 4 * blk + k;
    if (i >= n) break;
    float m = uint_to_unit_float(r[k]) >= rate ? scale : 0.f;
    mask[i] = m;
    y[i] = x[i] * m;
  }
}

// The same Philox4x32-10 draws as philox4x32(key, hi, blk0 + l) for l in [0, 16), computed
// lane-parallel so the compiler can vectorise them: out[k][l] is word k of block blk0 + l.
inline void philox4x32_x16(uint64_t key, uint64_t hi, uint64_t blk0, uint32_t out[4][16]) {
#if defined(__AVX512F__)
  // Explicit AVX-512 (the compiler's version used 64-bit lane multiplies): the 32x32 -> 64-bit
  // products of even lanes and of odd lanes (shifted down), their high halves blended back.
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i base = _mm512_set1_epi32(int(uint32_t(blk0)));
  __m512i c0 = _mm512_add_epi32(base, lane);
  // blk0 + l may carry into the high word for some lanes.
  const __mmask16 carry = _mm512_cmplt_epu32_mask(c0, base);
  __m512i c1 =
      _mm512_mask_add_epi32(_mm512_set1_epi32(int(uint32_t(blk0 >> 32))), carry,
                            _mm512_set1_epi32(int(uint32_t(blk0 >> 32))), _mm512_set1_epi32(1));
  __m512i c2 = _mm512_set1_epi32(int(uint32_t(hi))),
          c3 = _mm512_set1_epi32(int(uint32_t(hi >> 32)));
  const __m512i m0 = _mm512_set1_epi32(int(0xD2511F53u)), m1 = _mm512_set1_epi32(int(0xCD9E8D57u));
  auto mul_hi = [](__m512i a, __m512i m) {
    const __m512i even = _mm512_srli_epi64(_mm512_mul_epu32(a, m), 32);
    const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
    return _mm512_mask_blend_epi32(__mmask16(0xAAAA), even, odd);
  };
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const __m512i h0 = mul_hi(c0, m0), l0 = _mm512_mullo_epi32(c0, m0);
    const __m512i h1 = mul_hi(c2, m1), l1 = _mm512_mullo_epi32(c2, m1);
    c0 = _mm512_xor_si512(_mm512_xor_si512(h1, c1), _mm512_set1_epi32(int(k0)));
    c2 = _mm512_xor_si512(_mm512_xor_si512(h0, c3), _mm512_set1_epi32(int(k1)));
    c1 = l1;
    c3 = l0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  _mm512_storeu_si512(out[0], c0);
  _mm512_storeu_si512(out[1], c1);
  _mm512_storeu_si512(out[2], c2);
  _mm512_storeu_si512(out[3], c3);
#else
  uint32_t c0[16], c1[16], c2[16], c3[16];
  for (int l = 0; l < 16; ++l) {
    uint64_t lo = blk0 + uint64_t(l);
    c0[l] = uint32_t(lo), c1[l] = uint32_t(lo >> 32), c2[l] = uint32_t(hi),
    c3[l] = uint32_t(hi >> 32);
  }
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int round = 0; round < 10; ++round) {
#pragma omp simd
    for (int l = 0; l < 16; ++l) {
      uint64_t p0 = uint64_t(0xD2511F53u) * c0[l], p1 = uint64_t(0xCD9E8D57u) * c2[l];
      uint32_t n0 = uint32_t(p1 >> 32) ^ c1[l] ^ k0, n2 = uint32_t(p0 >> 32) ^ c3[l] ^ k1;
      c0[l] = n0, c1[l] = uint32_t(p1), c2[l] = n2, c3[l] = uint32_t(p0);
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  for (int l = 0; l < 16; ++l)
    out[0][l] = c0[l], out[1][l] = c1[l], out[2][l] = c2[l], out[3][l] = c3[l];
#endif
}

// The dropout keep decisions of 16 blocks as multipliers: out[k][l] = scale when word k of
// block l, as a unit float, is >= rate, else 0 (branch-free; the scalar form compiled to a
// mispredicted branch per element).
inline void dropout_multipliers_x16(const uint32_t w[4][16], float rate, float scale,
                                    float out[4][16]) {
#if defined(__AVX512F__)
  const __m512 r = _mm512_set1_ps(rate), s = _mm512_set1_ps(scale);
  const __m512 unit = _mm512_set1_ps(1.0f / 16777216.0f);
  for (int k = 0; k < 4; ++k) {
    const __m512i v = _mm512_srli_epi32(_mm512_loadu_si512(w[k]), 8);
    const __m512 u = _mm512_mul_ps(_mm512_cvtepi32_ps(v), unit);  // = uint_to_unit_float
    _mm512_storeu_ps(out[k], _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(u, r, _CMP_GE_OQ), s));
  }
#else
  for (int k = 0; k < 4; ++k)
    for (int l = 0; l < 16; ++l) out[k][l] = scale * float(uint_to_unit_float(w[k][l]) >= rate);
#endif
}

}  // namespace lockstep::ew
