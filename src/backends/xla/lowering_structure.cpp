// Lowerings of the structural ops: constants, views, casts, copies (concat, slice) and the
// variable writes. (input and variable nodes are lower_graph's arguments.)
#include "backends/xla/lowering.h"
#include "lockstep/core/error.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep::xla {

namespace {

using Values = std::vector<HloValue>;

Values constant(LoweringContext& cx, const Node& n) {
  return {cx.full({ElemType::f32, attr_ints(n, "shape")}, attr_f(n, "value"))};
}

Values fill_like(LoweringContext& cx, const Node& n, double v) {
  return {cx.full({ElemType::f32, cx.in_type(n, 0).shape.vec()}, v)};
}

// The sum of x over every replica (synchronized batch norm's statistics, and their gradient):
// one all_reduce inside the program. Replicas hold equal shares of the batch here, so the
// gradient form's sample weighting (src/distribute/strategy_ops.cpp) leaves a plain sum too.
Values cross_replica_sum(LoweringContext& cx, const Node& n) {
  HloValue x = cx.in(n, 0);
  if (cx.num_replicas <= 1) return {x};
  std::vector<int64_t> all;
  for (int r = 0; r < cx.num_replicas; ++r) all.push_back(r);
  return {cx.b.all_reduce(x, {all}, Reducer::add)};
}

Values reshape(LoweringContext& cx, const Node& n) {
  return {cx.b.reshape(cx.raw(n, 0), n.outputs[0].shape.vec())};
}

// Float -> integer truncates toward zero (stablehlo.convert), as the reference's C++ cast.
Values cast(LoweringContext& cx, const Node& n) {
  return {cx.b.convert(cx.raw(n, 0), elem_of(n.outputs[0].dtype))};
}

Values concat(LoweringContext& cx, const Node& n) {
  Values xs;
  for (int i = 0; i < cx.num_inputs(n); ++i) xs.push_back(cx.raw(n, i));
  int64_t axis = attr_i(n, "axis");
  if (axis < 0) axis += xs[0].type.rank();
  return {cx.b.concatenate(xs, axis)};
}

// begin and the resolved extents (size -1 = to the end) of a slice node on shape x.
void slice_bounds(const Node& n, const std::vector<int64_t>& x, std::vector<int64_t>& start,
                  std::vector<int64_t>& limit) {
  start = attr_ints(n, "begin");
  const auto& size = attr_ints(n, "size");
  limit.clear();
  for (size_t i = 0; i < x.size(); ++i) limit.push_back(size[i] < 0 ? x[i] : start[i] + size[i]);
}

Values slice(LoweringContext& cx, const Node& n) {
  HloValue x = cx.raw(n, 0);
  std::vector<int64_t> start, limit;
  slice_bounds(n, x.type.dims, start, limit);
  return {cx.b.slice(x, start, limit)};
}

// Zeros of x's shape with dy at the slice: dy padded.
Values slice_grad(LoweringContext& cx, const Node& n) {
  HloValue dy = cx.in(n, 0);
  const std::vector<int64_t> x = cx.in_type(n, 1).shape.vec();
  std::vector<int64_t> start, limit, high;
  slice_bounds(n, x, start, limit);
  for (size_t i = 0; i < x.size(); ++i) high.push_back(x[i] - limit[i]);
  return {cx.b.pad(dy, cx.b.scalar(dy.type.elem, 0.0), start, high)};
}

Values pad(LoweringContext& cx, const Node& n) {
  HloValue x = cx.raw(n, 0);
  return {
      cx.b.pad(x, cx.b.scalar(x.type.elem, 0.0), attr_ints(n, "before"), attr_ints(n, "after"))};
}

Values broadcast_to(LoweringContext& cx, const Node& n) {
  return {cx.broadcast_numpy(cx.raw(n, 0), attr_ints(n, "shape"))};
}

// A write to a variable by every replica (assign's value, assign_add's increment) as its
// `aggregation` attr combines them (the attr's doc: src/ops/source_ops.cpp): "sum" adds the
// replicas' values, "mean" averages them, "same" keeps each replica's own (they are equal).
// One replica: the value as it is.
HloValue across_replicas(LoweringContext& cx, const Node& n, const HloValue& value) {
  if (cx.num_replicas <= 1) return value;
  const std::string how = n.attrs.has("aggregation") ? attr_s(n, "aggregation") : "";
  LS_CHECK(how == "sum" || how == "mean" || how == "same", "xla: ", n.op, " node '", n.name,
           "' writes a variable in a program of ", cx.num_replicas,
           " replicas but does not say how their writes combine (attr aggregation is '", how,
           "'): set it to \"sum\" (a total: each replica adds its share), \"mean\" or \"same\" "
           "(every replica writes the same value)");
  if (how == "same") return value;
  std::vector<int64_t> all;
  for (int r = 0; r < cx.num_replicas; ++r) all.push_back(r);
  HloValue sum = cx.b.all_reduce(value, {all}, Reducer::add);
  return how == "sum" ? sum : cx.b.multiply(sum, cx.full_like(sum, 1.0 / cx.num_replicas));
}

// The host's all-reduce of a gradient bucket, unpacked: the xla backend runs a step with host
// collectives (a multi-worker strategy) as two executables around them, and this program's
// argument in place of the all_reduce_start is the bucket the host reduced (xla_backend.cpp).
Values all_reduce_wait(LoweringContext& cx, const Node& n) {
  const HloValue packed = cx.in(n, 0);
  Values out;
  int64_t at = 0;
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    const std::vector<int64_t> dims = n.outputs[k].shape.vec();
    const int64_t m = n.outputs[k].shape.numel();
    out.push_back(cx.b.reshape(cx.b.slice(packed, {at}, {at + m}), dims));
    at += m;
  }
  return out;
}

