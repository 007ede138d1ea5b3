// cpu backend: OpenMP-parallel, vectorised batch_norm (train/infer/grad) and layer_norm (+grad),
// in f32 and natively in bf16 (mixed precision: bf16 x/dy/y/dx, f32 arithmetic, statistics and
// parameter gradients). Per-thread partial sums live in the kernel workspace (sized for the
// thread count at compile time).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <type_traits>
#include <vector>

#include "backends/cpu/vec_math.h"
#include "lockstep/graph/replica_exchange.h"
#include "ops/internal/kernel_util.h"

namespace lockstep::cpu {
namespace {

// x is R rows of W elements: NHWC, rows of all C channels (W = C); or the layout pass's blocked
// nChw16c ([N, C/16, H*W, 16]), rows of 16 channels starting at channel ((r / HW) % CB) * 16.
// M is the count per channel (batch-norm statistics).
struct Dims {
  int64_t R, C;
  double eps;
  int T;  // threads
  int64_t W = 0, M = 0;
  bool blocked = false;
  int64_t HW = 1, CB = 1;
  // batch_norm_train(_grad) fused with relu (forward: after adding the residual input 3;
  // backward: dy masked by y = input 5 > 0, and written to output 3 with emit_dy).
  bool relu = false, residual = false, emit_dy = false;
  // Fused relu6 (relu is set too): the activation clips at 6 as well, and the gradient's mask
  // is 0 < y < 6.
  bool cap = false;
  // The gradient's relu / relu6 mask recomputed from s = bn(x) (input 5 is beta, mask_from_x),
  // rounded as the forward stored y, instead of read from y.
  bool from_x = false;
  // Fused swish (EfficientNet's BatchNormalization -> Activation("swish")): y = s * sigmoid(s)
  // of s = bn(x); the gradient recomputes s from x (its input 5 is beta) and applies swish's
  // derivative to dy itself.
  bool swish = false;
  // Synchronized statistics (attribute group != 0): the in-process replicas of the group pool
  // their sums through its ReplicaExchange (lockstep/graph/replica_exchange.h).
  int64_t group = 0;
  int replica = 0;
};

Dims dims_of(const Node& n, const Shape& x) {
  const int64_t C = x[-1];
  Dims d{x.numel() / C, C, attr_f(n, "epsilon"), omp_get_max_threads()};
  d.W = C;
  d.M = d.R;
  if (n.op == op::batch_norm_train || n.op == op::batch_norm_train_grad ||
      n.op == op::batch_norm_infer) {
    const FusedActivation act = attr_activation(n);
    d.cap = act == FusedActivation::relu6;
    d.relu = d.cap || act == FusedActivation::relu;
    d.swish = act == FusedActivation::swish;
    if (attr_s(n, "layout") == "nChw16c") {
      LS_CHECK(x.rank() == 4 && C % 16 == 0, n.op, " '", n.name,
               "': a blocked (nChw16c) x must be 4-D with channels a multiple of 16, got ",
               x.str());
      d.blocked = true;
      d.W = 16;
      d.R = x.numel() / 16;
      d.HW = x[1] * x[2];
      d.CB = C / 16;
    }
  }
  if (n.op == op::batch_norm_train || n.op == op::batch_norm_infer)
    d.residual = attr_b(n, "residual");
  if (n.op == op::batch_norm_train_grad) {
    d.emit_dy = attr_b(n, "emit_dy");
    d.from_x = attr_b(n, "mask_from_x");
  }
  if (n.op == op::batch_norm_train || n.op == op::batch_norm_train_grad) {
    d.group = attr_i(n, "group");
    d.replica = int(attr_i(n, "replica"));
  }
  return d;
}

// The width of a blocked row, known at compile time (one 16-float vector per row).
using Width16 = std::integral_constant<int64_t, 16>;

// f(r, off, W) for rows [r0, r1): off is the row's first channel, W its width (d.W, or
// Width16{} in the blocked layout, so the row's loop compiles to one vector).
template <class F>
inline void for_rows(const Dims& d, int64_t r0, int64_t r1, F&& f) {
  if (!d.blocked) {
    for (int64_t r = r0; r < r1; ++r) f(r, int64_t(0), d.W);
    return;
  }
  int64_t q = r0 / d.HW, h = r0 - q * d.HW, off = (q % d.CB) * 16;
  for (int64_t r = r0; r < r1; ++r) {
    f(r, off, Width16{});
    if (++h == d.HW) h = 0, ++q, off = (q % d.CB) * 16;
  }
}

// Where channel c's first element is.
inline int64_t first_of(const Dims& d, int64_t c) {
  return d.blocked ? (c / 16) * d.HW * 16 + c % 16 : c;
}

inline void rows_of(const Dims& d, int64_t* r0, int64_t* r1) {
  const int t = omp_get_thread_num(), nt = omp_get_num_threads();
  *r0 = d.R * t / nt;
  *r1 = d.R * (t + 1) / nt;
}

// The small inputs (gamma, beta, statistics: f32, or bf16 when a mixed-precision graph casts
// them) as f32: an f32 input is read in place, a bf16 one is widened per run into the params
// area at the end of the workspace.
struct Params {
  std::vector<int64_t> offset;  // per input: float offset in the params area, or -1
  size_t floats = 0;
  Params() = default;
  Params(const std::vector<TensorType>& in, const std::vector<int>& small) {
    offset.assign(in.size(), -1);
    for (int i : small)
      if (i < int(in.size()) && in[size_t(i)].dtype == DType::bf16) {
        offset[size_t(i)] = int64_t(floats);
        floats += size_t(in[size_t(i)].shape.numel() + 15) / 16 * 16;
      }
  }
  const float* get(const KernelArgs& a, int i, float* area) const {
    if (offset[size_t(i)] < 0) return a.in(i).data<float>();
    float* dst = area + offset[size_t(i)];
    const bf16* src = a.in(i).data<bf16>();
    for (int64_t k = 0; k < a.in(i).numel(); ++k) dst[k] = bf16_to_f32(src[k]);
    return dst;
  }
};

constexpr int64_t kBlock = 64;  // rows summed in f32 before they join the f64 totals

// Batch-norm workspace: per-thread f64 partial sums (2*T*C) and f32 block sums (2*T*C), then
// per-channel f32 coefficients (6*C), then f64 totals (2*C) and, synchronized, what this
// replica publishes and the group's sums (4*C + 2); the params area follows (Params).
size_t bn_ws(const Dims& d) {
  return sizeof(double) * 2 * d.T * d.C + sizeof(float) * d.C * (2 * d.T + 6) +
         sizeof(double) * (d.group ? 6 * d.C + 2 : 2 * d.C);
}
struct BnWs {
  double* part;
  float *block, *coef;
  double *total, *mine;
  BnWs(const Dims& d, void* w)
      : part(static_cast<double*>(w)),
        block(reinterpret_cast<float*>(part + 2 * d.T * d.C)),
        coef(block + 2 * d.T * d.C),
        total(reinterpret_cast<double*>(coef + 6 * d.C)),  // (2TC + 6C floats: 8-byte aligned)
        mine(total + 2 * d.C) {}
};

// The nt threads' partial sums added per channel: w.total[0..C) and w.total[C..2C).
inline void thread_totals(const Dims& d, const BnWs& w, int nt) {
  const int64_t C = d.C;
  for (int64_t c = 0; c < C; ++c) {
    double s1 = 0, s2 = 0;
    for (int j = 0; j < nt; ++j) s1 += w.part[2 * j * C + c], s2 += w.part[2 * j * C + C + c];
    w.total[c] = s1, w.total[C + c] = s2;
  }
}

// The forward's statistics from the totals of the shifted sums S1 = sum(x - k),
// S2 = sum((x - k)^2) over M values per channel: mean = k + S1/M, biased var = S2/M - (S1/M)^2.
// Synchronized (d.group): every replica of the group publishes [M, k, S1, S2] and combines all of
// them in replica order, in f64 (so each gets the same bits): mean m = sum_r (S1_r + M_r k_r) / M
// and var = sum_r (S2_r + 2 (k_r - m) S1_r + M_r (k_r - m)^2) / M, M = sum_r M_r.
inline void forward_statistics(const Dims& d, const BnWs& w, const float* k, double* mean,
                               double* var) {
  const int64_t C = d.C;
  if (!d.group) {
    for (int64_t c = 0; c < C; ++c) {
      const double m1 = w.total[c] / double(d.M), m2 = w.total[C + c] / double(d.M);
      mean[c] = k[c] + m1;
      var[c] = std::max(0.0, m2 - m1 * m1);
    }
    return;
  }
  double* mine = w.mine;
  mine[0] = double(d.M);
  for (int64_t c = 0; c < C; ++c)
    mine[1 + c] = k[c], mine[1 + C + c] = w.total[c], mine[1 + 2 * C + c] = w.total[C + c];
  ReplicaExchange* x = ReplicaExchange::find(d.group);
  const int n = x->replicas();
  const double* const* all = x->gather(d.replica, mine, size_t(1 + 3 * C));
  double M = 0;
  for (int r = 0; r < n; ++r) M += all[r][0];
  LS_CHECK(M > 0, "batch_norm_train: the replicas of group ", d.group, " have no rows at all");
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0;
    for (int r = 0; r < n; ++r) sum += all[r][1 + C + c] + all[r][0] * all[r][1 + c];
    const double m = sum / M;
    double ss = 0;
    for (int r = 0; r < n; ++r) {
      const double dk = all[r][1 + c] - m;
      ss += all[r][1 + 2 * C + c] + 2 * dk * all[r][1 + C + c] + all[r][0] * dk * dk;
    }
    mean[c] = m;
    var[c] = std::max(0.0, ss / M);
  }
}

// bn(x) = x * scale + shift per channel with the given statistics (in double, rounded once).
inline void scale_shift(const Dims& d, const float* gm, const float* bt, const float* mean,
                        const float* var, float* scale, float* shift) {
  for (int64_t c = 0; c < d.C; ++c) {
    const double s = gm[c] / std::sqrt(double(var[c]) + d.eps);
    scale[c] = float(s);
    shift[c] = float(bt[c] - mean[c] * s);
  }
}

// Thread t's per-channel sums over its rows [r0, r1): row(r, off, p1, p2, W) adds row r (first
// channel off, width W as in for_rows) into the f32 sums p1, p2, which join the thread's f64
// totals (w.part) every kBlock rows.
// NHWC: a row holds every channel, so consecutive rows add into independent vectors. Blocked, a
// row is one vector and a run of HW consecutive rows shares its channels: one accumulator would
// chain every row's add through the store of the one before (about 10 cycles a row on Zen 4: the
// pass ran at ~25 GB/s, far below the cache's bandwidth), so the run is dealt out over
// kChains accumulators that are added together (in f64) every kBlock rows.
template <class Row>
inline void sum_rows(const Dims& d, const BnWs& w, int t, int64_t r0, int64_t r1, Row&& row) {
  const int64_t C = d.C;
  double* __restrict s1 = w.part + 2 * t * C;
  double* __restrict s2 = s1 + C;
  for (int64_t c = 0; c < C; ++c) s1[c] = s2[c] = 0;
  if (d.blocked) {
    constexpr int kChains = 4;
    alignas(64) float acc[kChains][2][16];
    for (int64_t r = r0; r < r1;) {
      const int64_t q = r / d.HW, end = std::min(r1, (q + 1) * d.HW), off = (q % d.CB) * 16;
      for (; r < end;) {
        const int64_t stop = std::min(end, r + kBlock);
        for (auto& chain : acc)
          for (auto& sums : chain) std::fill(sums, sums + 16, 0.f);
        for (; r + kChains <= stop; r += kChains)
          for (int k = 0; k < kChains; ++k) row(r + k, off, acc[k][0], acc[k][1], Width16{});
        for (int k = 0; r < stop; ++r, ++k) row(r, off, acc[k][0], acc[k][1], Width16{});
        for (int c = 0; c < 16; ++c) {
          double a1 = 0, a2 = 0;
          for (int k = 0; k < kChains; ++k) a1 += acc[k][0][c], a2 += acc[k][1][c];
          s1[off + c] += a1, s2[off + c] += a2;
        }
      }
    }
    return;
  }
  float* __restrict b1 = w.block + 2 * t * C;
  float* __restrict b2 = b1 + C;
  for (int64_t rb = r0; rb < r1; rb += kBlock) {
    for (int64_t c = 0; c < C; ++c) b1[c] = b2[c] = 0;
    for (int64_t r = rb; r < std::min(r1, rb + kBlock); ++r) row(r, int64_t(0), b1, b2, d.W);
    for (int64_t c = 0; c < C; ++c) s1[c] += b1[c], s2[c] += b2[c];
  }
}

// The gradient's per-channel results from the nt threads' sums of dy and dy * (x - mean):
// dgamma, dbeta, and the coefficients of dx = a*dy + b*(x - mean) + c (with the statistics'
// gradients dmean, dvar when given).
// Synchronized (d.group), dgamma and dbeta stay this replica's (the gradient all-reduce adds
// them), but the coefficients take the group's sums: replica r publishes [M_r, w_r * sums] (w_r
// its share of the loss, which scales its dy) and uses sum_r' (w_r' sums_r') / w_r, the sums of
// the whole loss's gradient in its own scale.
inline void grad_coefficients(const Dims& d, const BnWs& w, int nt, const float* gm,
                              const float* var, const float* dmean, const float* dvar, float* dg,
                              float* db, float* ka, float* kb, float* kc) {
  const int64_t C = d.C;
  thread_totals(d, w, nt);
  const double* g = w.total;  // the sums the coefficients use
  double M = double(d.M);
  if (d.group) {
    LS_CHECK(!dmean && !dvar,
             "batch_norm_train_grad: synchronized statistics take no gradients "
             "of their own (dmean, dvar)");
    ReplicaExchange* x = ReplicaExchange::find(d.group);
    const double wr = x->weight(d.replica);
    double* mine = w.mine;
    mine[0] = double(d.M);
    for (int64_t c = 0; c < 2 * C; ++c) mine[1 + c] = wr * w.total[c];
    const double* const* all = x->gather(d.replica, mine, size_t(1 + 2 * C));
    const int n = x->replicas();
    double* sums = mine + 1 + 2 * C;  // (2C doubles after what was published)
    M = 0;
    for (int r = 0; r < n; ++r) M += all[r][0];
    const double inv = wr > 0 ? 1.0 / wr : 0.0;  // a replica without rows uses none of it
    for (int64_t c = 0; c < 2 * C; ++c) {
      double s = 0;
      for (int r = 0; r < n; ++r) s += all[r][1 + c];
      sums[c] = s * inv;
    }
    g = sums;
  }
  for (int64_t c = 0; c < C; ++c) {
    const double rstd = 1.0 / std::sqrt(double(var[c]) + d.eps);
    dg[c] = float(w.total[C + c] * rstd);
    db[c] = float(w.total[c]);
    const double sdy = g[c], sdyx = g[C + c] * rstd;
    ka[c] = float(gm[c] * rstd);
    kb[c] = float(-gm[c] * rstd * rstd * sdyx / M + (dvar ? 2.0 * dvar[c] / M : 0.0));
    kc[c] = float(-gm[c] * rstd * sdy / M + (dmean ? dmean[c] / M : 0.0));
  }
}

// grad_coefficients inside a parallel region's single: an exception (a failed replica of a
// synchronized group) is kept in `error`, for the caller to rethrow after the region.
inline void coefficients_or_error(const Dims& d, const BnWs& w, int nt, const float* gm,
                                  const float* var, const float* dmean, const float* dvar,
                                  float* dg, float* db, float* ka, float* kb, float* kc,
                                  std::exception_ptr& error) {
  try {
    grad_coefficients(d, w, nt, gm, var, dmean, dvar, dg, db, ka, kb, kc);
  } catch (...) {
    error = std::current_exception();
  }
}

// T: the storage of x, y, dy and dx (f32, or bf16 under mixed precision: loads widen to f32,
// sums run in f32 over blocks of kBlock rows and in f64 across blocks, stores round once).
// One pass for the statistics: sums of (x - k) and (x - k)^2 with k = the first row (a sample
// of each channel, so the shifted sums do not cancel), then mean = k + S1/M and
// var = S2/M - (S1/M)^2 (M values per channel).
// The forward's last pass over rows [r0, r1): y = x * scale + shift per channel, then + z
// (Res) and relu (Relu), clipped at 6 with Cap (relu6) (as the unfused ops round in f32; in bf16
// without the intermediate roundings).
template <class T, bool Relu, bool Res, bool Cap = false, bool Swish = false>
inline void bn_out_rows(const Dims& d, const T* x, const T* z, T* y, int64_t r0, int64_t r1,
                        const float* sc, const float* sh) {
  for_rows(d, r0, r1, [&](int64_t r, int64_t off, auto W) {
    const T* __restrict xr = x + r * W;
    const T* __restrict zr = Res ? z + r * W : nullptr;
    T* __restrict yr = y + r * W;
    const float* __restrict scr = sc + off;
    const float* __restrict shr = sh + off;
#pragma omp simd
    for (int64_t c = 0; c < W; ++c) {
      float o = ld(xr[c]) * scr[c] + shr[c];
      if constexpr (Res) o += ld(zr[c]);
      if constexpr (Relu) o = std::max(o, 0.f);
      if constexpr (Cap) o = std::min(o, 6.f);
      if constexpr (Swish) o = o * vec_sigmoid(o);
      yr[c] = st<T>(o);
    }
  });
}

// Rows [r0, r1) of y = x * scale + shift, with the fused residual z and relu where d says.
template <class T>
inline void bn_out(const Dims& d, const T* x, const T* z, T* y, int64_t r0, int64_t r1,
                   const float* scale, const float* shift) {
  if (d.residual && d.relu)
    bn_out_rows<T, true, true>(d, x, z, y, r0, r1, scale, shift);
  else if (d.residual)
    bn_out_rows<T, false, true>(d, x, z, y, r0, r1, scale, shift);
  else if (d.cap)
    bn_out_rows<T, true, false, true>(d, x, z, y, r0, r1, scale, shift);
  else if (d.swish)
    bn_out_rows<T, false, false, false, true>(d, x, z, y, r0, r1, scale, shift);
  else if (d.relu)
    bn_out_rows<T, true, false>(d, x, z, y, r0, r1, scale, shift);
  else
    bn_out_rows<T, false, false>(d, x, z, y, r0, r1, scale, shift);
}

template <class T>
void bn_train(const Dims& d, const Params& p, float* params, const KernelArgs& a) {
  const T* x = a.in(0).data<T>();
  const T* z = d.residual ? a.in(3).data<T>() : nullptr;
  const float *gm = p.get(a, 1, params), *bt = p.get(a, 2, params);
  T* y = a.out(0).data<T>();
  float *mean = out_f(a, 1), *var = out_f(a, 2);
  const int64_t C = d.C;
  BnWs w(d, a.workspace);
  float *k = w.coef, *scale = k + C, *shift = scale + C;
  for (int64_t c = 0; c < C; ++c) k[c] = d.R ? ld(x[first_of(d, c)]) : 0.f;
  std::exception_ptr error;
#pragma omp parallel num_threads(d.T)
  {
    int64_t r0, r1;
    rows_of(d, &r0, &r1);
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const float* __restrict kc = k;
    sum_rows(d, w, t, r0, r1, [&](int64_t r, int64_t off, float* q1, float* q2, auto W) {
      const T* __restrict xr = x + r * W;
      float* __restrict p1 = q1;
      float* __restrict p2 = q2;
      const float* __restrict kr = kc + off;
#pragma omp simd
      for (int64_t c = 0; c < W; ++c) {
        const float v = ld(xr[c]) - kr[c];
        p1[c] += v;
        p2[c] += v * v;
      }
    });
#pragma omp barrier
#pragma omp single
    {
      try {  // (an exception must not leave the parallel region: rethrown after it)
        thread_totals(d, w, nt);
        double* m = w.total;  // the statistics overwrite the totals, channel by channel
        double* v = w.total + C;
        forward_statistics(d, w, kc, m, v);
        for (int64_t c = 0; c < C; ++c) {
          const double sc = gm[c] / std::sqrt(v[c] + d.eps);
          scale[c] = float(sc);
          shift[c] = float(bt[c] - m[c] * sc);
          mean[c] = float(m[c]);
          var[c] = float(v[c]);
        }
      } catch (...) {
        error = std::current_exception();
      }
    }
    if (!error) bn_out(d, x, z, y, r0, r1, scale, shift);
  }
  if (error) std::rethrow_exception(error);
}

// relu_grad (or relu6_grad: cap) folded into the gradient: dy where y > 0 (and y < 6).
template <bool Cap, class T>
inline float masked(T dy, T y) {
  const float v = ld(y);
  if constexpr (Cap) return v > 0.f && v < 6.f ? ld(dy) : 0.f;
  return v > 0.f ? ld(dy) : 0.f;
}

// One row of bn_train_grad's first pass: per-channel sums of dy (masked by y > 0 with Relu) and
// of dy * (x - mean); with dzr, the masked dy is written there too.
template <class T, bool Relu, bool Cap, class Width>
[[gnu::always_inline]] inline void bn_grad_row_sums(const T* __restrict dyr, const T* __restrict xr,
                                                    const T* __restrict yr, T* __restrict dzr,
                                                    const float* __restrict mu,
                                                    float* __restrict p1, float* __restrict p2,
                                                    Width W) {
  if constexpr (Relu) {
    if (dzr) {
#pragma omp simd
      for (int64_t c = 0; c < W; ++c) {
        // dy or 0, both exact in T: storing it loses nothing.
        const float g = masked<Cap>(dyr[c], yr[c]);
        dzr[c] = st<T>(g);
        p1[c] += g;
        p2[c] += g * (ld(xr[c]) - mu[c]);
      }
    } else {
#pragma omp simd
      for (int64_t c = 0; c < W; ++c) {
        const float g = masked<Cap>(dyr[c], yr[c]);
        p1[c] += g;
        p2[c] += g * (ld(xr[c]) - mu[c]);
      }
    }
  } else {
#pragma omp simd
    for (int64_t c = 0; c < W; ++c) {
      const float g = ld(dyr[c]);
      p1[c] += g;
      p2[c] += g * (ld(xr[c]) - mu[c]);
    }
  }
}

// One row of bn_train_grad's second pass: dx = a*dy + b*(x - mean) + c, dy masked by y > 0
// when yr is given (Relu without a stored dz).
template <class T, bool Relu, bool Cap, class Width>
[[gnu::always_inline]] inline void bn_grad_row_dx(const T* __restrict dyr, const T* __restrict xr,
                                                  const T* __restrict yr, T* __restrict dxr,
                                                  const float* __restrict fa,
                                                  const float* __restrict fb,
                                                  const float* __restrict fc,
                                                  const float* __restrict mu, Width W) {
  if (Relu && yr) {
#pragma omp simd
    for (int64_t c = 0; c < W; ++c)
      dxr[c] = st<T>(fa[c] * masked<Cap>(dyr[c], yr[c]) + fb[c] * (ld(xr[c]) - mu[c]) + fc[c]);
  } else {
#pragma omp simd
    for (int64_t c = 0; c < W; ++c)
      dxr[c] = st<T>(fa[c] * ld(dyr[c]) + fb[c] * (ld(xr[c]) - mu[c]) + fc[c]);
  }
}

// dx = a*dy + b*(x - mean) + c0 per channel, after one reduction pass for sum(dy), sum(dy*xhat).
// Fused with relu (Relu): dy is masked by y > 0 in both passes; with emit_dy the first pass
// writes the masked dy (dz) and the second reads it back.
template <class T, bool Relu, bool Cap = false>
void bn_train_grad_impl(const Dims& d, const Params& p, float* params, const KernelArgs& a) {
  const T *dy = a.in(0).data<T>(), *x = a.in(1).data<T>();
  const T* yv = Relu ? a.in(5).data<T>() : nullptr;
  T* dz = Relu && d.emit_dy ? a.out(3).data<T>() : nullptr;
  const float *gm = p.get(a, 2, params), *mean = p.get(a, 3, params), *var = p.get(a, 4, params);
  const int si = Relu ? 6 : 5;  // the statistics' gradients, when given
  const float* dmean = a.num_inputs > si ? p.get(a, si, params) : nullptr;
  const float* dvar = a.num_inputs > si ? p.get(a, si + 1, params) : nullptr;
  T* dx = a.out(0).data<T>();
  float *dg = out_f(a, 1), *db = out_f(a, 2);
  const int64_t C = d.C;
  BnWs w(d, a.workspace);
  float *ka = w.coef, *kb = ka + C, *kc = kb + C;
  std::exception_ptr error;
#pragma omp parallel num_threads(d.T)
  {
    int64_t r0, r1;
    rows_of(d, &r0, &r1);
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    sum_rows(d, w, t, r0, r1, [&](int64_t r, int64_t off, float* p1, float* p2, auto W) {
      bn_grad_row_sums<T, Relu, Cap>(dy + r * W, x + r * W, Relu ? yv + r * W : nullptr,
                                     dz ? dz + r * W : nullptr, mean + off, p1, p2, W);
    });
#pragma omp barrier
#pragma omp single
    coefficients_or_error(d, w, nt, gm, var, dmean, dvar, dg, db, ka, kb, kc, error);
    if (!error)
      for_rows(d, r0, r1, [&](int64_t r, int64_t off, auto W) {
        bn_grad_row_dx<T, Relu, Cap>((dz ? dz : dy) + r * W, x + r * W,
                                     Relu && !dz ? yv + r * W : nullptr, dx + r * W, ka + off,
                                     kb + off, kc + off, mean + off, W);
      });
  }
  if (error) std::rethrow_exception(error);
}

// g = dy carried back through the fused activation at s = bn(x): swish's derivative (rounded
// to T as the unfused swish_grad's output is), or relu / relu6's mask on s rounded to T as the
// forward stored y (mask_from_x).
enum class AtS { swish, relu, relu6 };
template <AtS A, class T>
inline float grad_at_s(T dy, float s) {
  if constexpr (A == AtS::swish) {
    const float sg = vec_sigmoid(s);
    return ld(st<T>(ld(dy) * (sg + s * sg * (1.f - sg))));
  } else {
    const float v = ld(st<T>(s));
    const bool pass = A == AtS::relu6 ? v > 0.f && v < 6.f : v > 0.f;
    return pass ? ld(dy) : 0.f;
  }
}

// The gradient of a batch_norm_train fused with an activation whose gradient is taken at
// s = bn(x) = x * scale + shift (recomputed from gamma, beta = input 5, mean and var), not read
// from y: swish, and relu / relu6 with mask_from_x. The first pass forms g = grad_at_s(dy, s)
// and the sums of g and g * (x - mean); swish stores g (into dx, which the second pass
// overwrites in place: its derivative costs more to recompute than to read back), relu(6)
// recompute it (and write it to dz only with emit_dy). The second pass: dx = a*g +
// b*(x - mean) + c.
template <class T, AtS A>
void bn_train_grad_at_s(const Dims& d, const Params& p, float* params, const KernelArgs& a) {
  constexpr bool store = A == AtS::swish;
  const T *dy = a.in(0).data<T>(), *x = a.in(1).data<T>();
  const float *gm = p.get(a, 2, params), *mean = p.get(a, 3, params), *var = p.get(a, 4, params),
              *bt = p.get(a, 5, params);
  const float* dmean = a.num_inputs > 6 ? p.get(a, 6, params) : nullptr;
  const float* dvar = a.num_inputs > 6 ? p.get(a, 7, params) : nullptr;
  T* dx = a.out(0).data<T>();
  T* gbuf = store ? dx : d.emit_dy ? a.out(3).data<T>() : nullptr;  // where g is written
  float *dg = out_f(a, 1), *db = out_f(a, 2);
  const int64_t C = d.C;
  BnWs w(d, a.workspace);
  float *ka = w.coef, *kb = ka + C, *kc = kb + C, *sc = kc + C, *sh = sc + C;
  scale_shift(d, gm, bt, mean, var, sc, sh);
  std::exception_ptr error;
#pragma omp parallel num_threads(d.T)
  {
    int64_t r0, r1;
    rows_of(d, &r0, &r1);
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    sum_rows(
        d, w, t, r0, r1,
        [&](int64_t r, int64_t off, float* __restrict p1, float* __restrict p2, auto W) {
          const T* __restrict dyr = dy + r * W;
          const T* __restrict xr = x + r * W;
          T* __restrict gr = gbuf ? gbuf + r * W : nullptr;
          const float* __restrict mu = mean + off, * __restrict scr = sc + off, * __restrict shr = sh + off;
#pragma omp simd
          for (int64_t c = 0; c < W; ++c) {
            const float xv = ld(xr[c]), g = grad_at_s<A>(dyr[c], xv * scr[c] + shr[c]);
            if (gr) gr[c] = st<T>(g);
            p1[c] += g;
            p2[c] += g * (xv - mu[c]);
          }
        });
#pragma omp barrier
#pragma omp single
    coefficients_or_error(d, w, nt, gm, var, dmean, dvar, dg, db, ka, kb, kc, error);
    if (!error)
      for_rows(d, r0, r1, [&](int64_t r, int64_t off, auto W) {
        const T* __restrict dyr = dy + r * W;
        const T* __restrict xr = x + r * W;
        T* dxr = dx + r * W;  // with store: g in, dx out, element by element
        const float *fa = ka + off, *fb = kb + off, *fc = kc + off, *mu = mean + off,
                    *scr = sc + off, *shr = sh + off;
#pragma omp simd
        for (int64_t c = 0; c < W; ++c) {
          const float xv = ld(xr[c]);
          const float g = store ? ld(dxr[c]) : grad_at_s<A>(dyr[c], xv * scr[c] + shr[c]);
          dxr[c] = st<T>(fa[c] * g + fb[c] * (xv - mu[c]) + fc[c]);
        }
      });
  }
  if (error) std::rethrow_exception(error);
}

template <class T>
void bn_train_grad(const Dims& d, const Params& p, float* params, const KernelArgs& a) {
  if (d.swish)
    bn_train_grad_at_s<T, AtS::swish>(d, p, params, a);
  else if (d.from_x && d.cap)
    bn_train_grad_at_s<T, AtS::relu6>(d, p, params, a);
  else if (d.from_x)
    bn_train_grad_at_s<T, AtS::relu>(d, p, params, a);
  else if (d.cap)
    bn_train_grad_impl<T, true, true>(d, p, params, a);
  else if (d.relu)
    bn_train_grad_impl<T, true>(d, p, params, a);
  else
    bn_train_grad_impl<T, false>(d, p, params, a);
}

// Fused (fuse_batch_norm): relu and a residual input 5, y = relu(bn(x) + z).
template <class T>
void bn_infer(const Dims& d, const Params& p, float* params, const KernelArgs& a) {
  const T* x = a.in(0).data<T>();
  const T* z = d.residual ? a.in(5).data<T>() : nullptr;
  const float *gm = p.get(a, 1, params), *bt = p.get(a, 2, params), *mean = p.get(a, 3, params),
              *var = p.get(a, 4, params);
  T* y = a.out(0).data<T>();
  const int64_t C = d.C;
  float* scale = static_cast<float*>(a.workspace);
  float* shift = scale + C;
  scale_shift(d, gm, bt, mean, var, scale, shift);
#pragma omp parallel num_threads(d.T)
  {
    int64_t r0, r1;
    rows_of(d, &r0, &r1);
    bn_out(d, x, z, y, r0, r1, scale, shift);
  }
}

template <class T>
void ln(const Dims& d, const Params& p, float* params, const KernelArgs& a) {
  const T* x = a.in(0).data<T>();
  const float *gm = p.get(a, 1, params), *bt = p.get(a, 2, params);
  T* y = a.out(0).data<T>();
  float *mean = out_f(a, 1), *rs = out_f(a, 2);
  const int64_t C = d.C;
#pragma omp parallel for schedule(static) num_threads(d.T)
  for (int64_t r = 0; r < d.R; ++r) {
    const T* __restrict xr = x + r * C;
    T* __restrict yr = y + r * C;
    float s = 0, ss = 0;
    for (int64_t c = 0; c < C; ++c) s += ld(xr[c]);
    const float m = s / float(C);
    for (int64_t c = 0; c < C; ++c) ss += (ld(xr[c]) - m) * (ld(xr[c]) - m);
    const float rstd = float(1.0 / std::sqrt(double(ss) / C + d.eps));
    for (int64_t c = 0; c < C; ++c) yr[c] = st<T>(gm[c] * ((ld(xr[c]) - m) * rstd) + bt[c]);
    mean[r] = m;
    rs[r] = rstd;
  }
}

// Workspace: per-thread dgamma/dbeta partials (2*T*C floats); the params area follows.
template <class T>
void ln_grad(const Dims& d, const Params& p, float* params, const KernelArgs& a) {
  const T *dy = a.in(0).data<T>(), *x = a.in(1).data<T>();
  const float *gm = p.get(a, 2, params), *mean = p.get(a, 3, params), *rs = p.get(a, 4, params);
  const float* dmean = a.num_inputs > 5 ? p.get(a, 5, params) : nullptr;
  const float* drstd = a.num_inputs > 5 ? p.get(a, 6, params) : nullptr;
  T* dx = a.out(0).data<T>();
  float *dg = out_f(a, 1), *db = out_f(a, 2);
  const int64_t C = d.C;
  float* part = static_cast<float*>(a.workspace);
  int used = 1;
#pragma omp parallel num_threads(d.T)
  {
    int64_t r0, r1;
    rows_of(d, &r0, &r1);
    const int t = omp_get_thread_num();
#pragma omp single
    used = omp_get_num_threads();
    float* __restrict pg = part + 2 * t * C;
    float* __restrict pb = pg + C;
    for (int64_t c = 0; c < C; ++c) pg[c] = pb[c] = 0;
    for (int64_t r = r0; r < r1; ++r) {
      const T *dyr = dy + r * C, *xr = x + r * C;
      const float m = mean[r], rstd = rs[r];
      float sg = 0, sgx = 0;
      for (int64_t c = 0; c < C; ++c) {
        const float g = ld(dyr[c]), xh = (ld(xr[c]) - m) * rstd, gi = g * gm[c];
        sg += gi;
        sgx += gi * xh;
        pg[c] += g * xh;
        pb[c] += g;
      }
      sg /= float(C);
      sgx /= float(C);
      const float em = dmean ? dmean[r] / float(C) : 0.f;
      const float er = drstd ? -drstd[r] * rstd * rstd * rstd / float(C) : 0.f;
      for (int64_t c = 0; c < C; ++c) {
        const float xc = ld(xr[c]) - m;
        dx[r * C + c] = st<T>(rstd * (ld(dyr[c]) * gm[c] - sg - xc * rstd * sgx) + em + er * xc);
      }
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    float g = 0, b = 0;
    for (int k = 0; k < used; ++k) {
      g += part[2 * k * C + c];
      b += part[2 * k * C + C + c];
    }
    dg[c] = g;
    db[c] = b;
  }
}

using Run = void (*)(const Dims&, const Params&, float*, const KernelArgs&);

// A norm kernel: x_input is x; `large` are the inputs with x's shape, which must share output
// 0's float type (all f32: the f32 kernel; all bf16: the bf16 one; a mix runs the f32 kernel
// between conversions); `small` are the per-channel / per-row inputs, f32 or bf16 (Params).
KernelFactory factory(Run f32, Run b16, int x_input, std::vector<int> large, std::vector<int> small,
                      size_t (*ws)(const Dims&)) {
  return [=](const Node& n, const std::vector<TensorType>& in) -> std::unique_ptr<Kernel> {
    const DType t = n.outputs[0].dtype;
    bool same = t == DType::f32 || t == DType::bf16;
    for (int i : large) same = same && (i >= int(in.size()) || in[size_t(i)].dtype == t);
    if (!same) return bf16_via_f32(n, in, factory(f32, b16, x_input, large, small, ws));
    const Params p(in, small);
    const Dims d = dims_of(n, in[size_t(x_input)].shape);
    const size_t base = (ws(d) + 63) / 64 * 64;
    const Run f = t == DType::bf16 ? b16 : f32;
    return make_kernel(
        [d, p, base, f](const KernelArgs& a) {
          f(d, p, reinterpret_cast<float*>(static_cast<char*>(a.workspace) + base), a);
        },
        base + p.floats * sizeof(float));
  };
}

LOCKSTEP_REGISTER(cpu_norm_kernels) {
  auto& R = OpRegistry::get();
  size_t (*bn_infer_ws)(const Dims&) = [](const Dims& d) { return sizeof(float) * 2 * d.C; };
  size_t (*ln_ws)(const Dims&) = [](const Dims&) { return size_t(0); };
  size_t (*ln_grad_ws)(const Dims&) = [](const Dims& d) { return sizeof(float) * 2 * d.T * d.C; };
  R.add_kernel(op::batch_norm_train, "cpu",
               factory(bn_train<float>, bn_train<bf16>, 0, {0, 3}, {1, 2}, bn_ws),
               /*takes_bf16=*/true);
  // Fused with relu or relu6, input 5 is y (shaped like x) and the statistics' gradients move to
  // 6, 7.
  KernelFactory bn_grad =
      factory(bn_train_grad<float>, bn_train_grad<bf16>, 1, {0, 1}, {2, 3, 4, 5, 6}, bn_ws);
  KernelFactory bn_grad_relu =
      factory(bn_train_grad<float>, bn_train_grad<bf16>, 1, {0, 1, 5}, {2, 3, 4, 6, 7}, bn_ws);
  // Fused with swish, or with relu / relu6 and mask_from_x, input 5 is beta (per channel).
  KernelFactory bn_grad_swish =
      factory(bn_train_grad<float>, bn_train_grad<bf16>, 1, {0, 1}, {2, 3, 4, 5, 6, 7}, bn_ws);
  R.add_kernel(
      op::batch_norm_train_grad, "cpu",
      [bn_grad, bn_grad_relu, bn_grad_swish](const Node& n, const std::vector<TensorType>& in) {
        switch (attr_activation(n)) {
          case FusedActivation::linear:
            return bn_grad(n, in);
          case FusedActivation::relu:
          case FusedActivation::relu6:
            return attr_b(n, "mask_from_x") ? bn_grad_swish(n, in) : bn_grad_relu(n, in);
          case FusedActivation::swish:
            return bn_grad_swish(n, in);
          case FusedActivation::sigmoid:
          case FusedActivation::gelu:
            break;  // not in batch_norm_train_grad's takes_activations: attr_activation refuses
        }
        LS_FAIL("batch_norm_train_grad '", n.name, "': no cpu kernel for its activation");
      },
      /*takes_bf16=*/true);
  R.add_kernel(op::batch_norm_infer, "cpu",
               factory(bn_infer<float>, bn_infer<bf16>, 0, {0, 5}, {1, 2, 3, 4}, bn_infer_ws),
               /*takes_bf16=*/true);
  R.add_kernel(op::layer_norm, "cpu", factory(ln<float>, ln<bf16>, 0, {0}, {1, 2}, ln_ws),
               /*takes_bf16=*/true);
  R.add_kernel(op::layer_norm_grad, "cpu",
               factory(ln_grad<float>, ln_grad<bf16>, 1, {0, 1}, {2, 3, 4, 5, 6}, ln_grad_ws),
               /*takes_bf16=*/true);
}

}  // namespace
}  // namespace lockstep::cpu
