// Kernel math of the transformer ops (src/ops/transformer_ops.cpp) shared by the reference and
// cpu backends: batch_matmul's broadcast geometry, rms_norm (+ grad) over rows, the rotary
// embedding and categorical sampling. Plain loops over [r0, r1) ranges, so a backend may split
// them between threads.
#pragma once
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "lockstep/core/rng.h"
#include "ops/internal/kernel_math.h"
#include "ops/internal/kernel_util.h"

namespace lockstep::tmath {

// batch_matmul: the output's batch dims and, per output batch index, the offsets (in elements)
// of its a and b matrices (a dim of size 1, or a missing one, broadcasts).
struct BatchMatmulGeom {
  int64_t M = 0, K = 0, N = 0;
  bool ta = false, tb = false;
  Shape batch;                        // the output's batch dims
  std::vector<int64_t> a_off, b_off;  // one per output batch index
  int64_t batches() const { return int64_t(a_off.size()); }
};

inline BatchMatmulGeom batch_matmul_geom(const Node& n, const Shape& a, const Shape& b,
                                         const Shape& y) {
  BatchMatmulGeom g;
  g.ta = attr_b(n, "transpose_a");
  g.tb = attr_b(n, "transpose_b");
  g.M = y[-2];
  g.N = y[-1];
  g.K = a[g.ta ? -2 : -1];
  const int rb = y.rank() - 2;
  for (int i = 0; i < rb; ++i) g.batch.push_back(y[i]);
  // Strides (in matrices) of a's and b's batch dims aligned to the output's, 0 where broadcast.
  auto strides = [&](const Shape& s) {
    std::vector<int64_t> st(size_t(rb), 0);
    int64_t acc = 1;
    for (int i = s.rank() - 3, j = rb - 1; i >= 0; --i, --j) {
      st[size_t(j)] = s[i] == 1 ? 0 : acc;
      acc *= s[i];
    }
    return st;
  };
  const std::vector<int64_t> sa = strides(a), sb = strides(b);
  const int64_t total = g.batch.numel();
  for (int64_t t = 0; t < total; ++t) {
    int64_t rem = t, oa = 0, ob = 0;
    for (int j = rb - 1; j >= 0; --j) {
      const int64_t c = rem % g.batch[j];
      rem /= g.batch[j];
      oa += c * sa[size_t(j)];
      ob += c * sb[size_t(j)];
    }
    g.a_off.push_back(oa * g.M * g.K);
    g.b_off.push_back(ob * g.K * g.N);
  }
  return g;
}

// Output batches [t0, t1), accumulated in double.
template <class T>
void batch_matmul_ref(const BatchMatmulGeom& g, const T* A, const T* B, T* C, int64_t t0,
                      int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) {
    const T* a = A + g.a_off[size_t(t)];
    const T* b = B + g.b_off[size_t(t)];
    T* c = C + t * g.M * g.N;
    for (int64_t m = 0; m < g.M; ++m)
      for (int64_t j = 0; j < g.N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < g.K; ++k)
          s += double(ld(g.ta ? a[k * g.M + m] : a[m * g.K + k])) *
               double(ld(g.tb ? b[j * g.K + k] : b[k * g.N + j]));
        c[m * g.N + j] = st<T>(float(s));
      }
  }
}

// rms_norm: y = x * rsqrt(mean(x^2) + eps) * scale over rows [r0, r1) of C.
inline float rms_rstd(const float* x, int64_t C, double eps) {
  double s = 0;
  for (int64_t c = 0; c < C; ++c) s += double(x[c]) * x[c];
  return float(1.0 / std::sqrt(s / double(C) + eps));
}

inline void rms_norm_rows(const float* x, const float* scale, float* y, int64_t C, double eps,
                          int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * C;
    const float rs = rms_rstd(xr, C, eps);
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = xr[c] * rs * scale[c];
  }
}

// dx = rs * g - x * rs^3 * mean(g * x), g = dy * scale; rstd[r] saved for dscale.
inline void rms_norm_grad_rows(const float* dy, const float* x, const float* scale, float* dx,
                               float* rstd, int64_t C, double eps, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float *xr = x + r * C, *gr = dy + r * C;
    const double rs = rms_rstd(xr, C, eps);
    rstd[r] = float(rs);
    double dot = 0;
    for (int64_t c = 0; c < C; ++c) dot += double(gr[c]) * scale[c] * xr[c];
    const double k = rs * rs * rs * dot / double(C);
    for (int64_t c = 0; c < C; ++c)
      dx[r * C + c] = float(rs * double(gr[c]) * scale[c] - k * double(xr[c]));
  }
}

// dscale[c] = sum_r dy[r, c] x[r, c] rstd[r], columns [c0, c1).
inline void rms_norm_dscale(const float* dy, const float* x, const float* rstd, float* ds,
                            int64_t rows, int64_t C, int64_t c0, int64_t c1) {
  for (int64_t c = c0; c < c1; ++c) {
    double s = 0;
    for (int64_t r = 0; r < rows; ++r) s += double(dy[r * C + c]) * x[r * C + c] * rstd[r];
    ds[c] = float(s);
  }
}

// rotary_embedding over x's flat memory: the feature axis (size D, stride fs) and the sequence
// axis (size T, stride ss).
struct RotaryGeom {
  int64_t D = 0, fs = 1, T = 0, ss = 1, numel = 0;
  double start = 0, scaling = 1, max_wavelength = 10000;
  bool inverse = false;
};

