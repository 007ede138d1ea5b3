// Op-table cases for the sequence ops (src/ops/sequence_ops.cpp): gather (repeated ids, another
// axis, int64 ids, bf16 tables) and its scatter-add gradient, one_hot, the comparisons and
// logical ops, where, reverse, cumsum, and the integer casts every backend must agree on.
#include "ops/op_harness.h"

namespace lockstep::testing {
namespace {

using I = std::vector<int64_t>;

OpInput in(Shape s, float lo = -1.f, float hi = 1.f) {
  return OpInput{.shape = s, .lo = lo, .hi = hi};
}
OpInput ids(Shape s, std::vector<float> v) {
  return OpInput{.shape = s, .dtype = DType::i32, .differentiable = false, .values = std::move(v)};
}
OpInput fixed(Shape s, std::vector<float> v) {
  return OpInput{.shape = s, .differentiable = false, .values = std::move(v)};
}
OpCase fwd(const std::string& name, const std::string& op, std::vector<OpInput> ins,
           Attrs at = {}) {
  return OpCase{.name = name, .op = op, .attrs = at, .inputs = std::move(ins), .check_grad = false};
}
Value cast(Graph& g, Value v, const char* to) { return g.add(op::cast, {v}, Attrs{{"dtype", to}}); }

void gather_cases(std::vector<OpCase>& c) {
  // Repeated ids (0 three times, 2 twice): the gradient adds their rows.
  c.push_back(OpCase{.name = "gather_embedding_repeated_ids",
                     .op = "gather",
                     .inputs = {in({6, 4}), ids({2, 4}, {0, 2, 2, 5, 0, 1, 0, 3})}});
  c.push_back(OpCase{.name = "gather_axis1",
                     .op = "gather",
                     .attrs = Attrs{{"axis", 1}},
                     .inputs = {in({3, 5, 2}), ids({4}, {4, 0, 4, 1})}});
  c.push_back(OpCase{.name = "gather_scalar_rows",
                     .op = "gather",
                     .inputs = {in({7}), ids({3, 2}, {6, 0, 1, 1, 2, 6})}});
  // int64 ids (made from float ids by a cast: the xla table feeds float32 and int32 only).
  c.push_back(OpCase{.name = "gather_int64_ids",
                     .op = "gather",
                     .inputs = {in({5, 3}), fixed({2, 3}, {4, 0, 3, 3, 1, 2})},
                     .build = [](Graph& g, const std::vector<Value>& v) {
                       return g.add(op::gather, {v[0], cast(g, v[1], "int64")});
                     }});
  // Wide rows, enough ids for the cpu kernels' parallel paths (both split the work).
  std::vector<float> many;
  for (int i = 0; i < 512; ++i) many.push_back(float((i * 37) % 50));
  c.push_back(fwd("gather_large", "gather", {in({50, 160}), ids({8, 64}, many)}));
  c.push_back(fwd("gather_grad_large", "gather_grad", {in({8, 64, 160}), ids({8, 64}, many)},
                  Attrs{{"axis", 0}, {"size", 50}}));
  c.push_back(fwd("gather_grad_axis1", "gather_grad", {in({3, 4, 2}), ids({4}, {4, 0, 4, 1})},
                  Attrs{{"axis", 1}, {"size", 5}}));
}

void one_hot_compare_cases(std::vector<OpCase>& c) {
  // -1 and 4 are outside depth 4: rows of zeros.
  c.push_back(fwd("one_hot", "one_hot", {ids({2, 3}, {0, 3, -1, 4, 1, 1})}, Attrs{{"depth", 4}}));
  c.push_back(fwd("one_hot_uint8", "one_hot", {ids({4}, {2, 0, 1, 2})},
                  Attrs{{"depth", 3}, {"dtype", "uint8"}}));
  const OpInput a = fixed({2, 3}, {0, 1, 2, -1, 5, 2}), b = fixed({3}, {0, 2, 2});
  for (const char* cmp : {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"}) {
    c.push_back(fwd(std::string(cmp) + "_broadcast", cmp, {a, b}));
    c.push_back(fwd(std::string(cmp) + "_int32", cmp,
                    {ids({2, 3}, {0, 1, 2, -1, 5, 2}), ids({2, 3}, {0, 2, 2, 3, 5, -4})}));
  }
  // logical ops on the comparisons' uint8 (the xla table feeds no uint8 inputs).
  for (const char* lg : {"logical_and", "logical_or", "logical_not"}) {
    const OpId id = OpId::named(lg);
    c.push_back(OpCase{.name = lg,
                       .op = lg,
                       .inputs = {a, b},
                       .check_grad = false,
                       .build = [id](Graph& g, const std::vector<Value>& v) {
                         Value p = g.add(op::greater, {v[0], g.add(op::zeros_like, {v[0]})});
                         Value q = g.add(op::less_equal, {v[1], g.add(op::ones_like, {v[1]})});
                         return id == op::logical_not ? g.add(id, {p}) : g.add(id, {p, q});
                       }});
  }
}

void where_reverse_cumsum_cases(std::vector<OpCase>& c) {
  // cond from a comparison; a broadcast along the rows: its gradient sums them.
  c.push_back(OpCase{.name = "where_broadcast",
                     .op = "where",
                     .inputs = {fixed({2, 3}, {1, -1, 1, -1, -1, 1}), in({3}), in({2, 3})},
                     .build = [](Graph& g, const std::vector<Value>& v) {
                       Value cond = g.add(op::greater, {v[0], g.add(op::zeros_like, {v[0]})});
                       return g.add(op::where, {cond, v[1], v[2]});
                     }});
  c.push_back(OpCase{.name = "reverse_two_axes",
                     .op = "reverse",
                     .attrs = Attrs{{"axes", I{1, -1}}},
                     .inputs = {in({2, 3, 4})}});
  c.push_back(OpCase{.name = "reverse_time",
                     .op = "reverse",
                     .attrs = Attrs{{"axes", I{1}}},
                     .inputs = {in({3, 5})}});
  for (bool excl : {false, true})
    for (bool rev : {false, true})
      c.push_back(OpCase{
          .name = std::string("cumsum") + (excl ? "_exclusive" : "") + (rev ? "_reverse" : ""),
          .op = "cumsum",
          .attrs = Attrs{{"axis", 1}, {"exclusive", excl}, {"reverse", rev}},
          .inputs = {in({2, 5, 3})}});
  c.push_back(OpCase{.name = "cumsum_last_axis", .op = "cumsum", .inputs = {in({4, 6})}});
}

// Casts between the integer types and the float types, through and back, on every backend.
void cast_cases(std::vector<OpCase>& c) {
  const char* chains[][2] = {{"int32", "float32"}, {"int64", "float32"},  {"uint8", "float32"},
                             {"int64", "int32"},   {"int32", "int64"},    {"uint8", "int32"},
                             {"int32", "uint8"},   {"bfloat16", "int32"}, {"int64", "bfloat16"}};
  for (auto& ch : chains) {
    const std::string first = ch[0], second = ch[1];
    c.push_back(OpCase{.name = "cast_chain_" + first + "_" + second,
                       .op = "cast",
                       .inputs = {fixed({2, 4}, {0, 1, 2, 7, 100, 3.7f, 250, 9.2f})},
                       .check_grad = false,
                       .build = [first, second](Graph& g, const std::vector<Value>& v) {
                         Value x = cast(g, cast(g, v[0], first.c_str()), second.c_str());
                         return g.type(x).dtype == DType::f32 ? x : cast(g, x, "float32");
                       }});
  }
}

}  // namespace

LS_OP_CASES(sequence_ops) {
  std::vector<OpCase> c;
  gather_cases(c);
  one_hot_compare_cases(c);
  where_reverse_cumsum_cases(c);
  cast_cases(c);
  return c;
}

}  // namespace lockstep::testing
