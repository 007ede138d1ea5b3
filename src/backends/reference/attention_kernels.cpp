// Reference kernels of scaled_dot_product_attention and its gradient: the plain formula in
// double, one (batch, head) at a time with its whole Tq x Tk weight matrix, the ground truth the
// cpu kernel (tiled, linear memory) and the xla lowering are held to.
//   s = scale * q k^T, masked -> -1e9; p = softmax(s); y = (p * keep) v
//   dp = (dy v^T) * keep; ds = p * (dp - rowsum(p * dp)) (0 where masked); dq = scale ds k, ...
#include <algorithm>
#include <cmath>
#include <optional>

#include "ops/internal/attention.h"
#include "ops/internal/kernel_util.h"

namespace lockstep {
namespace {

using ops::AttentionDropout;
using ops::AttentionGeom;

// The mask value of (b, h, i, j) as keep / drop; any input type the op takes (bf16 arrives as
// f32 through the executable's conversion).
bool kept(const AttentionGeom& g, const Tensor* mask, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (!g.visible(i, j)) return false;
  if (!mask) return true;
  const int64_t o = g.mask_off(b, h, i, j);
  return mask->dtype() == DType::u8 ? mask->data<uint8_t>()[o] != 0 : mask->data<float>()[o] != 0.f;
}

// Per (b, h): s -> p (Tq x Tk, softmax rows), lse, and keep (dropout factors, 1 without).
struct Scratch {
  double* p;
  float* keep;
  bool* live;  // the logit depends on q and k (not masked)
};

void weights(const AttentionGeom& g, const KernelArgs& a, const AttentionDropout* drop, int64_t b,
             int64_t h, Scratch s, double* lse) {
  const float *q = a.in(0).data<float>(), *k = a.in(1).data<float>();
  const Tensor* mask = g.masked ? &a.in(3) : nullptr;
  const int64_t hk = h / g.group();
  for (int64_t i = 0; i < g.Tq; ++i) {
    double* row = s.p + i * g.Tk;
    double m = -INFINITY;
    for (int64_t j = 0; j < g.Tk; ++j) {
      const bool live = kept(g, mask, b, h, i, j);
      s.live[i * g.Tk + j] = live;
      double v = ops::kAttentionMasked;
      if (live) {
        v = 0;
        const float *qr = q + g.q_off(b, i, h, g.D), *kr = k + g.kv_off(b, j, hk, g.D);
        for (int64_t d = 0; d < g.D; ++d) v += double(qr[d]) * kr[d];
        v *= g.scale;
      }
      row[j] = v;
      m = std::max(m, v);
    }
    double l = 0;
    for (int64_t j = 0; j < g.Tk; ++j) l += row[j] = std::exp(row[j] - m);
    for (int64_t j = 0; j < g.Tk; ++j) row[j] /= l;
    lse[i] = m + std::log(l);
    if (drop)
      drop->row(g, b, h, i, 0, g.Tk, s.keep + i * g.Tk);
    else
      std::fill(s.keep + i * g.Tk, s.keep + (i + 1) * g.Tk, 1.f);
  }
}

Scratch scratch_of(const AttentionGeom& g, void* ws) {
  double* p = static_cast<double*>(ws);
  float* keep = reinterpret_cast<float*>(p + 2 * g.Tq * g.Tk + g.Tq);  // after ds and lse
  return {p, keep, reinterpret_cast<bool*>(keep + g.Tq * g.Tk)};
}
size_t scratch_bytes(const AttentionGeom& g) {
  return size_t(g.Tq * g.Tk) * (2 * sizeof(double) + sizeof(float) + sizeof(bool)) +
         size_t(g.Tq) * sizeof(double);
}

void forward(const AttentionGeom& g, const Node& n, const KernelArgs& a) {
  const float* v = a.in(2).data<float>();
  float *y = out_f(a, 0), *lse = out_f(a, 1);
  float* w = a.num_outputs > 2 ? out_f(a, 2) : nullptr;
  Scratch s = scratch_of(g, a.workspace);
  double* l = s.p + 2 * g.Tq * g.Tk;
  std::optional<AttentionDropout> drop;
  if (g.dropout > 0) drop.emplace(n, g, a.step);
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t h = 0; h < g.H; ++h) {
      weights(g, a, drop ? &*drop : nullptr, b, h, s, l);
      const int64_t hk = h / g.group();
      for (int64_t i = 0; i < g.Tq; ++i) {
        lse[(b * g.H + h) * g.Tq + i] = float(l[i]);
        for (int64_t e = 0; e < g.Dv; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < g.Tk; ++j)
            acc += s.p[i * g.Tk + j] * s.keep[i * g.Tk + j] * v[g.kv_off(b, j, hk, g.Dv) + e];
          y[g.q_off(b, i, h, g.Dv) + e] = float(acc);
        }
        if (w)
          for (int64_t j = 0; j < g.Tk; ++j)
            w[((b * g.H + h) * g.Tq + i) * g.Tk + j] = float(s.p[i * g.Tk + j]);
      }
    }
}