inline RotaryGeom rotary_geom(const Node& n, const Shape& x) {
  RotaryGeom g;
  const int r = x.rank();
  int64_t s = attr_i(n, "sequence_axis"), f = attr_i(n, "feature_axis");
  s = s < 0 ? s + r : s;
  f = f < 0 ? f + r : f;
  auto stride = [&](int64_t axis) {
    int64_t st = 1;
    for (int i = int(axis) + 1; i < r; ++i) st *= x[i];
    return st;
  };
  g.D = x[int(f)];
  g.fs = stride(f);
  g.T = x[int(s)];
  g.ss = stride(s);
  g.numel = x.numel();
  g.start = double(attr_i(n, "start_index"));
  g.scaling = attr_f(n, "scaling_factor");
  g.max_wavelength = attr_f(n, "max_wavelength");
  g.inverse = attr_b(n, "inverse");
  return g;
}

// KerasHub's angle for position p, feature pair d: computed in float32 as Keras does
// (inverse_freq = 1 / max_wavelength^(2d/D), positions / scaling_factor, their product).
inline float rotary_angle(const RotaryGeom& g, int64_t p, int64_t d, double extra_start) {
  const float freq_range = float(2 * d) / float(g.D);
  const float inv_freq = 1.0f / std::pow(float(g.max_wavelength), freq_range);
  const float pos = (float(p) + float(g.start + extra_start)) / float(g.scaling);
  return pos * inv_freq;
}

// The cos and sin of every (position, feature pair): tables [T, D/2] in `cs` and `sn` (the
// kernel's workspace), so the elementwise pass does no transcendental math.
inline void rotary_tables(const RotaryGeom& g, double extra_start, float* cs, float* sn) {
  const int64_t half = g.D / 2;
  for (int64_t p = 0; p < g.T; ++p)
    for (int64_t d = 0; d < half; ++d) {
      const float th = rotary_angle(g, p, d, extra_start);
      cs[p * half + d] = std::cos(th);
      sn[p * half + d] = g.inverse ? -std::sin(th) : std::sin(th);
    }
}

template <class T>
void rotary_apply(const RotaryGeom& g, const T* x, T* y, const float* cs, const float* sn) {
  const int64_t half = g.D / 2;
  for (int64_t i = 0; i < g.numel; ++i) {
    const int64_t d = (i / g.fs) % g.D;
    if (d >= half) continue;
    const int64_t p = (i / g.ss) % g.T;
    const float c = cs[p * half + d], s = sn[p * half + d];
    const int64_t j = i + half * g.fs;
    const float x1 = ld(x[i]), x2 = ld(x[j]);
    y[i] = st<T>(x1 * c - x2 * s);
    y[j] = st<T>(x2 * c + x1 * s);
  }
}

// random_categorical: row r's draw from probabilities softmax(logits / temperature) over the
// top_k classes, with the uniform u in [0, 1).
inline int32_t categorical_row(const float* logits, int64_t V, double temperature, int64_t top_k,
                               double u, std::vector<int64_t>& order) {
  order.resize(size_t(V));
  std::iota(order.begin(), order.end(), 0);
  int64_t k = top_k > 0 ? std::min(top_k, V) : V;
  if (k < V) {
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    order.resize(size_t(k));
    std::sort(order.begin(), order.end());
  }
  double mx = -INFINITY;
  for (int64_t c : order) mx = std::max(mx, double(logits[c]) / temperature);
  double total = 0;
  for (int64_t c : order) total += std::exp(double(logits[c]) / temperature - mx);
  const double target = u * total;
  double acc = 0;
  for (int64_t c : order) {
    acc += std::exp(double(logits[c]) / temperature - mx);
    if (target < acc) return int32_t(c);
  }
  return int32_t(order.back());
}

// The uniform of row `row` at `step`: two Philox words as a 53-bit double in [0, 1).
inline double categorical_uniform(uint64_t key, uint64_t step, int64_t row) {
  const auto w = philox4x32(key, step, uint64_t(row));
  const uint64_t bits = ((uint64_t(w[0]) << 32) | w[1]) >> 11;
  return double(bits) * (1.0 / 9007199254740992.0);
}

// random_categorical's kernel (reference and cpu: sampling is cheap next to the model's step).
inline std::unique_ptr<Kernel> random_categorical_kernel(const Node& n,
                                                         const std::vector<TensorType>& in) {
  const int64_t B = in[0].shape[0], V = in[0].shape[1];
  const double temperature = attr_f(n, "temperature");
  const int64_t top_k = attr_i(n, "top_k");
  const uint64_t node = ew::node_key(n);
  std::vector<int64_t> order;
  order.reserve(size_t(V));
  return make_kernel([=](const KernelArgs& a) mutable {
    const uint64_t key = ew::dropout_key(node, a.step), step = a.step ? a.step->step : 0;
    const float* logits = in_f(a, 0);
    int32_t* ids = a.out(0).data<int32_t>();
    for (int64_t r = 0; r < B; ++r)
      ids[r] = categorical_row(logits + r * V, V, temperature, top_k,
                               categorical_uniform(key, step, r), order);
  });
}

}  // namespace lockstep::tmath
