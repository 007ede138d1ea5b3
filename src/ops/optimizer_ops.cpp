// Optimizer op registrations: in-place variable updates (side effects) and lr_schedule.
#include "ops/internal/op_util.h"

namespace lockstep::ops {

namespace {

using Types = std::vector<TensorType>;

void expect_scalar(const TensorType& t, const char* what) {
  expect_f32(t, what);
  LS_CHECK(t.shape.numel() == 1, what, " must be a scalar, got shape ", t.shape.str());
}

void expect_like(const TensorType& t, const TensorType& var, const char* what) {
  expect_f32(t, what);
  LS_CHECK(t.shape == var.shape, what, " ", t.shape.str(), " does not match the variable ",
           var.shape.str());
}

// (var, grad, lr, slots...[, t]): `slots` inputs after lr shaped like var, then `scalars` more.
std::function<Types(const Node&, const Types&)> update_infer(size_t min_slots, size_t max_slots,
                                                             size_t trailing_scalars) {
  return [=](const Node&, const Types& in) {
    size_t fixed = 3 + trailing_scalars;
    LS_CHECK(in.size() >= fixed + min_slots && in.size() <= fixed + max_slots, "expected ",
             fixed + min_slots, (min_slots == max_slots ? "" : " to " + std::to_string(fixed + max_slots)),
             " inputs, got ", in.size());
    expect_f32(in[0], "var");
    expect_like(in[1], in[0], "grad");
    expect_scalar(in[2], "lr");
    size_t slots = in.size() - fixed;
    for (size_t i = 0; i < slots; ++i) expect_like(in[3 + i], in[0], "slot");
    for (size_t i = 0; i < trailing_scalars; ++i) expect_scalar(in[3 + slots + i], "t");
    return Types{};
  };
}

}  // namespace

LOCKSTEP_REGISTER(optimizer_ops) {
  // sgd_update(var, grad, lr[, momentum_slot]){momentum, nesterov, weight_decay}
  add_op({.name = "sgd_update", .infer = update_infer(0, 1, 0), .side_effects = true});
  // adam_update(var, grad, lr, m, v, t){beta_1, beta_2, epsilon, weight_decay}
  add_op({.name = "adam_update", .infer = update_infer(2, 2, 1), .side_effects = true});
  // rmsprop_update(var, grad, lr, ms[, mom]){rho, momentum, epsilon, weight_decay}
  add_op({.name = "rmsprop_update", .infer = update_infer(1, 2, 0), .side_effects = true});
  // lr_schedule(iterations){kind, ...} -> lr (scalar f32).
  add_op({.name = "lr_schedule", .infer = [](const Node& n, const Types& in) {
            expect_inputs(in, 1);
            expect_scalar(in[0], "iterations");
            LS_CHECK(n.attrs.has("kind"), "missing schedule kind");
            return Types{f32(Shape{})};
          }});
}

}  // namespace lockstep::ops
