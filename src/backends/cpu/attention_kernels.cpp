// cpu backend: scaled_dot_product_attention (+ gradient) in the style of FlashAttention-2. The
// forward walks a block of kBq queries over blocks of kBk keys with an online softmax (running
// row max m and sum l, the output block rescaled as m grows), so it keeps no Tq x Tk matrix:
// its memory is its outputs y and lse (B, H, Tq) plus a fixed per-thread tile scratch. The
// gradient recomputes each tile's weights from q, k and lse (and redraws the dropout from its
// Philox counters): one pass over key blocks accumulates dk and dv (summing the query heads of a
// grouped-query key/value head), a second over query blocks accumulates dq, so no two threads
// write the same rows. Tasks (batch x heads x blocks) run OpenMP-parallel. bf16 operands are
// widened to f32 tiles as they are loaded and every product and softmax statistic is f32 (no
// oneDNN primitive is used: the tile products are vectorised f32 loops). With a mask input and
// causal, every key block is visited (a row whose keys are all masked attends uniformly to all
// of them, as Keras's does); causal alone skips the blocks above the diagonal.
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <optional>

#include "ops/internal/attention.h"
#include "ops/internal/kernel_util.h"

namespace lockstep::cpu {
namespace {

using ops::AttentionDropout;
using ops::AttentionGeom;

constexpr int64_t kBq = 32, kBk = 64;

// e^x without a branch or libm call (the loops vectorise): 2^n e^r, e^r by a degree-6 Taylor
// polynomial, ~2e-7 relative; 0 below -87.3 (masked logits), clamped above 87.3.
inline float fast_exp(float x) {
  float c = x > 87.3f ? 87.3f : x;
  c = c < -87.3f ? -87.3f : c;
  const float m = c * 1.44269504088896341f + 12582912.f;
  const float n = m - 12582912.f;
  const float r = c - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.f / 720;
  p = p * r + 1.f / 120;
  p = p * r + 1.f / 24;
  p = p * r + 1.f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  const float scale = std::bit_cast<float>((std::bit_cast<int32_t>(m) - 0x4B400000 + 127) << 23);
  return x < -87.3f ? 0.f : p * scale;
}

// One thread's tiles (f32), carved from the workspace.
struct Tiles {
  float *Q, *dO, *K, *KT, *VT, *V, *S, *dP, *keep, *live, *acc1, *acc2, *m, *l;
  static int64_t floats(const AttentionGeom& g) {
    return kBq * g.D * 2 + kBq * g.Dv * 2 + kBk * g.D * 3 + kBk * g.Dv * 3 + kBq * kBk * 4 +
           2 * kBq;
  }
  Tiles(const AttentionGeom& g, float* w) {
    auto take = [&w](int64_t n) {
      float* p = w;
      w += n;
      return p;
    };
    Q = take(kBq * g.D), dO = take(kBq * g.Dv), K = take(kBk * g.D), KT = take(kBk * g.D);
    VT = take(kBk * g.Dv), V = take(kBk * g.Dv), S = take(kBq * kBk), dP = take(kBq * kBk);
    keep = take(kBq * kBk), live = take(kBq * kBk);
    acc1 = take(std::max(kBk * g.D, kBq * g.D)), acc2 = take(std::max(kBk * g.Dv, kBq * g.Dv));
    m = take(kBq), l = take(kBq);
  }
};

// What a kernel run reads: the operands as typed pointers, the mask and the dropout.
template <class T>
struct Ops {
  const T *q, *k, *v, *dy = nullptr, *y = nullptr;
  const void* mask = nullptr;
  DType mask_type = DType::f32;
  const float* lse = nullptr;
  std::optional<AttentionDropout> drop;
};

// Rows [r0, r0 + n) of a (B, T, heads, d) tensor at (b, head) into dst (n x d), f32.
template <class T>
void load_rows(const T* src, int64_t T_, int64_t heads, int64_t d, int64_t b, int64_t head,
               int64_t r0, int64_t n, float* dst) {
  for (int64_t r = 0; r < n; ++r) {
    const T* s = src + ((b * T_ + r0 + r) * heads + head) * d;
#pragma omp simd
    for (int64_t e = 0; e < d; ++e) dst[r * d + e] = ld(s[e]);
  }
}

// The transpose of an (n x d) tile, (d x kBk).
void transpose_tile(const float* src, int64_t n, int64_t d, float* dst) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t e = 0; e < d; ++e) dst[e * kBk + r] = src[r * d + e];
}

