// Lowerings of the losses and metrics: per-example values over the last (class) axis, with
// the formulas of src/ops/internal/kernel_math.h (label smoothing as Keras: targets become
// onehot * (1 - ls) + ls / C). Sparse labels are int32 or float32 holding integers (floored),
// shaped like the leading dims or with a trailing 1. Unlike the reference kernel, a compiled
// program cannot stop on a label outside [0, C): such a row's onehot is all zeros.
#include <limits>

#include "backends/xla/lowering.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep::xla {

namespace {

using Values = std::vector<HloValue>;

// Labels as i32 of the leading shape.
HloValue labels_i32(LoweringContext& cx, const Node& n, int i, const std::vector<int64_t>& lead) {
  HloValue l = cx.raw(n, i);
  if (is_float(l.type.elem)) l = cx.b.floor(cx.b.convert(l, ElemType::f32));
  return cx.b.reshape(cx.b.convert(l, ElemType::i32), lead);
}

std::vector<int64_t> leading(const std::vector<int64_t>& dims) {
  return {dims.begin(), dims.end() - 1};
}

// onehot(labels) as f32 of `dims` ([..., C]).
HloValue onehot(LoweringContext& cx, const HloValue& labels, const std::vector<int64_t>& dims) {
  const int last = int(dims.size()) - 1;
  HloValue classes = cx.b.iota({ElemType::i32, dims}, last);
  HloValue lab = cx.b.broadcast_in_dim(labels, dims, all_axes(last));
  return cx.b.convert(cx.b.compare(classes, lab, Compare::EQ), ElemType::f32);
}

// logsumexp over the last axis, the axis dropped.
HloValue logsumexp(LoweringContext& cx, const HloValue& z) {
  const std::vector<int64_t> ax = {int64_t(z.type.rank() - 1)};
  HloValue m = cx.reduce_max(z, ax);
  HloValue e = cx.b.exponential(cx.b.subtract(z, cx.expand_back(m, z.type.dims, ax)));
  return cx.b.add(m, cx.b.log(cx.reduce_sum(e, ax)));
}

HloValue last_sum(LoweringContext& cx, const HloValue& x) {
  return cx.reduce_sum(x, {int64_t(x.type.rank() - 1)});
}

HloValue back(LoweringContext& cx, const HloValue& row, const std::vector<int64_t>& dims) {
  return cx.expand_back(row, dims, {int64_t(dims.size() - 1)});
}

HloValue scalar_times(LoweringContext& cx, double s, const HloValue& x) {
  return cx.b.multiply(cx.full_like(x, s), x);
}

// lse - (1 - ls) z[label] - (ls / C) sum(z)
Values sparse_xent(LoweringContext& cx, const Node& n) {
  HloValue z = cx.in(n, 0);
  const double ls = attr_f(n, "label_smoothing"), C = double(z.type.dims.back());
  HloValue oh = onehot(cx, labels_i32(cx, n, 1, leading(z.type.dims)), z.type.dims);
  HloValue picked = last_sum(cx, cx.b.multiply(oh, z));
  HloValue loss = cx.b.subtract(logsumexp(cx, z), scalar_times(cx, 1.0 - ls, picked));
  return {cx.b.subtract(loss, scalar_times(cx, ls / C, last_sum(cx, z)))};
}

// (dy, z, labels): dy * (softmax(z) - ls / C) - dy * (1 - ls) onehot
Values sparse_xent_grad(LoweringContext& cx, const Node& n) {
  HloValue z = cx.in(n, 1);
  const double ls = attr_f(n, "label_smoothing"), C = double(z.type.dims.back());
  HloValue dy = back(cx, cx.b.reshape(cx.in(n, 0), leading(z.type.dims)), z.type.dims);
  HloValue p = cx.b.exponential(cx.b.subtract(z, back(cx, logsumexp(cx, z), z.type.dims)));
  HloValue oh = onehot(cx, labels_i32(cx, n, 2, leading(z.type.dims)), z.type.dims);
  HloValue g = cx.b.multiply(dy, cx.b.subtract(p, cx.full_like(p, ls / C)));
  return {cx.b.subtract(g, cx.b.multiply(scalar_times(cx, 1.0 - ls, dy), oh))};
}

// Smoothed targets t (1 - ls) + ls / C.
HloValue smoothed(LoweringContext& cx, const HloValue& t, double ls) {
  const double C = double(t.type.dims.back());
  return cx.b.add(scalar_times(cx, 1.0 - ls, t), cx.full_like(t, ls / C));
}

Values xent(LoweringContext& cx, const Node& n) {  // sum(ts * (lse - z))
  HloValue z = cx.in(n, 0);
  HloValue ts = smoothed(cx, cx.in(n, 1), attr_f(n, "label_smoothing"));
  HloValue lse = back(cx, logsumexp(cx, z), z.type.dims);
  return {last_sum(cx, cx.b.multiply(ts, cx.b.subtract(lse, z)))};
}

// (dy, z, t) -> (dy (e^(z - lse) sum(ts) - ts), dy (1 - ls) (lse - z))
Values xent_grad(LoweringContext& cx, const Node& n) {
  HloValue z = cx.in(n, 1);
  const double ls = attr_f(n, "label_smoothing");
  HloValue ts = smoothed(cx, cx.in(n, 2), ls);
  HloValue dy = back(cx, cx.b.reshape(cx.in(n, 0), leading(z.type.dims)), z.type.dims);
  HloValue lse = back(cx, logsumexp(cx, z), z.type.dims);
  HloValue p = cx.b.exponential(cx.b.subtract(z, lse));
  HloValue dz = cx.b.multiply(
      dy, cx.b.subtract(cx.b.multiply(p, back(cx, last_sum(cx, ts), z.type.dims)), ts));
  HloValue dt = cx.b.multiply(scalar_times(cx, 1.0 - ls, dy), cx.b.subtract(lse, z));
  return {dz, dt};
}

Values sigmoid_xent(LoweringContext& cx, const Node& n) {  // max(z, 0) - z t + log1p(e^-|z|)
  HloValue z = cx.in(n, 0), t = cx.in(n, 1), zero = cx.full_like(z, 0.0);
  HloValue relu = cx.b.select(cx.b.compare(z, zero, Compare::GT), z, zero);
  HloValue l = cx.b.log_plus_one(cx.b.exponential(cx.b.negate(cx.b.abs(z))));
  return {cx.b.add(cx.b.subtract(relu, cx.b.multiply(z, t)), l)};
}

Values sigmoid_xent_grad(LoweringContext& cx, const Node& n) {
  HloValue dy = cx.in(n, 0), z = cx.in(n, 1), t = cx.in(n, 2);
  return {cx.b.multiply(dy, cx.b.subtract(cx.b.logistic(z), t)), cx.b.negate(cx.b.multiply(dy, z))};
}

// The first index of the maximum along the last axis, i32 of the leading shape.
HloValue argmax(LoweringContext& cx, const HloValue& p) {
  const int last = p.type.rank() - 1;
  const std::vector<int64_t> ax = {last};
  HloValue m = cx.expand_back(cx.reduce_max(p, ax), p.type.dims, ax);
  HloValue idx = cx.b.iota({ElemType::i32, p.type.dims}, last);
  HloValue big = cx.full(idx.type, double(p.type.dims.back()));
  HloValue at_max = cx.b.select(cx.b.compare(p, m, Compare::EQ), idx, big);
  return cx.b.reduce(at_max,
                     cx.b.scalar(ElemType::i32, double(std::numeric_limits<int32_t>::max())), ax,
                     Reducer::min);
}

HloValue as_f32(LoweringContext& cx, const HloValue& pred) {
  return cx.b.convert(pred, ElemType::f32);
}

Values sparse_accuracy(LoweringContext& cx, const Node& n) {
  HloValue p = cx.in(n, 0);
  HloValue lab = labels_i32(cx, n, 1, leading(p.type.dims));
  return {as_f32(cx, cx.b.compare(argmax(cx, p), lab, Compare::EQ))};
}

Values categorical_accuracy(LoweringContext& cx, const Node& n) {
  return {as_f32(cx, cx.b.compare(argmax(cx, cx.in(n, 0)), argmax(cx, cx.in(n, 1)), Compare::EQ))};
}

Values binary_accuracy(LoweringContext& cx, const Node& n) {  // t == (p > threshold)
  HloValue p = cx.in(n, 0), t = cx.in(n, 1);
  HloValue hit = as_f32(cx, cx.b.compare(p, cx.full_like(p, attr_f(n, "threshold")), Compare::GT));
  return {as_f32(cx, cx.b.compare(t, hit, Compare::EQ))};
}

// Fewer than k classes score strictly higher than the label's; a label outside [0, C) misses.
Values in_top_k(LoweringContext& cx, const Node& n) {
  HloValue p = cx.in(n, 0);
  const auto lead = leading(p.type.dims);
  HloValue lab = labels_i32(cx, n, 1, lead);
  HloValue oh = onehot(cx, lab, p.type.dims);
  HloValue score = back(cx, last_sum(cx, cx.b.multiply(oh, p)), p.type.dims);
  HloValue higher = last_sum(cx, as_f32(cx, cx.b.compare(p, score, Compare::GT)));
  HloValue hit = cx.b.compare(higher, cx.full_like(higher, double(attr_i(n, "k"))), Compare::LT);
  HloValue valid = cx.b.compare(last_sum(cx, oh), cx.full_like(higher, 1.0), Compare::EQ);
  return {cx.b.select(valid, as_f32(cx, hit), cx.full_like(higher, 0.0))};
}

}  // namespace

LOCKSTEP_REGISTER(xla_loss_lowerings) {
  register_lowering(op::sparse_softmax_cross_entropy, sparse_xent);
  register_lowering(op::sparse_softmax_cross_entropy_grad, sparse_xent_grad);
  register_lowering(op::softmax_cross_entropy, xent);
  register_lowering(op::softmax_cross_entropy_grad, xent_grad);
  register_lowering(op::sigmoid_cross_entropy, sigmoid_xent);
  register_lowering(op::sigmoid_cross_entropy_grad, sigmoid_xent_grad);
  register_lowering(op::sparse_categorical_accuracy, sparse_accuracy);
  register_lowering(op::categorical_accuracy, categorical_accuracy);
  register_lowering(op::binary_accuracy, binary_accuracy);
  register_lowering(op::in_top_k, in_top_k);
}

}  // namespace lockstep::xla
