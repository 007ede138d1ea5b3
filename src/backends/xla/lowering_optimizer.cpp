// Lowerings of the optimizer updates (Keras 3 formulas, as src/backends/reference/
// optimizer_kernels.cpp): each computes the variable's (and its slots') new values, which
// lower_graph returns aliased to the variables' arguments, so a donated step updates in place.
// A fused update (count = n) takes var_1..n, grad_1..n, lr, then each slot as slot_1..n[, t].
// With replicas, the gradients are averaged over them first (LoweringContext::gradient).
#include "backends/xla/lowering.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep::xla {

namespace {

using Values = std::vector<HloValue>;

HloValue times(LoweringContext& cx, const HloValue& x, const HloValue& scalar) {
  return cx.b.multiply(x, cx.b.broadcast_in_dim(scalar, x.type.dims, {}));
}

HloValue times(LoweringContext& cx, const HloValue& x, double s) {
  return cx.b.multiply(x, cx.full_like(x, s));
}

// A scalar input (lr, t) as a rank-0 f32.
HloValue scalar_in(LoweringContext& cx, const Node& n, int i) {
  return cx.b.reshape(cx.in(n, i), {});
}

// Decoupled weight decay, before the update: w -= w * (wd * lr).
HloValue decay(LoweringContext& cx, const HloValue& w, const HloValue& lr, double wd) {
  if (wd == 0) return w;
  HloValue k = cx.b.multiply(cx.b.scalar(ElemType::f32, wd), lr);
  return cx.b.subtract(w, times(cx, w, k));
}

Values sgd(LoweringContext& cx, const Node& n) {
  const int count = int(attr_i(n, "count"));
  const double momentum = attr_f(n, "momentum"), wd = attr_f(n, "weight_decay");
  const bool nesterov = attr_b(n, "nesterov");
  const bool has_slot = cx.num_inputs(n) > 2 * count + 1;
  HloValue lr = scalar_in(cx, n, 2 * count);
  for (int v = 0; v < count; ++v) {
    HloValue w = decay(cx, cx.variable_value(n, v), lr, wd);
    HloValue g = cx.b.reshape(cx.gradient(n, count + v), w.type.dims);
    HloValue step = cx.b.negate(times(cx, g, lr));  // -g * lr
    if (!has_slot) {
      cx.update_variable(n, v, cx.b.subtract(w, times(cx, g, lr)));
      continue;
    }
    const int slot = 2 * count + 1 + v;
    HloValue m = cx.b.add(step, times(cx, cx.variable_value(n, slot), momentum));
    cx.update_variable(n, slot, m);
    HloValue inc = nesterov ? cx.b.add(step, times(cx, m, momentum)) : m;
    cx.update_variable(n, v, cx.b.add(w, inc));
  }
  return {};
}

// alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t); m += (g - m)(1 - b1); v += (g^2 - v)(1 - b2);
// w -= m alpha / (sqrt(v) + eps).
Values adam(LoweringContext& cx, const Node& n) {
  const int count = int(attr_i(n, "count"));
  const double b1 = attr_f(n, "beta_1"), b2 = attr_f(n, "beta_2");
  const double eps = attr_f(n, "epsilon"), wd = attr_f(n, "weight_decay");
  HloValue lr = scalar_in(cx, n, 2 * count), t = scalar_in(cx, n, 4 * count + 1);
  auto one_minus_pow = [&](double beta) {
    return cx.b.subtract(cx.b.scalar(ElemType::f32, 1.0),
                         cx.b.power(cx.b.scalar(ElemType::f32, beta), t));
  };
  HloValue alpha = cx.b.divide(cx.b.multiply(lr, cx.b.sqrt(one_minus_pow(b2))), one_minus_pow(b1));
  for (int k = 0; k < count; ++k) {
    HloValue w = decay(cx, cx.variable_value(n, k), lr, wd);
    HloValue g = cx.b.reshape(cx.gradient(n, count + k), w.type.dims);
    const int mi = 2 * count + 1 + k, vi = 3 * count + 1 + k;
    HloValue m = cx.variable_value(n, mi), v = cx.variable_value(n, vi);
    m = cx.b.add(m, times(cx, cx.b.subtract(g, m), 1.0 - b1));
    v = cx.b.add(v, times(cx, cx.b.subtract(cx.b.multiply(g, g), v), 1.0 - b2));
    HloValue den = cx.b.add(cx.b.sqrt(v), cx.full_like(v, eps));
    cx.update_variable(n, mi, m);
    cx.update_variable(n, vi, v);
    cx.update_variable(n, k, cx.b.subtract(w, cx.b.divide(times(cx, m, alpha), den)));
  }
  return {};
}

// ms = rho ms + (1 - rho) g^2; inc = lr g / sqrt(ms + eps); with momentum mom = momentum mom +
// inc, w -= mom; else w -= inc.
Values rmsprop(LoweringContext& cx, const Node& n) {
  const double rho = attr_f(n, "rho"), momentum = attr_f(n, "momentum");
  const double eps = attr_f(n, "epsilon"), wd = attr_f(n, "weight_decay");
  HloValue lr = scalar_in(cx, n, 2);
  HloValue w = decay(cx, cx.variable_value(n, 0), lr, wd);
  HloValue g = cx.b.reshape(cx.gradient(n, 1), w.type.dims);
  HloValue ms =
      cx.b.add(times(cx, cx.variable_value(n, 3), rho), times(cx, cx.b.multiply(g, g), 1.0 - rho));
  cx.update_variable(n, 3, ms);
  HloValue inc = cx.b.divide(times(cx, g, lr), cx.b.sqrt(cx.b.add(ms, cx.full_like(ms, eps))));
  if (cx.num_inputs(n) > 4 && momentum > 0) {
    HloValue mom = cx.b.add(times(cx, cx.variable_value(n, 4), momentum), inc);
    cx.update_variable(n, 4, mom);
    inc = mom;
  }
  cx.update_variable(n, 0, cx.b.subtract(w, inc));
  return {};
}

}  // namespace

LOCKSTEP_REGISTER(xla_optimizer_lowerings) {
  register_lowering(op::sgd_update, sgd);
  register_lowering(op::adam_update, adam);
  register_lowering(op::rmsprop_update, rmsprop);
}

}  // namespace lockstep::xla
