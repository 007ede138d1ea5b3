// Lowerings of the transformer ops (src/ops/transformer_ops.cpp): batch_matmul as one
// dot_general with batch dims (operands broadcast to the output's batch dims first), rms_norm
// (+ grad) as reductions, rotary_embedding as cos/sin tables over (position, feature) broadcast
// onto x. random_categorical has none (sampling runs on the host backends).
#include <cmath>

#include "backends/xla/lowering.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep::xla {

namespace {

using Values = std::vector<HloValue>;

std::vector<int64_t> iota_axes(int64_t from, int64_t to) {
  std::vector<int64_t> v;
  for (int64_t i = from; i < to; ++i) v.push_back(i);
  return v;
}

// x [..., R, C] broadcast to batch + [R, C] (leading dims aligned from the right).
HloValue to_batch(LoweringContext& cx, const HloValue& x, const std::vector<int64_t>& batch) {
  std::vector<int64_t> dims = batch;
  dims.push_back(x.type.dims[size_t(x.type.rank() - 2)]);
  dims.push_back(x.type.dims.back());
  if (dims == x.type.dims) return x;
  const int64_t off = int64_t(dims.size()) - x.type.rank();
  return cx.b.broadcast_in_dim(x, dims, iota_axes(off, int64_t(dims.size())));
}

Values batch_matmul(LoweringContext& cx, const Node& n) {
  const bool ta = attr_b(n, "transpose_a"), tb = attr_b(n, "transpose_b");
  const Shape& y = n.outputs[0].shape;
  std::vector<int64_t> batch;
  for (int i = 0; i + 2 < y.rank(); ++i) batch.push_back(y[i]);
  const int64_t rb = int64_t(batch.size());
  HloValue a = to_batch(cx, cx.in(n, 0), batch), b = to_batch(cx, cx.in(n, 1), batch);
  const std::vector<int64_t> bd = iota_axes(0, rb);
  return {cx.b.dot_general(a, b, bd, bd, {ta ? rb : rb + 1}, {tb ? rb + 1 : rb})};
}

HloValue per_row(LoweringContext& cx, const HloValue& r, const HloValue& x) {
  return cx.b.broadcast_in_dim(r, x.type.dims, iota_axes(0, x.type.rank() - 1));
}
HloValue per_channel(LoweringContext& cx, const HloValue& s, const HloValue& x) {
  return cx.b.broadcast_in_dim(s, x.type.dims, {x.type.rank() - 1});
}

// rsqrt(mean(x^2, last) + eps), one per row.
HloValue rms_rstd(LoweringContext& cx, const HloValue& x, double eps) {
  const double C = double(x.type.dims.back());
  HloValue ms = cx.reduce_sum(cx.b.multiply(x, x), {x.type.rank() - 1});
  ms = cx.b.divide(ms, cx.full_like(ms, C));
  return cx.b.rsqrt(cx.b.add(ms, cx.full_like(ms, eps)));
}

Values rms_norm(LoweringContext& cx, const Node& n) {
  HloValue x = cx.in(n, 0);
  HloValue r = per_row(cx, rms_rstd(cx, x, attr_f(n, "epsilon")), x);
  return {cx.b.multiply(cx.b.multiply(x, r), per_channel(cx, cx.in(n, 1), x))};
}

// dx = r g - x r^3 sum(g x) / C with g = dy scale; dscale = sum over rows of dy x r.
Values rms_norm_grad(LoweringContext& cx, const Node& n) {
  HloValue dy = cx.in(n, 0), x = cx.in(n, 1);
  const double C = double(x.type.dims.back());
  HloValue r = per_row(cx, rms_rstd(cx, x, attr_f(n, "epsilon")), x);
  HloValue g = cx.b.multiply(dy, per_channel(cx, cx.in(n, 2), x));
  HloValue dot = per_row(cx, cx.reduce_sum(cx.b.multiply(g, x), {x.type.rank() - 1}), x);
  HloValue r3 = cx.b.multiply(cx.b.multiply(r, r), r);
  HloValue k = cx.b.divide(cx.b.multiply(r3, dot), cx.full_like(dot, C));
  HloValue dx = cx.b.subtract(cx.b.multiply(r, g), cx.b.multiply(x, k));
  HloValue ds =
      cx.reduce_sum(cx.b.multiply(cx.b.multiply(dy, x), r), iota_axes(0, x.type.rank() - 1));
  return {dx, ds};
}

// The angles [T, D] (feature d and d + D/2 share one), as the reference computes them.
HloValue rotary_angles(LoweringContext& cx, const Node& n, int64_t T, int64_t D) {
  const double maxw = attr_f(n, "max_wavelength"), scaling = attr_f(n, "scaling_factor");
  std::vector<double> inv(static_cast<size_t>(D));
  for (int64_t d = 0; d < D; ++d) {
    const float range = float(2 * (d % (D / 2))) / float(D);
    inv[size_t(d)] = double(1.0f / std::pow(float(maxw), range));
  }
  HloValue pos = cx.b.iota(HloType{ElemType::f32, {T}}, 0);
  HloValue start = cx.full_like(pos, double(attr_i(n, "start_index")));
  if (cx.num_inputs(n) == 2) {
    HloValue s = cx.b.reshape(cx.raw(n, 1), {});
    if (s.type.elem != ElemType::f32) s = cx.b.convert(s, ElemType::f32);
    start = cx.b.add(start, cx.b.broadcast_in_dim(s, {T}, {}));
  }
  pos = cx.b.add(pos, start);
  pos = cx.b.divide(pos, cx.full_like(pos, scaling));
  HloValue p2 = cx.b.broadcast_in_dim(pos, {T, D}, {0});
  HloValue f2 = cx.b.broadcast_in_dim(cx.b.constant(HloType{ElemType::f32, {D}}, inv), {T, D}, {1});
  return cx.b.multiply(p2, f2);
}

Values rotary_embedding(LoweringContext& cx, const Node& n) {
  HloValue x = cx.in(n, 0);
  const int r = x.type.rank();
  int64_t s = attr_i(n, "sequence_axis"), f = attr_i(n, "feature_axis");
  s = s < 0 ? s + r : s;
  f = f < 0 ? f + r : f;
  const int64_t T = x.type.dims[size_t(s)], D = x.type.dims[size_t(f)];
  HloValue th = rotary_angles(cx, n, T, D);
  HloValue c = cx.b.cosine(th);
  HloValue sn = cx.b.op("stablehlo.sine", {th}, {th.type})[0];
  if (attr_b(n, "inverse")) sn = cx.b.negate(sn);
  if (s > f) {  // tables as [D, T], so the broadcast's dims increase
    c = cx.b.transpose(c, {1, 0});
    sn = cx.b.transpose(sn, {1, 0});
  }
  const std::vector<int64_t> bd = s < f ? std::vector<int64_t>{s, f} : std::vector<int64_t>{f, s};
  c = cx.b.broadcast_in_dim(c, x.type.dims, bd);
  sn = cx.b.broadcast_in_dim(sn, x.type.dims, bd);
  std::vector<int64_t> lo(size_t(r), 0), mid = x.type.dims, hi = x.type.dims;
  mid[size_t(f)] = D / 2;
  std::vector<int64_t> lo2 = lo;
  lo2[size_t(f)] = D / 2;
  HloValue x1 = cx.b.slice(x, lo, mid), x2 = cx.b.slice(x, lo2, hi);
  HloValue rot = cx.b.concatenate({cx.b.negate(x2), x1}, f);
  return {cx.b.add(cx.b.multiply(x, c), cx.b.multiply(rot, sn))};
}

}  // namespace

LOCKSTEP_REGISTER(xla_transformer_lowerings) {
  register_lowering(op::batch_matmul, batch_matmul);
  register_lowering(op::rms_norm, rms_norm);
  register_lowering(op::rms_norm_grad, rms_norm_grad);
  register_lowering(op::rotary_embedding, rotary_embedding);
}

}  // namespace lockstep::xla
