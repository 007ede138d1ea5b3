// The lowering of scaled_dot_product_attention (+ gradient): the plain formula as dot_general +
// a masked softmax over (B, H, Tq, Tk), which XLA fuses (it keeps the weights, as XLA decides).
// Grouped-query heads: q's H = Hkv x G heads are viewed as (Hkv, G), so each dot_general batches
// over (B, Hkv). Dropout draws the reference kernel's Philox words (counter = element / 4 over
// (B, H, Tq, Tk)), by dropout's lowering; like it, only the default keying (not op determinism's
// keying by row).
#include "backends/xla/lowering.h"
#include "lockstep/graph/op_registry.h"
#include "ops/internal/attention.h"

namespace lockstep::xla {

// lowering_random.cpp: the unit floats of Philox(key, (step, i / 4)) word i % 4, f32 [n].
HloValue philox_unit_floats(LoweringContext& cx, int64_t n, uint64_t key, const HloValue& step);

namespace {

using Values = std::vector<HloValue>;
using ops::AttentionGeom;

// The weights p (B, H, Tq, Tk), the live flags (i1) and lse (B, H, Tq) from q, k and the mask.
struct Weights {
  HloValue p, live, lse;
};

AttentionGeom geom(LoweringContext& cx, const Node& n, int first) {
  // (q, k, v[, mask]) from input `first`: the gradient's also has dy before and y, lse after.
  const int count = cx.num_inputs(n) - (first ? 3 : 0);
  std::vector<TensorType> in;
  for (int i = first; i < first + count; ++i) in.push_back(cx.in_type(n, i));
  return ops::attention_geom(n, in, 0);
}

HloValue live_flags(LoweringContext& cx, const AttentionGeom& g, const Node& n, int mask_in) {
  const std::vector<int64_t> full{g.B, g.H, g.Tq, g.Tk};
  HloValue live = cx.b.compare(cx.full({ElemType::f32, full}, 0.0),
                               cx.full({ElemType::f32, full}, 0.0), Compare::EQ);  // all true
  if (g.causal) {
    HloValue i = cx.b.iota({ElemType::i32, full}, 2), j = cx.b.iota({ElemType::i32, full}, 3);
    live = cx.b.compare(j, i, Compare::LE);
  }
  if (g.masked) {
    HloValue m = cx.in(n, mask_in);
    HloValue keep = cx.broadcast_numpy(cx.b.compare(m, cx.full_like(m, 0.0), Compare::NE), full);
    live = cx.b.select(keep, live, keep);  // live and keep
  }
  return live;
}

Weights weights(LoweringContext& cx, const AttentionGeom& g, const Node& n, int first) {
  const int64_t G = g.group();
  HloValue q = cx.b.reshape(cx.in(n, first), {g.B, g.Tq, g.Hkv, G, g.D});
  HloValue s = cx.b.dot_general(q, cx.in(n, first + 1), {0, 2}, {0, 2}, {4}, {3});
  s = cx.b.reshape(cx.b.transpose(s, {0, 1, 3, 2, 4}), {g.B, g.H, g.Tq, g.Tk});
  s = cx.b.multiply(s, cx.full_like(s, g.scale));
  Weights w;
  w.live = live_flags(cx, g, n, first + 3);
  s = cx.b.select(w.live, s, cx.full_like(s, double(ops::kAttentionMasked)));
  const std::vector<int64_t> ax{3}, full = s.type.dims;
  HloValue m = cx.reduce_max(s, ax);
  HloValue e = cx.b.exponential(cx.b.subtract(s, cx.expand_back(m, full, ax)));
  HloValue l = cx.reduce_sum(e, ax);
  w.p = cx.b.divide(e, cx.expand_back(l, full, ax));
  w.lse = cx.b.add(m, cx.b.log(l));
  return w;
}

// The dropout's keep factors (B, H, Tq, Tk), or an empty value without dropout.
HloValue keep_factors(LoweringContext& cx, const AttentionGeom& g, const Node& n) {
  if (g.dropout <= 0) return {};
  LS_CHECK(!cx.step.name.empty(), "attention dropout needs the program's step argument");
  StepInfo info;
  info.replica = cx.replica;
  info.seed = cx.seed;
  HloValue u = philox_unit_floats(cx, g.B * g.H * g.Tq * g.Tk, ops::attention_dropout_key(n, &info),
                                  cx.step);
  HloValue keep = cx.b.compare(u, cx.full_like(u, g.dropout), Compare::GE);
  HloValue f = cx.b.select(keep, cx.full_like(u, 1.0 / (1.0 - g.dropout)), cx.full_like(u, 0.0));
  return cx.b.reshape(f, {g.B, g.H, g.Tq, g.Tk});
}

// (B, H, Tq, Tk) x v or dy-like (B, T, Hkv, E) over the T axis -> (B, Tq, H, E).
HloValue weights_times(LoweringContext& cx, const AttentionGeom& g, const HloValue& p,
                       const HloValue& v) {
  const int64_t E = v.type.dims[3], G = g.group();
  HloValue p5 = cx.b.reshape(p, {g.B, g.Hkv, G, g.Tq, g.Tk});
  HloValue y = cx.b.dot_general(p5, v, {0, 1}, {0, 2}, {4}, {1});  // (B, Hkv, G, Tq, E)
  return cx.b.reshape(cx.b.transpose(y, {0, 3, 1, 2, 4}), {g.B, g.Tq, g.H, E});
}

Values sdpa(LoweringContext& cx, const Node& n) {
  const AttentionGeom g = geom(cx, n, 0);
  Weights w = weights(cx, g, n, 0);
  HloValue keep = keep_factors(cx, g, n);
  HloValue pd = g.dropout > 0 ? cx.b.multiply(w.p, keep) : w.p;
  Values out{weights_times(cx, g, pd, cx.in(n, 2)), w.lse};
  if (attr_b(n, "return_weights")) out.push_back(w.p);
  return out;
}

// (dy, q, k, v[, mask], y, lse) -> (dq, dk, dv), recomputing the weights.
Values sdpa_grad(LoweringContext& cx, const Node& n) {
  const AttentionGeom g = geom(cx, n, 1);
  const int64_t G = g.group();
  Weights w = weights(cx, g, n, 1);
  HloValue keep = keep_factors(cx, g, n);
  HloValue dy5 = cx.b.reshape(cx.in(n, 0), {g.B, g.Tq, g.Hkv, G, g.Dv});
  HloValue q5 = cx.b.reshape(cx.in(n, 1), {g.B, g.Tq, g.Hkv, G, g.D});
  HloValue dp = cx.b.dot_general(dy5, cx.in(n, 3), {0, 2}, {0, 2}, {4}, {3});  // B,Hkv,Tq,G,Tk
  dp = cx.b.reshape(cx.b.transpose(dp, {0, 1, 3, 2, 4}), {g.B, g.H, g.Tq, g.Tk});
  HloValue pd = w.p;
  if (g.dropout > 0) {
    dp = cx.b.multiply(dp, keep);
    pd = cx.b.multiply(w.p, keep);
  }
  const std::vector<int64_t> ax{3}, full{g.B, g.H, g.Tq, g.Tk};
  HloValue rs = cx.expand_back(cx.reduce_sum(cx.b.multiply(w.p, dp), ax), full, ax);
  HloValue ds = cx.b.multiply(w.p, cx.b.subtract(dp, rs));
  ds = cx.b.select(w.live, cx.b.multiply(ds, cx.full_like(ds, g.scale)), cx.full_like(ds, 0.0));
  HloValue dq = weights_times(cx, g, ds, cx.in(n, 2));
  HloValue ds5 = cx.b.reshape(ds, {g.B, g.Hkv, G, g.Tq, g.Tk});
  HloValue pd5 = cx.b.reshape(pd, {g.B, g.Hkv, G, g.Tq, g.Tk});
  HloValue dk = cx.b.dot_general(ds5, q5, {0, 1}, {0, 2}, {2, 3}, {3, 1});  // (B, Hkv, Tk, D)
  HloValue dv = cx.b.dot_general(pd5, dy5, {0, 1}, {0, 2}, {2, 3}, {3, 1});
  return {dq, cx.b.transpose(dk, {0, 2, 1, 3}), cx.b.transpose(dv, {0, 2, 1, 3})};
}

}  // namespace

LOCKSTEP_REGISTER(xla_attention_lowerings) {
  register_lowering(op::scaled_dot_product_attention, sdpa);
  register_lowering(op::scaled_dot_product_attention_grad, sdpa_grad);
}

}  // namespace lockstep::xla
