// Op-table cases for reductions, broadcast_to, bias_add, softmax, cast, concat, slice, pad,
// dropout.
#include "ops/op_harness.h"

namespace lockstep::testing {
namespace {

using I = std::vector<int64_t>;

OpInput in(Shape s, float lo = -1.f, float hi = 1.f) {
  return OpInput{.shape = s, .lo = lo, .hi = hi};
}
OpCase reduce(const std::string& op, const std::string& tag, Shape x, Attrs at) {
  return OpCase{.name = op + "_" + tag, .op = op, .attrs = at, .inputs = {in(x)}};
}
Attrs ax(I axes, bool keep = false) { return Attrs{{"axes", axes}, {"keepdims", keep}}; }

}  // namespace

LS_OP_CASES(reduce_ops) {
  std::vector<OpCase> c;
  for (std::string op : {"reduce_sum", "reduce_mean", "reduce_max"}) {
    c.push_back(reduce(op, "leading", {4, 3}, ax({0})));
    c.push_back(reduce(op, "leading2_keep", {2, 3, 4}, ax({0, 1}, true)));
    c.push_back(reduce(op, "trailing_keep", {4, 3}, ax({1}, true)));
    c.push_back(reduce(op, "trailing_neg", {2, 3, 4}, ax({-1})));
    c.push_back(reduce(op, "middle", {2, 3, 4}, ax({1})));
    c.push_back(reduce(op, "outer_two", {2, 3, 2, 2}, ax({0, 3})));
    c.push_back(reduce(op, "all_default", {3, 4}, {}));
    c.push_back(reduce(op, "all_keep", {2, 3, 2}, ax({0, 1, 2}, true)));
  }
  // Large: the chunked cpu paths (many columns, few columns, everything), and the parallel middle
  // one (global average pooling's axes).
  for (auto [tag, x, axes] : {std::tuple{"large_cols", Shape{300, 256}, I{0}},
                              std::tuple{"large_middle", Shape{16, 8, 8, 64}, I{1, 2}},
                              std::tuple{"large_fewcols", Shape{5000, 10}, I{0}},
                              std::tuple{"large_all", Shape{40000}, I{}},
                              std::tuple{"large_rows", Shape{2000, 30}, I{1}}})
    for (std::string op : {"reduce_sum", "reduce_mean"}) {
      OpCase k = reduce(op, tag, x, ax(axes));
      k.check_grad = false;
      c.push_back(k);
    }
  for (std::string op : {"reduce_sum_grad", "reduce_mean_grad"}) {
    c.push_back(OpCase{.name = op + "_leading",
                       .op = op,
                       .attrs = ax({0, 1}),
                       .inputs = {in({4}), in({2, 3, 4})},
                       .check_grad = false});
    c.push_back(OpCase{.name = op + "_trailing_keep",
                       .op = op,
                       .attrs = ax({1}, true),
                       .inputs = {in({3, 1}), in({3, 5})},
                       .check_grad = false});
    c.push_back(OpCase{.name = op + "_middle",
                       .op = op,
                       .attrs = ax({1}),
                       .inputs = {in({2, 4}), in({2, 3, 4})},
                       .check_grad = false});
    c.push_back(OpCase{.name = op + "_large_middle",
                       .op = op,
                       .attrs = ax({1, 2}),
                       .inputs = {in({16, 64}), in({16, 8, 8, 64})},
                       .check_grad = false});
  }
  c.push_back(OpCase{.name = "reduce_max_grad",
                     .op = "reduce_max_grad",
                     .inputs = {in({2}), in({2, 3})},
                     .check_grad = false,
                     .build = [](Graph& g, const std::vector<Value>& v) {
                       Attrs a = ax({1});
                       Value y = g.add(op::reduce_max, {v[1]}, a);
                       return g.add(op::reduce_max_grad, {v[0], v[1], y}, a);
                     }});
  c.push_back(OpCase{.name = "reduce_max_ties",
                     .op = "reduce_max",
                     .attrs = ax({1}),
                     .inputs = {OpInput{.shape = {2, 3}, .values = {1, 3, 3, 2, 2, 2}}},
                     .check_grad = false});
  return c;
}

LS_OP_CASES(broadcast_bias_softmax) {
  std::vector<OpCase> c;
  c.push_back(OpCase{.name = "broadcast_to_row",
                     .op = "broadcast_to",
                     .attrs = Attrs{{"shape", I{2, 3}}},
                     .inputs = {in({3})}});
  c.push_back(OpCase{.name = "broadcast_to_general",
                     .op = "broadcast_to",
                     .attrs = Attrs{{"shape", I{2, 2, 3}}},
                     .inputs = {in({2, 1})}});
  c.push_back(OpCase{.name = "bias_add_2d", .op = "bias_add", .inputs = {in({4, 3}), in({3})}});
  c.push_back(
      OpCase{.name = "bias_add_nhwc", .op = "bias_add", .inputs = {in({2, 3, 3, 4}), in({4})}});
  c.push_back(OpCase{.name = "bias_add_rank1", .op = "bias_add", .inputs = {in({5}), in({5})}});
  c.push_back(OpCase{.name = "bias_add_large",
                     .op = "bias_add",
                     .inputs = {in({64, 16, 16, 8}), in({8})},
                     .check_grad = false});
  for (std::string op : {"softmax", "log_softmax"}) {
    c.push_back(OpCase{.name = op + "_last", .op = op, .inputs = {in({3, 5}, -3.f, 3.f)}});
    c.push_back(OpCase{.name = op + "_axis1",
                       .op = op,
                       .attrs = Attrs{{"axis", 1}},
                       .inputs = {in({2, 3, 4}, -3.f, 3.f)}});
    c.push_back(OpCase{.name = op + "_large",
                       .op = op,
                       .inputs = {in({2000, 20}, -5.f, 5.f)},
                       .check_grad = false});
    c.push_back(OpCase{.name = op + "_grad",
                       .op = op + "_grad",
                       .inputs = {in({3, 5}), in({3, 5}, -2.f, 0.f)},
                       .check_grad = false});
    c.push_back(OpCase{.name = op + "_grad_axis0",
                       .op = op + "_grad",
                       .attrs = Attrs{{"axis", 0}},
                       .inputs = {in({3, 5}), in({3, 5}, -2.f, 0.f)},
                       .check_grad = false});
  }
  return c;
}

LS_OP_CASES(array_ops) {
  std::vector<OpCase> c;
  c.push_back(OpCase{.name = "cast_f32_f32",
                     .op = "cast",
                     .attrs = Attrs{{"dtype", "float32"}},
                     .inputs = {in({2, 3})}});
  c.push_back(OpCase{.name = "cast_f32_i32",
                     .op = "cast",
                     .attrs = Attrs{{"dtype", "int32"}},
                     .inputs = {in({2, 3}, -5.f, 5.f)},
                     .check_grad = false});
  c.push_back(
      OpCase{.name = "cast_i32_f32",
             .op = "cast",
             .attrs = Attrs{{"dtype", "float32"}},
             .inputs = {OpInput{
                 .shape = {4}, .dtype = DType::i32, .lo = -3, .hi = 9, .differentiable = false}},
             .check_grad = false});
  c.push_back(OpCase{.name = "concat_axis0",
                     .op = "concat",
                     .attrs = Attrs{{"axis", 0}},
                     .inputs = {in({2, 3}), in({1, 3})}});
  c.push_back(OpCase{.name = "concat_last3",
                     .op = "concat",
                     .attrs = Attrs{{"axis", -1}},
                     .inputs = {in({2, 2}), in({2, 3}), in({2, 1})}});
  c.push_back(OpCase{.name = "concat_middle",
                     .op = "concat",
                     .attrs = Attrs{{"axis", 1}},
                     .inputs = {in({2, 1, 3}), in({2, 2, 3})}});
  c.push_back(OpCase{.name = "slice_2d",
                     .op = "slice",
                     .attrs = Attrs{{"begin", I{1, 2}}, {"size", I{2, -1}}},
                     .inputs = {in({4, 5})}});
  c.push_back(OpCase{.name = "slice_3d",
                     .op = "slice",
                     .attrs = Attrs{{"begin", I{0, 1, 1}}, {"size", I{2, 1, 2}}},
                     .inputs = {in({2, 3, 4})}});
  c.push_back(OpCase{.name = "slice_grad",
                     .op = "slice_grad",
                     .attrs = Attrs{{"begin", I{1, 2}}, {"size", I{2, -1}}},
                     .inputs = {in({2, 3}), in({4, 5})},
                     .check_grad = false});
  // pad (ZeroPadding2D): the gradient is dy's slice.
  c.push_back(OpCase{.name = "pad_nhwc",
                     .op = "pad",
                     .attrs = Attrs{{"before", I{0, 1, 0, 0}}, {"after", I{0, 2, 1, 0}}},
                     .inputs = {in({2, 3, 2, 3})}});
  c.push_back(OpCase{.name = "pad_2d_batch_axis",
                     .op = "pad",
                     .attrs = Attrs{{"before", I{1, 0}}, {"after", I{0, 3}}},
                     .inputs = {in({2, 3})}});
  // Dropout: cpu and reference draw the same mask; the gradient is checked in loss_ops_test
  // (each FD run advances the step, and with it the mask).
  c.push_back(OpCase{.name = "dropout",
                     .op = "dropout",
                     .attrs = Attrs{{"rate", 0.3}, {"seed", 7}},
                     .inputs = {in({8, 16})},
                     .check_grad = false});
  c.push_back(OpCase{.name = "dropout_large_odd",
                     .op = "dropout",
                     .attrs = Attrs{{"rate", 0.5}},
                     .inputs = {in({100003})},
                     .check_grad = false});
  return c;
}

}  // namespace lockstep::testing
