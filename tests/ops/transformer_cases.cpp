// Op-table cases for the transformer ops (src/ops/transformer_ops.cpp) and the einsum and
// masked-softmax builders (lockstep/ops/transformer.h): batch_matmul with broadcast batch dims
// and transposes (f32 and bf16), rms_norm, rotary_embedding (axes, start index as attribute
// and as input), random_categorical, and einsum equations; each checked against the reference
// on every backend and, where differentiable, by finite differences.
#include "lockstep/ops/transformer.h"
#include "ops/op_harness.h"

namespace lockstep::testing {
namespace {

OpInput in(Shape s, float lo = -1.f, float hi = 1.f) {
  return OpInput{.shape = s, .lo = lo, .hi = hi};
}
OpInput fixed(Shape s, std::vector<float> v) {
  return OpInput{.shape = s, .differentiable = false, .values = std::move(v)};
}
Value cast(Graph& g, Value v, const char* to) { return g.add(op::cast, {v}, Attrs{{"dtype", to}}); }

void batch_matmul_cases(std::vector<OpCase>& c) {
  struct Mm {
    const char* name;
    Shape a, b;
    bool ta, tb;
  };
  const Mm mms[] = {{"batch_matmul_3d", {2, 3, 4}, {2, 4, 5}, false, false},
                    {"batch_matmul_broadcast_4d_3d", {2, 1, 3, 4}, {3, 4, 5}, false, false},
                    {"batch_matmul_weights_2d", {2, 3, 4}, {4, 5}, false, false},
                    {"batch_matmul_ta", {2, 4, 3}, {2, 4, 5}, true, false},
                    {"batch_matmul_tb", {3, 2, 3, 4}, {3, 2, 5, 4}, false, true},
                    {"batch_matmul_ta_tb_broadcast", {1, 2, 4, 3}, {3, 1, 5, 4}, true, true}};
  for (const Mm& m : mms)
    c.push_back(OpCase{.name = m.name,
                       .op = "batch_matmul",
                       .attrs = Attrs{{"transpose_a", m.ta}, {"transpose_b", m.tb}},
                       .inputs = {in(m.a), in(m.b)}});
  // bfloat16 operands (mixed precision): f32 accumulation, bf16 result.
  c.push_back(OpCase{
      .name = "batch_matmul_bf16",
      .op = "batch_matmul",
      .inputs = {in({2, 3, 16}), in({2, 16, 5})},
      .check_grad = false,
      .fwd_tol = 2e-2f,
      .build = [](Graph& g, const std::vector<Value>& v) {
        Value y = g.add(op::batch_matmul, {cast(g, v[0], "bfloat16"), cast(g, v[1], "bfloat16")});
        return cast(g, y, "float32");
      }});
  // Large enough for oneDNN's blocked paths.
  c.push_back(OpCase{.name = "batch_matmul_large",
                     .op = "batch_matmul",
                     .inputs = {in({4, 64, 48}), in({4, 48, 80})},
                     .check_grad = false});
}

void rms_rotary_cases(std::vector<OpCase>& c) {
  c.push_back(OpCase{.name = "rms_norm_2d", .op = "rms_norm", .inputs = {in({3, 5}), in({5})}});
  c.push_back(OpCase{.name = "rms_norm_3d_eps",
                     .op = "rms_norm",
                     .attrs = Attrs{{"epsilon", 1e-3}},
                     .inputs = {in({2, 3, 8}), in({8}, 0.5f, 1.5f)}});
  // The gradient op on its own (its values against the reference on every backend; the
  // finite-difference checks of rms_norm above cover its math).
  c.push_back(OpCase{.name = "rms_norm_grad",
                     .op = "rms_norm_grad",
                     .inputs = {in({4, 7}), in({4, 7}), in({7}, 0.5f, 1.5f)},
                     .check_grad = false});
  c.push_back(OpCase{.name = "rms_norm_wide",
                     .op = "rms_norm",
                     .inputs = {in({64, 600}), in({600})},
                     .check_grad = false});
  c.push_back(OpCase{
      .name = "rotary_embedding_4d", .op = "rotary_embedding", .inputs = {in({2, 5, 3, 8})}});
  c.push_back(
      OpCase{.name = "rotary_embedding_start_scaled",
             .op = "rotary_embedding",
             .attrs = Attrs{{"start_index", 7}, {"scaling_factor", 2.0}, {"max_wavelength", 100.0}},
             .inputs = {in({2, 6, 4})}});
  c.push_back(OpCase{.name = "rotary_embedding_feature_before_sequence",
                     .op = "rotary_embedding",
                     .attrs = Attrs{{"sequence_axis", 2}, {"feature_axis", 1}},
                     .inputs = {in({2, 6, 5})}});
  // The start index as an input (a cache's position): int32 from a float input.
  c.push_back(OpCase{.name = "rotary_embedding_start_input",
                     .op = "rotary_embedding",
                     .inputs = {in({1, 3, 2, 4}), fixed({1}, {11})},
                     .build = [](Graph& g, const std::vector<Value>& v) {
                       return ops::rotary_embedding(g, v[0], {.start_index = 2},
                                                    cast(g, v[1], "int32"));
                     }});
}

void categorical_cases(std::vector<OpCase>& c) {
  for (int64_t k : {0, 3})
    c.push_back(OpCase{.name = "random_categorical_top" + std::to_string(k),
                       .op = "random_categorical",
                       .attrs = Attrs{{"seed", 5}, {"top_k", k}, {"temperature", 0.7}},
                       .inputs = {in({6, 10}, -3.f, 3.f)},
                       .check_grad = false,
                       .build = [k](Graph& g, const std::vector<Value>& v) {
                         return cast(g, ops::random_categorical(g, v[0], 5, 0.7, k), "float32");
                       }});
}

// einsum equations as graphs of transpose / reshape / (batch_)matmul / reduce_sum.
void einsum_cases(std::vector<OpCase>& c) {
  struct Eq {
    const char* name;
    const char* eq;
    Shape a, b;
  };
  const Eq eqs[] = {{"einsum_dense_btd_dhk", "btd,dhk->bthk", {2, 3, 4}, {4, 2, 3}},
                    {"einsum_scores_bqhd_bkhd", "bqhd,bkhd->bhqk", {2, 3, 2, 4}, {2, 5, 2, 4}},
                    {"einsum_values_bhqk_bkhd", "bhqk,bkhd->bqhd", {2, 2, 3, 5}, {2, 5, 2, 4}},
                    {"einsum_out_proj_bqhd_hde", "bqhd,hde->bqe", {2, 3, 2, 4}, {2, 4, 5}},
                    {"einsum_ellipsis_matmul", "...ij,...jk->...ik", {2, 3, 4}, {1, 4, 2}},
                    {"einsum_sum_only_in_a", "abc,cd->ad", {2, 3, 4}, {4, 5}},
                    {"einsum_outer", "i,j->ij", {3}, {4}}};
  for (const Eq& e : eqs) {
    const std::string eq = e.eq;
    c.push_back(OpCase{.name = e.name,
                       .op = "batch_matmul",
                       .inputs = {in(e.a), in(e.b)},
                       .build = [eq](Graph& g, const std::vector<Value>& v) {
                         return ops::einsum(g, eq, v[0], v[1]);
                       }});
  }
  for (const char* eq : {"abc->acb", "abc->ca", "ab->", "...c->c..."}) {
    const std::string e = eq;
    c.push_back(OpCase{.name = std::string("einsum_unary_") + std::to_string(c.size()),
                       .op = "transpose",
                       .inputs = {in({2, 3, 4})},
                       .build = [e](Graph& g, const std::vector<Value>& v) {
                         Value x = e == "ab->" ? g.add(op::reshape, {v[0]},
                                                       Attrs{{"shape", std::vector<int64_t>{6, 4}}})
                                               : v[0];
                         return ops::einsum(g, e, x);
                       }});
  }
}

void masked_softmax_cases(std::vector<OpCase>& c) {
  // Mask [2, 5] over scores [2, 3, 5] (broadcast along the middle axis); row 1 fully masked.
  c.push_back(
      OpCase{.name = "masked_softmax_broadcast",
             .op = "softmax",
             .inputs = {in({2, 3, 5}, -2.f, 2.f), fixed({2, 1, 5}, {1, 1, 0, 1, 0, 0, 0, 0, 0, 0})},
             .build = [](Graph& g, const std::vector<Value>& v) {
               return ops::masked_softmax(g, v[0], v[1]);
             }});
  c.push_back(OpCase{.name = "masked_softmax_two_axes",
                     .op = "softmax",
                     .inputs = {in({2, 3, 4}, -2.f, 2.f)},
                     .build = [](Graph& g, const std::vector<Value>& v) {
                       return ops::masked_softmax(g, v[0], Value{}, {1, 2});
                     }});
}

}  // namespace

LS_OP_CASES(transformer_ops) {
  std::vector<OpCase> c;
  batch_matmul_cases(c);
  rms_rotary_cases(c);
  categorical_cases(c);
  einsum_cases(c);
  masked_softmax_cases(c);
  return c;
}

}  // namespace lockstep::testing