// live[i][j] = 1 where query i0 + i may attend key j0 + j (causal rule and mask), else 0.
template <class T>
void tile_live(const AttentionGeom& g, const Ops<T>& o, int64_t b, int64_t h, int64_t i0,
               int64_t ni, int64_t j0, int64_t nj, float* live) {
  for (int64_t i = 0; i < ni; ++i) {
    float* row = live + i * kBk;
    for (int64_t j = 0; j < nj; ++j) row[j] = g.visible(i0 + i, j0 + j) ? 1.f : 0.f;
    if (!o.mask) continue;
    const int64_t base = g.mask_off(b, h, i0 + i, j0), st = g.ms[3];
    if (o.mask_type == DType::u8) {
      const uint8_t* mk = static_cast<const uint8_t*>(o.mask) + base;
      for (int64_t j = 0; j < nj; ++j) row[j] *= mk[j * st] != 0 ? 1.f : 0.f;
    } else if (o.mask_type == DType::bf16) {
      const bf16* mk = static_cast<const bf16*>(o.mask) + base;
      for (int64_t j = 0; j < nj; ++j) row[j] *= ld(mk[j * st]) != 0.f ? 1.f : 0.f;
    } else {
      const float* mk = static_cast<const float*>(o.mask) + base;
      for (int64_t j = 0; j < nj; ++j) row[j] *= mk[j * st] != 0.f ? 1.f : 0.f;
    }
  }
}

// S = scale * Q K^T over the tile (ni x nj), masked logits -1e9.
void tile_logits(const AttentionGeom& g, const Tiles& t, int64_t ni, int64_t nj) {
  for (int64_t i = 0; i < ni; ++i) {
    float* s = t.S + i * kBk;
    std::fill(s, s + kBk, 0.f);
    for (int64_t d = 0; d < g.D; ++d) {
      const float qd = t.Q[i * g.D + d];
      const float* kt = t.KT + d * kBk;
#pragma omp simd
      for (int64_t j = 0; j < kBk; ++j) s[j] += qd * kt[j];
    }
    const float* lv = t.live + i * kBk;
#pragma omp simd
    for (int64_t j = 0; j < nj; ++j) s[j] = lv[j] != 0.f ? s[j] * g.scale : ops::kAttentionMasked;
  }
}

// The block's keys and live flags: causal without a mask skips what the diagonal hides.
int64_t key_end(const AttentionGeom& g, int64_t i_last) {
  return g.causal && !g.masked ? std::min(g.Tk, i_last + 1) : g.Tk;
}

// Keys [j0, j0 + nj) of k/v head hk: K (nj x D), K^T (D x kBk, zero-padded), V (nj x Dv) and,
// for the gradient's dP = dO V^T, V^T (Dv x kBk).
template <class T>
void load_keys(const AttentionGeom& g, const Ops<T>& o, const Tiles& t, int64_t b, int64_t hk,
               int64_t j0, int64_t nj, bool v_transposed) {
  load_rows(o.k, g.Tk, g.Hkv, g.D, b, hk, j0, nj, t.K);
  std::fill(t.KT, t.KT + kBk * g.D, 0.f);
  transpose_tile(t.K, nj, g.D, t.KT);
  load_rows(o.v, g.Tk, g.Hkv, g.Dv, b, hk, j0, nj, t.V);
  if (v_transposed) {
    std::fill(t.VT, t.VT + kBk * g.Dv, 0.f);
    transpose_tile(t.V, nj, g.Dv, t.VT);
  }
}

