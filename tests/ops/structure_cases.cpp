// Op-table cases for the structure ops (constants, views), the learning-rate schedule, and the
// norm gradient ops run directly (their op-table forward cases reach them only through autodiff).
#include "ops/op_harness.h"

namespace lockstep::testing {
namespace {

using I = std::vector<int64_t>;
using F = std::vector<double>;

OpInput in(Shape s, float lo = -1.f, float hi = 1.f) {
  return OpInput{.shape = s, .lo = lo, .hi = hi};
}
OpCase fwd(const std::string& name, const std::string& op, std::vector<OpInput> ins,
           Attrs at = {}) {
  return OpCase{.name = name, .op = op, .attrs = at, .inputs = std::move(ins), .check_grad = false};
}
OpInput step(float s) { return OpInput{.shape = {}, .differentiable = false, .values = {s}}; }

}  // namespace

LS_OP_CASES(structure_ops) {
  std::vector<OpCase> c;
  c.push_back(fwd("constant", "constant", {}, Attrs{{"value", 2.5}, {"shape", I{2, 3}}}));
  c.push_back(fwd("constant_scalar", "constant", {}, Attrs{{"value", -1.0}}));
  c.push_back(fwd("ones_like", "ones_like", {in({2, 3})}));
  c.push_back(fwd("zeros_like", "zeros_like", {in({4})}));
  c.push_back(OpCase{.name = "identity", .op = "identity", .inputs = {in({2, 3})}});
  c.push_back(fwd("stop_gradient", "stop_gradient", {in({3, 2})}));
  c.push_back(OpCase{.name = "reshape",
                     .op = "reshape",
                     .attrs = Attrs{{"shape", I{3, -1}}},
                     .inputs = {in({2, 3})}});
  return c;
}

LS_OP_CASES(lr_schedule) {
  std::vector<OpCase> c;
  c.push_back(fwd("lr_schedule_constant", "lr_schedule", {step(3)},
                  Attrs{{"kind", "constant"}, {"value", 0.01}}));
  c.push_back(fwd("lr_schedule_exponential_staircase", "lr_schedule", {step(25)},
                  Attrs{{"kind", "exponential_decay"},
                        {"initial_learning_rate", 0.1},
                        {"decay_steps", int64_t(10)},
                        {"decay_rate", 0.5},
                        {"staircase", true}}));
  c.push_back(fwd("lr_schedule_cosine_warmup", "lr_schedule", {step(2)},
                  Attrs{{"kind", "cosine_decay"},
                        {"initial_learning_rate", 0.0},
                        {"decay_steps", int64_t(10)},
                        {"warmup_target", 0.2},
                        {"warmup_steps", int64_t(4)}}));
  c.push_back(fwd("lr_schedule_piecewise", "lr_schedule", {step(7)},
                  Attrs{{"kind", "piecewise_constant_decay"},
                        {"boundaries", I{5, 10}},
                        {"values", F{1.0, 0.5, 0.1}}}));
  c.push_back(fwd("lr_schedule_polynomial_cycle", "lr_schedule", {step(15)},
                  Attrs{{"kind", "polynomial_decay"},
                        {"initial_learning_rate", 0.1},
                        {"decay_steps", int64_t(10)},
                        {"power", 2.0},
                        {"cycle", true}}));
  c.push_back(fwd("lr_schedule_inverse_time", "lr_schedule", {step(12)},
                  Attrs{{"kind", "inverse_time_decay"},
                        {"initial_learning_rate", 0.1},
                        {"decay_steps", int64_t(5)},
                        {"decay_rate", 0.5}}));
  c.push_back(fwd("lr_schedule_cosine_restarts", "lr_schedule", {step(35)},
                  Attrs{{"kind", "cosine_decay_restarts"},
                        {"initial_learning_rate", 0.1},
                        {"first_decay_steps", int64_t(10)},
                        {"m_mul", 0.5}}));
  return c;
}

LS_OP_CASES(norm_grad_ops) {
  std::vector<OpCase> c;
  OpInput var{.shape = {3}, .lo = 0.5f, .hi = 1.5f};
  const Attrs eps{{"epsilon", 1e-3}};
  c.push_back(OpCase{.name = "batch_norm_train_grad",
                     .op = "batch_norm_train_grad",
                     .attrs = eps,
                     .inputs = {in({4, 2, 3}), in({4, 2, 3}), in({3}), in({3}), var},
                     .check_grad = false,
                     .fwd_tol = 1e-3f});
  c.push_back(
      OpCase{.name = "batch_norm_train_grad_with_stats",
             .op = "batch_norm_train_grad",
             .attrs = eps,
             .inputs = {in({4, 2, 3}), in({4, 2, 3}), in({3}), in({3}), var, in({3}), in({3})},
             .check_grad = false,
             .fwd_tol = 1e-3f});
  // Fused with relu_grad: dy masked by y > 0 (input 5); emit_dy also returns the masked dy.
  for (bool emit : {false, true})
    for (bool stats : {false, true}) {
      std::vector<OpInput> ins{in({4, 2, 3}), in({4, 2, 3}), in({3}), in({3}), var, in({4, 2, 3})};
      if (stats) ins.insert(ins.end(), {in({3}), in({3})});
      c.push_back(
          OpCase{.name = std::string("batch_norm_train_grad_relu") + (emit ? "_emit_dy" : "") +
                         (stats ? "_with_stats" : ""),
                 .op = "batch_norm_train_grad",
                 .attrs = Attrs{{"epsilon", 1e-3}, {"activation", "relu"}, {"emit_dy", emit}},
                 .inputs = ins,
                 .check_grad = false,
                 .fwd_tol = 1e-3f});
    }
  c.push_back(fwd("batch_norm_infer_grad", "batch_norm_infer_grad",
                  {in({4, 3}), in({4, 3}), in({3}), in({3}), var}, eps));
  OpInput rstd{.shape = {2, 3}, .lo = 0.5f, .hi = 2.f};
  c.push_back(OpCase{.name = "layer_norm_grad",
                     .op = "layer_norm_grad",
                     .attrs = eps,
                     .inputs = {in({2, 3, 5}), in({2, 3, 5}), in({5}), in({2, 3}), rstd},
                     .check_grad = false,
                     .fwd_tol = 1e-3f});
  c.push_back(OpCase{
      .name = "layer_norm_grad_with_stats",
      .op = "layer_norm_grad",
      .attrs = eps,
      .inputs = {in({2, 3, 5}), in({2, 3, 5}), in({5}), in({2, 3}), rstd, in({2, 3}), in({2, 3})},
      .check_grad = false,
      .fwd_tol = 1e-3f});
  return c;
}

}  // namespace lockstep::testing
