// Op-table cases for the recurrent ops lstm, gru and simple_rnn: every backend against the
// reference kernels, and each output's gradient (x, weights, initial states) against finite
// differences, with and without a Keras mask, go_backwards and a recurrent dropout mask.
#include "ops/op_harness.h"

namespace lockstep::testing {
namespace {

constexpr int64_t N = 2, T = 4, F = 3, H = 2;

OpInput in(Shape s, float lo = -1.f, float hi = 1.f) {
  return OpInput{.shape = s, .lo = lo, .hi = hi};
}
// Keep / skip per (sample, step): sample 0 skips step 2, sample 1 steps 1 and 2.
OpInput mask() {
  return OpInput{.shape = {N, T}, .differentiable = false, .values = {1, 1, 0, 1, 1, 0, 0, 1}};
}
OpInput rdrop() {
  return OpInput{.shape = {N, H}, .differentiable = false, .values = {1.25f, 0.f, 0.f, 1.25f}};
}

struct Variant {
  std::string suffix;
  Attrs attrs;
};

std::vector<Variant> variants() {
  return {{"", {}},
          {"_backwards", Attrs{{"go_backwards", true}}},
          {"_masked", Attrs{{"masked", true}}},
          {"_masked_backwards_zero",
           Attrs{{"masked", true}, {"go_backwards", true}, {"zero_output_for_mask", true}}},
          {"_rdrop", Attrs{{"recurrent_dropout", true}}}};
}

// The cases of one op with gates G and `states` states, one per variant and checked output.
void add_cases(std::vector<OpCase>& c, const std::string& name, const std::string& op, int64_t G,
               int states, Shape bias, Attrs extra) {
  for (const Variant& v : variants()) {
    Attrs a = extra;
    for (const auto& [k, val] : v.attrs.map()) a.set(k, val);
    std::vector<OpInput> ins{in({N, T, F}), in({F, G * H}, -0.8f, 0.8f),
                             in({H, G * H}, -0.8f, 0.8f), in(bias, -0.5f, 0.5f)};
    for (int s = 0; s < states; ++s) ins.push_back(in({N, H}, -0.5f, 0.5f));
    if (v.attrs.has("masked")) ins.push_back(mask());
    if (v.attrs.has("recurrent_dropout")) ins.push_back(rdrop());
    for (int out = 0; out <= states; ++out)
      c.push_back(OpCase{
          .name = name + v.suffix + (out ? "_state" + std::to_string(out) : ""),
          .op = op,
          .attrs = a,
          .inputs = ins,
          .fwd_tol = 1e-4f,
          .grad_tol = 2e-2f,
          .fd_eps = 5e-3f,  // 1e-3 left float32 rounding noise of ~3e-5 in the -O1 (ASan) build
          .grad_output = out});
  }
}

// The gradient op itself, against the reference (dy and the state gradients random).
OpCase grad_case(const std::string& name, const std::string& op, int64_t G, int states, Shape bias,
                 Attrs a, bool masked) {
  std::vector<OpInput> ins{in({N, T, H})};
  for (int s = 0; s < states; ++s) ins.push_back(in({N, H}));
  for (auto& i : {in({N, T, F}), in({F, G * H}, -0.8f, 0.8f), in({H, G * H}, -0.8f, 0.8f),
                  in(bias, -0.5f, 0.5f)})
    ins.push_back(i);
  for (int s = 0; s < states; ++s) ins.push_back(in({N, H}, -0.5f, 0.5f));
  if (masked) {
    ins.push_back(mask());
    a.set("masked", true);
  }
  return OpCase{.name = name, .op = op, .attrs = a, .inputs = ins, .check_grad = false};
}

}  // namespace

LS_OP_CASES(rnn_grad_ops) {
  const Attrs back{{"go_backwards", true}};
  return {grad_case("lstm_grad", "lstm_grad", 4, 2, {4 * H}, {}, false),
          grad_case("lstm_grad_backwards_masked", "lstm_grad", 4, 2, {4 * H}, back, true),
          grad_case("gru_grad", "gru_grad", 3, 1, {2, 3 * H}, back, false),
          grad_case("gru_grad_reset_before", "gru_grad", 3, 1, {3 * H},
                    Attrs{{"reset_after", false}}, false),
          grad_case("simple_rnn_grad", "simple_rnn_grad", 1, 1, {H}, back, false),
          grad_case("simple_rnn_grad_relu", "simple_rnn_grad", 1, 1, {H},
                    Attrs{{"nonlinearity", "relu"}}, false)};
}

LS_OP_CASES(rnn_ops) {
  std::vector<OpCase> c;
  add_cases(c, "lstm", "lstm", 4, 2, {4 * H}, {});
  add_cases(c, "gru", "gru", 3, 1, {2, 3 * H}, {});
  add_cases(c, "gru_reset_before", "gru", 3, 1, {3 * H}, Attrs{{"reset_after", false}});
  add_cases(c, "simple_rnn", "simple_rnn", 1, 1, {H}, {});
  OpCase relu{.name = "simple_rnn_relu",
              .op = "simple_rnn",
              .attrs = Attrs{{"nonlinearity", "relu"}, {"masked", true}},
              .inputs = {in({N, T, F}), in({F, H}), in({H, H}), in({H}), in({N, H}), mask()},
              .check_grad = false};
  c.push_back(relu);
  return c;
}

}  // namespace lockstep::testing