// One (b, h, query block): the online softmax over the key blocks, then y and lse.
template <class T>
void forward_task(const AttentionGeom& g, const Ops<T>& o, const Tiles& t, int64_t b, int64_t h,
                  int64_t i0, T* y, float* lse) {
  const int64_t ni = std::min(kBq, g.Tq - i0), hk = h / g.group();
  load_rows(o.q, g.Tq, g.H, g.D, b, h, i0, ni, t.Q);
  std::fill(t.acc2, t.acc2 + kBq * g.Dv, 0.f);
  std::fill(t.m, t.m + kBq, -INFINITY);
  std::fill(t.l, t.l + kBq, 0.f);
  const int64_t jend = key_end(g, i0 + ni - 1);
  for (int64_t j0 = 0; j0 < jend; j0 += kBk) {
    const int64_t nj = std::min(kBk, jend - j0);
    load_keys(g, o, t, b, hk, j0, nj, false);
    tile_live(g, o, b, h, i0, ni, j0, nj, t.live);
    tile_logits(g, t, ni, nj);
    for (int64_t i = 0; i < ni; ++i) {
      float* s = t.S + i * kBk;
      float mx = t.m[i];
      for (int64_t j = 0; j < nj; ++j) mx = std::max(mx, s[j]);
      const float corr = fast_exp(t.m[i] - mx);
      float sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < nj; ++j) sum += s[j] = fast_exp(s[j] - mx);
      t.l[i] = t.l[i] * corr + sum;
      t.m[i] = mx;
      if (o.drop) {
        o.drop->row(g, b, h, i0 + i, j0, j0 + nj, t.keep);
        for (int64_t j = 0; j < nj; ++j) s[j] *= t.keep[j];
      }
      float* acc = t.acc2 + i * g.Dv;
#pragma omp simd
      for (int64_t e = 0; e < g.Dv; ++e) acc[e] *= corr;
      for (int64_t j = 0; j < nj; ++j) {
        const float p = s[j];
        const float* vr = t.V + j * g.Dv;
#pragma omp simd
        for (int64_t e = 0; e < g.Dv; ++e) acc[e] += p * vr[e];
      }
    }
  }
  for (int64_t i = 0; i < ni; ++i) {
    const float inv = 1.f / t.l[i];
    T* yr = y + g.q_off(b, i0 + i, h, g.Dv);
    for (int64_t e = 0; e < g.Dv; ++e) yr[e] = st<T>(t.acc2[i * g.Dv + e] * inv);
    lse[(b * g.H + h) * g.Tq + i0 + i] = t.m[i] + std::log(t.l[i]);
  }
}

int64_t q_blocks(const AttentionGeom& g) { return (g.Tq + kBq - 1) / kBq; }
int64_t k_blocks(const AttentionGeom& g) { return (g.Tk + kBk - 1) / kBk; }

template <class T>
Ops<T> ops_of(const AttentionGeom& g, const Node& n, const KernelArgs& a, int first) {
  Ops<T> o;
  o.q = a.in(first).data<T>(), o.k = a.in(first + 1).data<T>(), o.v = a.in(first + 2).data<T>();
  if (g.masked) {
    o.mask = a.in(first + 3).raw();
    o.mask_type = a.in(first + 3).dtype();
  }
  if (g.dropout > 0) o.drop.emplace(n, g, a.step);
  return o;
}

template <class T>
void run_forward(const AttentionGeom& g, const Node& n, const KernelArgs& a, int threads) {
  const Ops<T> o = ops_of<T>(g, n, a, 0);
  T* y = a.out(0).data<T>();
  float* lse = out_f(a, 1);
  const int64_t nq = q_blocks(g), tasks = g.B * g.H * nq;
  float* ws = static_cast<float*>(a.workspace);
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (int64_t task = 0; task < tasks; ++task) {
    const Tiles t(g, ws + Tiles::floats(g) * omp_get_thread_num());
    const int64_t bh = task / nq;
    forward_task(g, o, t, bh / g.H, bh % g.H, (task % nq) * kBq, y, lse);
  }
}

// The tile's gradient terms from its recomputed weights: S <- P * keep (for dV), dP <- dS =
// live ? P (dP keep - Dsum) : 0 with dP = dO V^T (for dQ and dK; the scale is applied after).
template <class T>
void tile_grads(const AttentionGeom& g, const Ops<T>& o, const Tiles& t, const float* dsum,
                int64_t b, int64_t h, int64_t i0, int64_t ni, int64_t j0, int64_t nj) {
  tile_live(g, o, b, h, i0, ni, j0, nj, t.live);
  tile_logits(g, t, ni, nj);
  for (int64_t i = 0; i < ni; ++i) {
    const int64_t row = (b * g.H + h) * g.Tq + i0 + i;
    const float L = o.lse[row], Di = dsum[row];
    float *s = t.S + i * kBk, *dp = t.dP + i * kBk;
    const float* lv = t.live + i * kBk;
    if (L < 0.1f * ops::kAttentionMasked) {
      // Every key of the row is masked: Keras's softmax attends uniformly (lse = -1e9 + log Tk
      // is -1e9 in float, so exp(s - lse) would give 1, not 1 / Tk).
      std::fill(s, s + nj, 1.f / float(g.Tk));
    } else {
#pragma omp simd
      for (int64_t j = 0; j < nj; ++j) s[j] = fast_exp(s[j] - L);
    }
    std::fill(dp, dp + kBk, 0.f);
    for (int64_t e = 0; e < g.Dv; ++e) {
      const float de = t.dO[i * g.Dv + e];
      const float* vt = t.VT + e * kBk;
#pragma omp simd
      for (int64_t j = 0; j < kBk; ++j) dp[j] += de * vt[j];
    }
    if (o.drop) {
      o.drop->row(g, b, h, i0 + i, j0, j0 + nj, t.keep);
      for (int64_t j = 0; j < nj; ++j) {
        dp[j] = lv[j] != 0.f ? s[j] * (dp[j] * t.keep[j] - Di) : 0.f;
        s[j] *= t.keep[j];
      }
    } else {
#pragma omp simd
      for (int64_t j = 0; j < nj; ++j) dp[j] = lv[j] != 0.f ? s[j] * (dp[j] - Di) : 0.f;
    }
  }
}

