// Op-table cases for scaled_dot_product_attention: every backend against the reference formula
// (y and lse), and y's gradient (q, k, v) against finite differences: plain, causal, with a
// float and a uint8 mask, ragged lengths (Tq != Tk), grouped-query heads (H != Hkv), an explicit
// scale and dropout. Larger cases span several of the cpu kernel's tiles (forward and, through
// the gradient op, backward) without finite differences. The harness also runs every case with
// bf16 operands against the reference on the same bf16-rounded values.
#include "ops/op_harness.h"

namespace lockstep::testing {
namespace {

OpInput in(Shape s, float lo = -1.f, float hi = 1.f) {
  return OpInput{.shape = s, .lo = lo, .hi = hi};
}

// A keep-mask of `shape` with every third element (from `phase`) 0, as f32 or uint8.
OpInput mask(Shape shape, DType t = DType::f32, int phase = 1) {
  std::vector<float> v(size_t(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = (i + size_t(phase)) % 3 == 0 ? 0.f : 1.f;
  return OpInput{.shape = shape, .dtype = t, .differentiable = false, .values = v};
}

struct Dims {
  int64_t B, Tq, Tk, H, Hkv, D, Dv;
};

std::vector<OpInput> qkv(const Dims& d) {
  return {in({d.B, d.Tq, d.H, d.D}), in({d.B, d.Tk, d.Hkv, d.D}), in({d.B, d.Tk, d.Hkv, d.Dv})};
}

OpCase attn(const std::string& name, const Dims& d, Attrs a, std::vector<OpInput> extra = {},
            bool grad = true) {
  std::vector<OpInput> ins = qkv(d);
  for (auto& e : extra) ins.push_back(e);
  return OpCase{.name = name,
                .op = "scaled_dot_product_attention",
                .attrs = a,
                .inputs = ins,
                .check_grad = grad,
                .fwd_tol = 1e-4f,
                .grad_tol = 2e-2f,
                .fd_eps = 5e-3f};
}

// The gradient op against the reference: output `out` (dq, dk, dv) of the gradient of the
// forward node on (q, k, v[, mask]) with a random dy (input 0).
OpCase grad_case(const std::string& name, const Dims& d, Attrs a, std::vector<OpInput> extra,
                 int out) {
  std::vector<OpInput> ins{in({d.B, d.Tq, d.H, d.Dv})};
  for (auto& i : qkv(d)) ins.push_back(i);
  for (auto& e : extra) ins.push_back(e);
  return OpCase{.name = name + "_d" + std::string(1, "qkv"[out]),
                .op = "scaled_dot_product_attention_grad",
                .attrs = a,
                .inputs = ins,
                .check_grad = false,
                .fwd_tol = 2e-4f,
                .build = [a, out](Graph& g, const std::vector<Value>& p) {
                  std::vector<Value> fwd(p.begin() + 1, p.end());
                  std::vector<Value> y = g.add_multi(op::scaled_dot_product_attention, fwd, a);
                  fwd.insert(fwd.begin(), p[0]);
                  fwd.push_back(y[0]);
                  fwd.push_back(y[1]);
                  return g.add_multi(op::scaled_dot_product_attention_grad, fwd, a)[size_t(out)];
                }};
}

}  // namespace

LS_OP_CASES(attention_ops) {
  const Dims small{2, 3, 5, 2, 2, 4, 3}, square{1, 4, 4, 2, 1, 3, 3}, gqa{2, 3, 4, 4, 2, 3, 2};
  const Attrs causal{{"causal", true}};
  return {
      attn("sdpa", small, {}),
      attn("sdpa_causal", square, causal),
      attn("sdpa_causal_ragged", small, causal),
      attn("sdpa_mask", small, {}, {mask({2, 1, 3, 5})}),
      attn("sdpa_mask_u8_keys", small, {}, {mask({2, 1, 1, 5}, DType::u8)}),
      attn("sdpa_mask_causal", square, causal, {mask({1, 2, 4, 4}, DType::f32, 2)}),
      attn("sdpa_gqa", gqa, {}),
      attn("sdpa_gqa_causal_mask", gqa, causal, {mask({3, 4})}),
      attn("sdpa_scale", small, Attrs{{"scale", 0.7}}),
      // Each finite-difference run advances the step, and with it the dropout: its gradient is
      // checked at a fixed step in tests/nn/attention_test.cpp (AttentionDropout.*).
      attn("sdpa_dropout", small, Attrs{{"dropout", 0.3}, {"seed", 7}}, {}, false),
      attn("sdpa_weights", small, Attrs{{"return_weights", true}, {"causal", true}},
           {mask({2, 1, 3, 5})}, false),
      // Several tiles (32 queries x 64 keys) each way, ragged at the ends.
      attn("sdpa_tiles", {2, 70, 130, 2, 1, 8, 5}, {}, {}, false),
      attn("sdpa_tiles_causal", {1, 150, 150, 2, 2, 8, 8}, causal, {}, false),
      attn("sdpa_tiles_mask_dropout", {1, 40, 100, 2, 2, 4, 4},
           Attrs{{"dropout", 0.2}, {"seed", 3}}, {mask({1, 1, 40, 100})}, false),
  };
}

LS_OP_CASES(attention_grad_ops) {
  std::vector<OpCase> c;
  const Dims tiles{2, 70, 130, 4, 2, 8, 5}, causal_d{1, 150, 150, 2, 1, 8, 8};
  for (int out = 0; out < 3; ++out) {
    c.push_back(grad_case("sdpa_grad_tiles", tiles, {}, {}, out));
    c.push_back(grad_case("sdpa_grad_tiles_causal", causal_d, Attrs{{"causal", true}}, {}, out));
    c.push_back(grad_case("sdpa_grad_tiles_mask_dropout", {1, 40, 100, 2, 2, 4, 4},
                          Attrs{{"dropout", 0.2}, {"seed", 3}, {"causal", true}},
                          {mask({1, 1, 40, 100})}, out));
  }
  return c;
}

}  // namespace lockstep::testing