Values assign(LoweringContext& cx, const Node& n) {
  HloValue value = cx.raw(n, 1);
  if (cx.num_replicas > 1) {  // (combined in f32, as the update ops are)
    const ElemType elem = value.type.elem;
    value = across_replicas(cx, n, cx.in(n, 1));
    if (value.type.elem != elem) value = cx.b.convert(value, elem);
  }
  cx.update_variable(n, 0, value);
  return {};
}

Values assign_add(LoweringContext& cx, const Node& n) {
  HloValue var = cx.variable_value(n, 0);
  HloValue delta = cx.b.reshape(across_replicas(cx, n, cx.in(n, 1)), var.type.dims);
  cx.update_variable(n, 0, cx.b.add(var, delta));
  return {};
}

}  // namespace

LOCKSTEP_REGISTER(xla_structure_lowerings) {
  register_lowering(op::constant, constant);
  register_lowering(op::ones_like,
                    [](LoweringContext& cx, const Node& n) { return fill_like(cx, n, 1.0); });
  register_lowering(op::zeros_like,
                    [](LoweringContext& cx, const Node& n) { return fill_like(cx, n, 0.0); });
  for (OpId id : {op::identity, op::stop_gradient})
    register_lowering(id, [](LoweringContext& cx, const Node& n) { return Values{cx.raw(n, 0)}; });
  register_lowering(op::cross_replica_sum, cross_replica_sum);
  register_lowering(op::all_reduce_wait, all_reduce_wait);
  register_lowering(op::reshape, reshape);
  register_lowering(op::cast, cast);
  register_lowering(op::concat, concat);
  register_lowering(op::slice, slice);
  register_lowering(op::slice_grad, slice_grad);
  register_lowering(op::pad, pad);
  register_lowering(op::broadcast_to, broadcast_to);
  register_lowering(op::assign, assign);
  register_lowering(op::assign_add, assign_add);
}

}  // namespace lockstep::xla
