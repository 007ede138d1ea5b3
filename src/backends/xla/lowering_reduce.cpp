// Lowerings of the reductions, bias_add and softmax / log_softmax (and their gradients).
#include "backends/xla/lowering.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep::xla {

namespace {

using Values = std::vector<HloValue>;

// The reduced value of node n (reduce_sum/mean/max) with keepdims applied.
HloValue keep_dims(LoweringContext& cx, const Node& n, const HloValue& r,
                   const std::vector<int64_t>& x, const std::vector<int64_t>& axes) {
  if (!attr_b(n, "keepdims")) return r;
  std::vector<int64_t> dims = x;
  for (int64_t a : axes) dims[size_t(a)] = 1;
  return cx.b.reshape(r, dims);
}

double count_of(const std::vector<int64_t>& x, const std::vector<int64_t>& axes) {
  double c = 1;
  for (int64_t a : axes) c *= double(x[size_t(a)]);
  return c;
}

Values reduce_sum_mean(LoweringContext& cx, const Node& n, bool mean) {
  HloValue x = cx.in(n, 0);
  const auto axes = node_axes(n, x.type.rank());
  HloValue r = cx.reduce_sum(x, axes);
  if (mean) r = cx.b.divide(r, cx.full_like(r, count_of(x.type.dims, axes)));
  return {keep_dims(cx, n, r, x.type.dims, axes)};
}

// dy (reduced shape, with or without kept dims) broadcast back over the reduced axes.
Values reduce_sum_mean_grad(LoweringContext& cx, const Node& n, bool mean) {
  const std::vector<int64_t> x = cx.in_type(n, 1).shape.vec();
  const auto axes = node_axes(n, int(x.size()));
  HloValue dy = cx.in(n, 0);
  std::vector<int64_t> dropped;
  for (size_t i = 0; i < x.size(); ++i)
    if (std::find(axes.begin(), axes.end(), int64_t(i)) == axes.end()) dropped.push_back(x[i]);
  HloValue dx = cx.expand_back(cx.b.reshape(dy, dropped), x, axes);
  if (mean) dx = cx.b.multiply(dx, cx.full_like(dx, 1.0 / count_of(x, axes)));
  return {dx};
}

Values reduce_max(LoweringContext& cx, const Node& n) {
  HloValue x = cx.in(n, 0);
  const auto axes = node_axes(n, x.type.rank());
  return {keep_dims(cx, n, cx.reduce_max(x, axes), x.type.dims, axes)};
}

// (dy, x, y): dy to the maxima, split evenly between ties.
Values reduce_max_grad(LoweringContext& cx, const Node& n) {
  HloValue x = cx.in(n, 1);
  const auto axes = node_axes(n, x.type.rank());
  std::vector<int64_t> dropped;
  for (int i = 0; i < x.type.rank(); ++i)
    if (std::find(axes.begin(), axes.end(), int64_t(i)) == axes.end())
      dropped.push_back(x.type.dims[size_t(i)]);
  HloValue y = cx.expand_back(cx.b.reshape(cx.in(n, 2), dropped), x.type.dims, axes);
  HloValue dy = cx.expand_back(cx.b.reshape(cx.in(n, 0), dropped), x.type.dims, axes);
  HloValue hit = cx.b.compare(x, y, Compare::EQ);
  HloValue ones = cx.b.convert(hit, ElemType::f32);
  HloValue count = cx.expand_back(cx.reduce_sum(ones, axes), x.type.dims, axes);
  return {cx.b.select(hit, cx.b.divide(dy, count), cx.full_like(dy, 0.0))};
}

Values bias_add(LoweringContext& cx, const Node& n) {
  HloValue x = cx.in(n, 0);
  return {cx.b.add(x, cx.broadcast_numpy(cx.in(n, 1), x.type.dims))};
}

int softmax_axis(const Node& n, int rank) {
  int64_t a = attr_i(n, "axis");
  return int(a < 0 ? a + rank : a);
}

// exp(x - max) and its sum along the axis (kept dims broadcast back).
std::pair<HloValue, HloValue> exp_and_sum(LoweringContext& cx, const HloValue& x, int axis) {
  const std::vector<int64_t> ax = {axis};
  HloValue m = cx.expand_back(cx.reduce_max(x, ax), x.type.dims, ax);
  HloValue e = cx.b.exponential(cx.b.subtract(x, m));
  return {e, cx.expand_back(cx.reduce_sum(e, ax), x.type.dims, ax)};
}

Values softmax(LoweringContext& cx, const Node& n) {
  HloValue x = cx.in(n, 0);
  auto [e, s] = exp_and_sum(cx, x, softmax_axis(n, x.type.rank()));
  return {cx.b.multiply(e, cx.b.divide(cx.full_like(s, 1.0), s))};
}

Values log_softmax(LoweringContext& cx, const Node& n) {  // x - (m + log(sum(exp(x - m))))
  HloValue x = cx.in(n, 0);
  const std::vector<int64_t> ax = {softmax_axis(n, x.type.rank())};
  HloValue m = cx.expand_back(cx.reduce_max(x, ax), x.type.dims, ax);
  HloValue s = cx.reduce_sum(cx.b.exponential(cx.b.subtract(x, m)), ax);
  HloValue lse = cx.b.add(m, cx.expand_back(cx.b.log(s), x.type.dims, ax));
  return {cx.b.subtract(x, lse)};
}

Values softmax_grad(LoweringContext& cx, const Node& n) {  // y * (dy - sum(dy * y))
  HloValue dy = cx.in(n, 0), y = cx.in(n, 1);
  const std::vector<int64_t> ax = {softmax_axis(n, y.type.rank())};
  HloValue dot = cx.expand_back(cx.reduce_sum(cx.b.multiply(dy, y), ax), y.type.dims, ax);
  return {cx.b.multiply(y, cx.b.subtract(dy, dot))};
}

Values log_softmax_grad(LoweringContext& cx, const Node& n) {  // dy - exp(y) * sum(dy)
  HloValue dy = cx.in(n, 0), y = cx.in(n, 1);
  const std::vector<int64_t> ax = {softmax_axis(n, y.type.rank())};
  HloValue s = cx.expand_back(cx.reduce_sum(dy, ax), y.type.dims, ax);
  return {cx.b.subtract(dy, cx.b.multiply(cx.b.exponential(y), s))};
}

}  // namespace

LOCKSTEP_REGISTER(xla_reduce_lowerings) {
  register_lowering(op::reduce_sum, [](LoweringContext& cx, const Node& n) {
    return reduce_sum_mean(cx, n, false);
  });
  register_lowering(op::reduce_mean, [](LoweringContext& cx, const Node& n) {
    return reduce_sum_mean(cx, n, true);
  });
  register_lowering(op::reduce_sum_grad, [](LoweringContext& cx, const Node& n) {
    return reduce_sum_mean_grad(cx, n, false);
  });
  register_lowering(op::reduce_mean_grad, [](LoweringContext& cx, const Node& n) {
    return reduce_sum_mean_grad(cx, n, true);
  });
  register_lowering(op::reduce_max, reduce_max);
  register_lowering(op::reduce_max_grad, reduce_max_grad);
  register_lowering(op::bias_add, bias_add);
  register_lowering(op::softmax, softmax);
  register_lowering(op::log_softmax, log_softmax);
  register_lowering(op::softmax_grad, softmax_grad);
  register_lowering(op::log_softmax_grad, log_softmax_grad);
}

}  // namespace lockstep::xla