// ds (into s.p's second half) for one (b, h) from p, keep and dy.
void logit_grads(const AttentionGeom& g, const KernelArgs& a, int64_t b, int64_t h, Scratch s) {
  const float *dy = a.in(0).data<float>(), *v = a.in(3).data<float>();
  double* ds = s.p + g.Tq * g.Tk;
  const int64_t hk = h / g.group();
  for (int64_t i = 0; i < g.Tq; ++i) {
    double rs = 0;
    for (int64_t j = 0; j < g.Tk; ++j) {
      double dp = 0;
      for (int64_t e = 0; e < g.Dv; ++e)
        dp += double(dy[g.q_off(b, i, h, g.Dv) + e]) * v[g.kv_off(b, j, hk, g.Dv) + e];
      dp *= s.keep[i * g.Tk + j];
      ds[i * g.Tk + j] = dp;
      rs += s.p[i * g.Tk + j] * dp;
    }
    for (int64_t j = 0; j < g.Tk; ++j) {
      const int64_t ij = i * g.Tk + j;
      ds[ij] = s.live[ij] ? s.p[ij] * (ds[ij] - rs) : 0.0;
    }
  }
}

void backward(const AttentionGeom& g, const Node& n, const KernelArgs& a) {
  const float *dy = a.in(0).data<float>(), *q = a.in(1).data<float>(), *k = a.in(2).data<float>();
  float *dq = out_f(a, 0), *dk = out_f(a, 1), *dv = out_f(a, 2);
  std::fill(dk, dk + a.out(1).numel(), 0.f);
  std::fill(dv, dv + a.out(2).numel(), 0.f);
  Scratch s = scratch_of(g, a.workspace);
  double* ds = s.p + g.Tq * g.Tk;
  double* l = ds + g.Tq * g.Tk;  // lse scratch
  std::optional<AttentionDropout> drop;
  if (g.dropout > 0) drop.emplace(n, g, a.step);
  KernelArgs fa = a;
  fa.inputs = a.inputs + 1;  // (q, k, v[, mask]) as the forward sees them
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t h = 0; h < g.H; ++h) {
      weights(g, fa, drop ? &*drop : nullptr, b, h, s, l);
      logit_grads(g, a, b, h, s);
      const int64_t hk = h / g.group();
      for (int64_t i = 0; i < g.Tq; ++i) {
        for (int64_t d = 0; d < g.D; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < g.Tk; ++j)
            acc += ds[i * g.Tk + j] * k[g.kv_off(b, j, hk, g.D) + d];
          dq[g.q_off(b, i, h, g.D) + d] = float(acc * g.scale);
        }
        for (int64_t j = 0; j < g.Tk; ++j) {
          const double dsij = ds[i * g.Tk + j] * g.scale;
          const double pk = s.p[i * g.Tk + j] * s.keep[i * g.Tk + j];
          for (int64_t d = 0; d < g.D; ++d)
            dk[g.kv_off(b, j, hk, g.D) + d] += float(dsij * q[g.q_off(b, i, h, g.D) + d]);
          for (int64_t e = 0; e < g.Dv; ++e)
            dv[g.kv_off(b, j, hk, g.Dv) + e] += float(pk * dy[g.q_off(b, i, h, g.Dv) + e]);
        }
      }
    }
}

}  // namespace

LOCKSTEP_REGISTER(reference_attention_kernels) {
  auto& R = OpRegistry::get();
  R.add_kernel(op::scaled_dot_product_attention, "reference",
               [](const Node& n, const std::vector<TensorType>& in) {
                 const AttentionGeom g = ops::attention_geom(n, in, 0);
                 const Node* np = &n;
                 return make_kernel([g, np](const KernelArgs& a) { forward(g, *np, a); },
                                    scratch_bytes(g));
               });
  R.add_kernel(op::scaled_dot_product_attention_grad, "reference",
               [](const Node& n, const std::vector<TensorType>& in) {
                 std::vector<TensorType> fwd(in.begin() + 1, in.end() - 2);
                 const AttentionGeom g = ops::attention_geom(n, fwd, 0);
                 const Node* np = &n;
                 return make_kernel([g, np](const KernelArgs& a) { backward(g, *np, a); },
                                    scratch_bytes(g));
               });
}

}  // namespace lockstep