// acc (n x d) += (w^T or w) rows: acc[r] += sum_i coef(i, r) * src[i]; the dK/dV/dQ updates.
inline void axpy_row(float* acc, float c, const float* src, int64_t d) {
#pragma omp simd
  for (int64_t e = 0; e < d; ++e) acc[e] += c * src[e];
}

// One (b, k/v head, key block): dk and dv, summed over the query heads that read the k/v head.
template <class T>
void kv_grad_task(const AttentionGeom& g, const Ops<T>& o, const Tiles& t, const float* dsum,
                  int64_t b, int64_t hk, int64_t j0, T* dk, T* dv) {
  const int64_t nj = std::min(kBk, g.Tk - j0);
  load_keys(g, o, t, b, hk, j0, nj, true);
  std::fill(t.acc1, t.acc1 + kBk * g.D, 0.f);
  std::fill(t.acc2, t.acc2 + kBk * g.Dv, 0.f);
  const int64_t istart = g.causal && !g.masked ? (j0 / kBq) * kBq : 0;
  for (int64_t h = hk * g.group(); h < (hk + 1) * g.group(); ++h)
    for (int64_t i0 = istart; i0 < g.Tq; i0 += kBq) {
      const int64_t ni = std::min(kBq, g.Tq - i0);
      load_rows(o.q, g.Tq, g.H, g.D, b, h, i0, ni, t.Q);
      load_rows(o.dy, g.Tq, g.H, g.Dv, b, h, i0, ni, t.dO);
      tile_grads(g, o, t, dsum, b, h, i0, ni, j0, nj);
      for (int64_t i = 0; i < ni; ++i)
        for (int64_t j = 0; j < nj; ++j) {
          axpy_row(t.acc2 + j * g.Dv, t.S[i * kBk + j], t.dO + i * g.Dv, g.Dv);
          axpy_row(t.acc1 + j * g.D, t.dP[i * kBk + j] * g.scale, t.Q + i * g.D, g.D);
        }
    }
  for (int64_t j = 0; j < nj; ++j) {
    T* kr = dk + g.kv_off(b, j0 + j, hk, g.D);
    T* vr = dv + g.kv_off(b, j0 + j, hk, g.Dv);
    for (int64_t d = 0; d < g.D; ++d) kr[d] = st<T>(t.acc1[j * g.D + d]);
    for (int64_t e = 0; e < g.Dv; ++e) vr[e] = st<T>(t.acc2[j * g.Dv + e]);
  }
}

// One (b, h, query block): dq.
template <class T>
void q_grad_task(const AttentionGeom& g, const Ops<T>& o, const Tiles& t, const float* dsum,
                 int64_t b, int64_t h, int64_t i0, T* dq) {
  const int64_t ni = std::min(kBq, g.Tq - i0), hk = h / g.group();
  load_rows(o.q, g.Tq, g.H, g.D, b, h, i0, ni, t.Q);
  load_rows(o.dy, g.Tq, g.H, g.Dv, b, h, i0, ni, t.dO);
  std::fill(t.acc1, t.acc1 + kBq * g.D, 0.f);
  const int64_t jend = key_end(g, i0 + ni - 1);
  for (int64_t j0 = 0; j0 < jend; j0 += kBk) {
    const int64_t nj = std::min(kBk, jend - j0);
    load_keys(g, o, t, b, hk, j0, nj, true);
    tile_grads(g, o, t, dsum, b, h, i0, ni, j0, nj);
    for (int64_t i = 0; i < ni; ++i)
      for (int64_t j = 0; j < nj; ++j)
        axpy_row(t.acc1 + i * g.D, t.dP[i * kBk + j], t.K + j * g.D, g.D);
  }
  for (int64_t i = 0; i < ni; ++i) {
    T* qr = dq + g.q_off(b, i0 + i, h, g.D);
    for (int64_t d = 0; d < g.D; ++d) qr[d] = st<T>(t.acc1[i * g.D + d] * g.scale);
  }
}

