// Optimizer op declarations: in-place variable updates (side effects) and lr_schedule.
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
// With count = n (the compiler's fusion of n updates): (var_1..n, grad_1..n, lr, then each slot
// as slot_1..n[, t]); var_i may differ in shape, grad_i and slot_i follow var_i.
std::function<Types(const Node&, const Types&)> update_infer(size_t min_slots, size_t max_slots,
                                                             size_t trailing_scalars,
                                                             bool fusable) {
  return [=](const Node& nd, const Types& in) {
    const int64_t count = fusable ? attr_i(nd, "count") : 1;
    LS_CHECK(count >= 1, "count must be >= 1, got ", count);
    const size_t n = size_t(count);
    size_t fixed = 2 * n + 1 + trailing_scalars;
    LS_CHECK(in.size() >= fixed + n * min_slots && in.size() <= fixed + n * max_slots &&
                 (in.size() - fixed) % n == 0,
             "expected ", fixed + n * min_slots,
             (min_slots == max_slots ? "" : " to " + std::to_string(fixed + n * max_slots)),
             " inputs, got ", in.size());
    size_t slots = (in.size() - fixed) / n;
    for (size_t v = 0; v < n; ++v) {
      expect_f32(in[v], "var");
      expect_like(in[n + v], in[v], "grad");
      for (size_t i = 0; i < slots; ++i) expect_like(in[2 * n + 1 + i * n + v], in[v], "slot");
    }
    expect_scalar(in[2 * n], "lr");
    for (size_t i = 0; i < trailing_scalars; ++i)
      expect_scalar(in[fixed - trailing_scalars + n * slots + i], "t");
    return Types{};
  };
}

constexpr const char* kGroup = "optimizer";
const AttrDecl kWeightDecay{"weight_decay", f64, 0.0,
                            "decoupled decay: var -= var * weight_decay * lr before the update"};
const AttrDecl kEpsilon{"epsilon", f64, 1e-7, "added to the denominator (Keras backend epsilon)"};
const AttrDecl kCount{"count", i64, 1,
                      "variables updated by this node (the compiler fuses the updates of one "
                      "optimizer into one pass); inputs then come grouped per kind"};

void register_updates() {
  add_op(kGroup, {.name = op::sgd_update,
                  .signature = "(var, grad, lr[][, momentum_slot]) -> ()",
                  .doc = "SGD step in place (Keras 3): with momentum, m = momentum * m - lr * g; "
                         "var += m (or the Nesterov form).",
                  .attrs = {{"momentum", f64, 0.0, "velocity decay; needs the slot input"},
                            {"nesterov", boolean, false, "Nesterov momentum"},
                            kWeightDecay,
                            kCount},
                  .infer = update_infer(0, 1, 0, true),
                  .side_effects = true,
                  .fusion = kFuseUpdate,
                  .onnx = {.none = kOnnxTrainState}});
  add_op(kGroup, {.name = op::adam_update,
                  .signature = "(var, grad, lr[], m, v, t[]) -> ()",
                  .doc = "Adam step in place (Keras 3; AdamW with weight_decay); t is the "
                         "1-based step count.",
                  .attrs = {{"beta_1", f64, 0.9, "decay of the first moment"},
                            {"beta_2", f64, 0.999, "decay of the second moment"},
                            kEpsilon,
                            kWeightDecay,
                            kCount},
                  .infer = update_infer(2, 2, 1, true),
                  .side_effects = true,
                  .fusion = kFuseUpdate | kFuseUpdateStep,
                  .onnx = {.none = kOnnxTrainState}});
  add_op(kGroup, {.name = op::rmsprop_update,
                  .signature = "(var, grad, lr[], ms[, mom]) -> ()",
                  .doc = "RMSprop step in place (Keras 3, not centered).",
                  .attrs = {{"rho", f64, 0.9, "decay of the mean square"},
                            {"momentum", f64, 0.0, "momentum; > 0 needs the mom input"},
                            kEpsilon,
                            kWeightDecay},
                  .infer = update_infer(1, 2, 0, false),
                  .side_effects = true,
                  .onnx = {.none = kOnnxTrainState}});
}

void register_lr_schedule() {
  add_op(kGroup,
         {.name = op::lr_schedule,
          .signature = "(iterations[]) -> lr[]",
          .doc = "The learning rate of a Keras schedule at step `iterations` "
                 "(lockstep/optimizers/schedule.h builds the attributes).",
          .attrs = {{"kind", str, required,
                     "constant, exponential_decay, cosine_decay, piecewise_constant_decay, "
                     "polynomial_decay, inverse_time_decay or cosine_decay_restarts"},
                    {"value", f64, optional, "constant: the rate"},
                    {"initial_learning_rate", f64, optional, "the decays' starting rate"},
                    {"decay_steps", i64, optional, "the decays' period"},
                    {"decay_rate", f64, optional,
                     "exponential_decay: factor per period; inverse_time_decay: 1 + rate * p"},
                    {"staircase", boolean, false,
                     "exponential_decay, inverse_time_decay: whole periods only"},
                    {"alpha", f64, 0.0,
                     "cosine_decay, cosine_decay_restarts: the final fraction of the rate"},
                    {"warmup_target", f64, -1.0,
                     "cosine_decay: the rate after warmup; "
                     "< 0 = no warmup"},
                    {"warmup_steps", i64, 0, "cosine_decay: linear warmup steps"},
                    {"boundaries", i64_list, optional, "piecewise: step boundaries"},
                    {"values", f64_list, optional, "piecewise: one more rate than boundaries"},
                    {"end_learning_rate", f64, 0.0001, "polynomial_decay: the final rate"},
                    {"power", f64, 1.0, "polynomial_decay: the polynomial's power"},
                    {"cycle", boolean, false, "polynomial_decay: restart after decay_steps"},
                    {"first_decay_steps", i64, optional, "cosine_decay_restarts: the first period"},
                    {"t_mul", f64, 2.0, "cosine_decay_restarts: period growth per restart"},
                    {"m_mul", f64, 1.0, "cosine_decay_restarts: rate factor per restart"}},
          .infer =
              [](const Node& n, const Types& in) {
                expect_inputs(in, 1);
                expect_scalar(in[0], "iterations");
                attr_s(n, "kind");
                return Types{f32(Shape{})};
              },
          .onnx = {.none = kOnnxTrainState}});
}

}  // namespace

LOCKSTEP_REGISTER(optimizer_ops) {
  register_updates();
  register_lr_schedule();
}

}  // namespace lockstep::ops
