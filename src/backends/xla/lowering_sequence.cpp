// Lowerings of the sequence ops (src/ops/sequence_ops.cpp): gather as stablehlo.gather and its
// gradient as stablehlo.scatter (add), one_hot as a compare with an iota, the comparisons and
// logical ops as compare/select giving uint8 0/1, where as select, reverse, and cumsum as a
// reduce_window over the axis.
//
// Out-of-range ids: StableHLO's gather clamps a start index into the table, which would read a
// wrong row silently. The lowering instead selects zeros for every id outside [0, V) (what
// TensorFlow's gather does on a GPU), and scatter skips such ids (StableHLO's rule), so the
// gradient of a zero row is none. The reference and cpu kernels refuse such an id with an error
// naming the layer; on xla, where ids live on the device, the result is the zero row
// (docs/backends.md, tests/ops/sequence_test.cpp: SequenceXla.OutOfRangeIdsGiveZeros).
#include <algorithm>

#include "backends/xla/lowering.h"
#include "lockstep/core/error.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep::xla {

namespace {

using Values = std::vector<HloValue>;

int64_t norm(int64_t axis, int rank) { return axis < 0 ? axis + rank : axis; }

// A table of rank r seen as [outer, rows, inner] around `axis`.
struct Around {
  int64_t outer = 1, rows = 1, inner = 1;
};
Around around(const std::vector<int64_t>& dims, int64_t axis) {
  Around a;
  for (int64_t i = 0; i < axis; ++i) a.outer *= dims[size_t(i)];
  a.rows = dims[size_t(axis)];
  for (size_t i = size_t(axis) + 1; i < dims.size(); ++i) a.inner *= dims[i];
  return a;
}

HloValue and_(StablehloBuilder& b, const HloValue& p, const HloValue& q) {
  return b.select(p, q, p);  // p ? q : false
}

// i1 [N]: 0 <= id < rows.
HloValue ids_valid(LoweringContext& cx, const HloValue& ids, int64_t rows) {
  HloValue lo = cx.full(ids.type.with_elem(ids.type.elem), 0.0);
  HloValue hi = cx.full(ids.type, double(rows));
  return and_(cx.b, cx.b.compare(ids, lo, Compare::GE), cx.b.compare(ids, hi, Compare::LT));
}

Values gather(LoweringContext& cx, const Node& n) {
  HloValue table = cx.in(n, 0), ids = cx.raw(n, 1);
  const int64_t axis = norm(attr_i(n, "axis"), table.type.rank());
  const Around a = around(table.type.dims, axis);
  const int64_t num = cx.in_type(n, 1).shape.numel();
  HloValue t3 = cx.b.reshape(table, {a.outer, a.rows, a.inner});
  HloValue flat = cx.b.reshape(ids, {num});
  HloValue idx = cx.b.reshape(flat, {num, 1});
  const HloType g{t3.type.elem, {a.outer, num, a.inner}};
  HloValue y = cx.b.op("stablehlo.gather", {t3, idx}, {g},
                       "dimension_numbers = #stablehlo.gather<offset_dims = [0, 2], "
                       "collapsed_slice_dims = [1], start_index_map = [1], index_vector_dim = 1>, "
                       "indices_are_sorted = false, slice_sizes = " +
                           i64_array({a.outer, 1, a.inner}))[0];
  HloValue ok = cx.b.broadcast_in_dim(ids_valid(cx, flat, a.rows), g.dims, {1});
  y = cx.b.select(ok, y, cx.full(g, 0.0));
  return {cx.b.reshape(y, n.outputs[0].shape.vec())};
}

Values gather_grad(LoweringContext& cx, const Node& n) {
  HloValue dy = cx.in(n, 0), ids = cx.raw(n, 1);
  const std::vector<int64_t> out = n.outputs[0].shape.vec();
  const Around a = around(out, attr_i(n, "axis"));
  const int64_t num = cx.in_type(n, 1).shape.numel();
  HloValue upd = cx.b.reshape(dy, {a.outer, num, a.inner});
  HloValue idx = cx.b.reshape(ids, {num, 1});
  HloValue zeros = cx.full({ElemType::f32, {a.outer, a.rows, a.inner}}, 0.0);
  HloValue r =
      cx.b.op_with_regions("stablehlo.scatter", {zeros, idx, upd}, {zeros.type},
                           {cx.b.reducer_region(ElemType::f32, Reducer::add)},
                           "scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = "
                           "[0, 2], inserted_window_dims = [1], scatter_dims_to_operand_dims = "
                           "[1], index_vector_dim = 1>, indices_are_sorted = false, "
                           "unique_indices = false")[0];
  return {cx.b.reshape(r, out)};
}

HloValue bool_to(LoweringContext& cx, const HloValue& p, ElemType t) {
  return cx.b.select(p, cx.full(p.type.with_elem(t), 1.0), cx.full(p.type.with_elem(t), 0.0));
}

HloValue truth(LoweringContext& cx, const HloValue& x) {  // nonzero -> i1
  return cx.b.compare(x, cx.full_like(x, 0.0), Compare::NE);
}

Values one_hot(LoweringContext& cx, const Node& n) {
  HloValue ids = cx.raw(n, 0);
  const std::vector<int64_t> dims = n.outputs[0].shape.vec();
  std::vector<int64_t> keep;
  for (int i = 0; i < ids.type.rank(); ++i) keep.push_back(i);
  HloValue wide = cx.b.broadcast_in_dim(ids, dims, keep);
  HloValue iota = cx.b.iota({ids.type.elem, dims}, int64_t(dims.size()) - 1);
  return {bool_to(cx, cx.b.compare(wide, iota, Compare::EQ), elem_of(n.outputs[0].dtype))};
}

void register_compare(OpId id, Compare c) {
  register_lowering(id, [c](LoweringContext& cx, const Node& n) {
    auto [a, b] = cx.broadcast_pair(cx.in(n, 0), cx.in(n, 1));
    return Values{bool_to(cx, cx.b.compare(a, b, c), ElemType::u8)};
  });
}

Values logical(LoweringContext& cx, const Node& n) {
  if (n.op == op::logical_not)
    return {bool_to(cx, cx.b.compare(cx.raw(n, 0), cx.full_like(cx.raw(n, 0), 0.0), Compare::EQ),
                    ElemType::u8)};
  auto [a, b] = cx.broadcast_pair(cx.raw(n, 0), cx.raw(n, 1));
  HloValue p = truth(cx, a), q = truth(cx, b);
  HloValue r = n.op == op::logical_and ? and_(cx.b, p, q) : cx.b.select(p, p, q);
  return {bool_to(cx, r, ElemType::u8)};
}

Values where(LoweringContext& cx, const Node& n) {
  const std::vector<int64_t> dims = n.outputs[0].shape.vec();
  HloValue c = truth(cx, cx.broadcast_numpy(cx.raw(n, 0), dims));
  return {
      cx.b.select(c, cx.broadcast_numpy(cx.in(n, 1), dims), cx.broadcast_numpy(cx.in(n, 2), dims))};
}

Values reverse(LoweringContext& cx, const Node& n) {
  HloValue x = cx.raw(n, 0);
  std::vector<int64_t> axes;
  for (int64_t a : attr_ints(n, "axes")) axes.push_back(norm(a, x.type.rank()));
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return {cx.b.reverse(x, axes)};
}

// Inclusive forward cumsum: a window of the axis's length, padded before by length - 1; reverse
// flips around it; exclusive subtracts x.
Values cumsum(LoweringContext& cx, const Node& n) {
  HloValue x = cx.in(n, 0);
  const int r = x.type.rank();
  const int64_t axis = norm(attr_i(n, "axis"), r), len = x.type.dims[size_t(axis)];
  const bool rev = attr_b(n, "reverse");
  HloValue v = rev ? cx.b.reverse(x, {axis}) : x;
  Window w{std::vector<int64_t>(size_t(r), 1),
           {},
           std::vector<std::pair<int64_t, int64_t>>(size_t(r), {0, 0})};
  w.dims[size_t(axis)] = len;
  w.padding[size_t(axis)] = {len - 1, 0};
  HloValue s = cx.b.reduce_window(v, cx.b.scalar(v.type.elem, 0.0), w, Reducer::add);
  if (attr_b(n, "exclusive")) s = cx.b.subtract(s, v);
  return {rev ? cx.b.reverse(s, {axis}) : s};
}

}  // namespace

LOCKSTEP_REGISTER(xla_sequence_lowerings) {
  register_lowering(op::gather, gather);
  register_lowering(op::gather_grad, gather_grad);
  register_lowering(op::one_hot, one_hot);
  register_compare(op::equal, Compare::EQ);
  register_compare(op::not_equal, Compare::NE);
  register_compare(op::less, Compare::LT);
  register_compare(op::less_equal, Compare::LE);
  register_compare(op::greater, Compare::GT);
  register_compare(op::greater_equal, Compare::GE);
  for (OpId id : {op::logical_and, op::logical_or, op::logical_not}) register_lowering(id, logical);
  register_lowering(op::where, where);
  register_lowering(op::reverse, reverse);
  register_lowering(op::cumsum, cumsum);
}

}  // namespace lockstep::xla