// (dy, q, k, v[, mask], y, lse) -> (dq, dk, dv). Dsum = rowsum(dy * y) first (workspace).
template <class T>
void run_backward(const AttentionGeom& g, const Node& n, const KernelArgs& a, int threads) {
  Ops<T> o = ops_of<T>(g, n, a, 1);
  o.dy = a.in(0).data<T>();
  o.y = a.in(a.num_inputs - 2).data<T>();
  o.lse = in_f(a, a.num_inputs - 1);
  float* ws = static_cast<float*>(a.workspace);
  float* dsum = ws + Tiles::floats(g) * threads;
  const int64_t rows = g.B * g.Tq * g.H;
#pragma omp parallel for num_threads(threads)
  for (int64_t r = 0; r < rows; ++r) {  // r = (b, i, h) in dy's order
    const int64_t h = r % g.H, bi = r / g.H, b = bi / g.Tq, i = bi % g.Tq;
    float acc = 0;
    for (int64_t e = 0; e < g.Dv; ++e) acc += ld(o.dy[r * g.Dv + e]) * ld(o.y[r * g.Dv + e]);
    dsum[(b * g.H + h) * g.Tq + i] = acc;
  }
  T *dq = a.out(0).data<T>(), *dk = a.out(1).data<T>(), *dv = a.out(2).data<T>();
  const int64_t nk = k_blocks(g), nq = q_blocks(g);
#pragma omp parallel num_threads(threads)
  {
    const Tiles t(g, ws + Tiles::floats(g) * omp_get_thread_num());
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < g.B * g.Hkv * nk; ++task) {
      const int64_t bh = task / nk;
      kv_grad_task(g, o, t, dsum, bh / g.Hkv, bh % g.Hkv, (task % nk) * kBk, dk, dv);
    }
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < g.B * g.H * nq; ++task) {
      const int64_t bh = task / nq;
      q_grad_task(g, o, t, dsum, bh / g.H, bh % g.H, (task % nq) * kBq, dq);
    }
  }
}

// Operand indices whose float type must agree (the kernel runs one T): forward q, k, v; the
// gradient dy, q, k, v, y. Else the reference kernel (between conversions) runs it.
bool one_float_type(const Node& n, const std::vector<TensorType>& in, bool grad, DType* t) {
  std::vector<size_t> idx =
      grad ? std::vector<size_t>{0, 1, 2, 3, in.size() - 2} : std::vector<size_t>{0, 1, 2};
  *t = in[idx[0]].dtype;
  for (size_t i : idx)
    if (in[i].dtype != *t) return false;
  for (const TensorType& o : n.outputs)
    if (o.dtype != *t && (grad || &o == &n.outputs[0])) return false;
  return true;
}

KernelFactory factory(bool grad) {
  return [grad](const Node& n, const std::vector<TensorType>& in) -> std::unique_ptr<Kernel> {
    const size_t first = grad ? 1 : 0;
    std::vector<TensorType> fwd(in.begin() + first, in.end() - (grad ? 2 : 0));
    const AttentionGeom g = ops::attention_geom(n, fwd, 0);
    if (!grad && attr_b(n, "return_weights"))
      return reference_fallback(n, in, "return_weights: the Tq x Tk weights are an output");
    DType t;
    if (!one_float_type(n, in, grad, &t))
      return reference_fallback(n, in, "q, k, v (and dy, y) of different float types");
    const int threads = omp_get_max_threads();
    const size_t ws =
        sizeof(float) * size_t(Tiles::floats(g) * threads + (grad ? g.B * g.H * g.Tq : 0));
    const Node* np = &n;
    if (t == DType::bf16)
      return grad ? make_kernel(
                        [=](const KernelArgs& a) { run_backward<bf16>(g, *np, a, threads); }, ws)
                  : make_kernel([=](const KernelArgs& a) { run_forward<bf16>(g, *np, a, threads); },
                                ws);
    return grad ? make_kernel([=](const KernelArgs& a) { run_backward<float>(g, *np, a, threads); },
                              ws)
                : make_kernel([=](const KernelArgs& a) { run_forward<float>(g, *np, a, threads); },
                              ws);
  };
}

}  // namespace

LOCKSTEP_REGISTER(cpu_attention_kernels) {
  auto& R = OpRegistry::get();
  R.add_kernel(op::scaled_dot_product_attention, "cpu", factory(false), /*takes_bf16=*/true);
  R.add_kernel(op::scaled_dot_product_attention_grad, "cpu", factory(true), /*takes_bf16=*/true);
}

}  // namespace lockstep::cpu
