// Lowerings of the elementwise ops: broadcasting binaries, unary math, activations and their
// gradients (the formulas of src/ops/internal/kernel_math.h).
#include "backends/xla/lowering.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep::xla {

namespace {

using Values = std::vector<HloValue>;
using B = StablehloBuilder;

// (a, b) -> y with numpy broadcasting.
template <HloValue (B::*F)(const HloValue&, const HloValue&)>
Values binary(LoweringContext& cx, const Node& n) {
  auto [a, b] = cx.broadcast_pair(cx.in(n, 0), cx.in(n, 1));
  return {(cx.b.*F)(a, b)};
}

template <HloValue (B::*F)(const HloValue&)>
Values unary(LoweringContext& cx, const Node& n) {
  return {(cx.b.*F)(cx.in(n, 0))};
}

HloValue gt_zero(LoweringContext& cx, const HloValue& x) {
  return cx.b.compare(x, cx.full_like(x, 0.0), Compare::GT);
}

HloValue zeros(LoweringContext& cx, const HloValue& like) { return cx.full_like(like, 0.0); }

// x <= 0: false for NaN, so selecting 0 on it keeps NaN (relu and relu6 propagate NaN).
HloValue le_zero(LoweringContext& cx, const HloValue& x) {
  return cx.b.compare(x, cx.full_like(x, 0.0), Compare::LE);
}

// x * s + t, elementwise constants.
HloValue scale_shift(LoweringContext& cx, const HloValue& x, double s, double t) {
  return cx.b.add(cx.b.multiply(x, cx.full_like(x, s)), cx.full_like(x, t));
}

// sigmoid as the reference computes it (kernel_math.h): 1 / (1 + e^-x) for x >= 0, else
// e^x / (1 + e^x); stablehlo.logistic is the same function.
HloValue sigmoid(LoweringContext& cx, const HloValue& x) { return cx.b.logistic(x); }

// (dy, a, b) -> (da, db): dy to the selected input, ties split evenly.
Values minmax_grad(LoweringContext& cx, const Node& n, Compare pick_a) {
  HloValue dy = cx.in(n, 0);
  HloValue a = cx.broadcast_numpy(cx.in(n, 1), dy.type.dims);
  HloValue b = cx.broadcast_numpy(cx.in(n, 2), dy.type.dims);
  HloValue tie = cx.b.compare(a, b, Compare::EQ), first = cx.b.compare(a, b, pick_a);
  HloValue half = cx.b.multiply(dy, cx.full_like(dy, 0.5)), zero = zeros(cx, dy);
  return {cx.b.select(tie, half, cx.b.select(first, dy, zero)),
          cx.b.select(tie, half, cx.b.select(first, zero, dy))};
}

void register_binaries() {
  register_lowering(op::add, binary<&B::add>);
  register_lowering(op::sub, binary<&B::subtract>);
  register_lowering(op::mul, binary<&B::multiply>);
  register_lowering(op::div, binary<&B::divide>);
  // The reference's a > b ? a : b (NaN-free inputs: the same as stablehlo.maximum).
  register_lowering(op::maximum, [](LoweringContext& cx, const Node& n) {
    auto [a, b] = cx.broadcast_pair(cx.in(n, 0), cx.in(n, 1));
    return Values{cx.b.select(cx.b.compare(a, b, Compare::GT), a, b)};
  });
  register_lowering(op::minimum, [](LoweringContext& cx, const Node& n) {
    auto [a, b] = cx.broadcast_pair(cx.in(n, 0), cx.in(n, 1));
    return Values{cx.b.select(cx.b.compare(a, b, Compare::LT), a, b)};
  });
  register_lowering(op::maximum_grad, [](LoweringContext& cx, const Node& n) {
    return minmax_grad(cx, n, Compare::GT);
  });
  register_lowering(op::minimum_grad, [](LoweringContext& cx, const Node& n) {
    return minmax_grad(cx, n, Compare::LT);
  });
}

void register_unary_math() {
  register_lowering(op::neg, unary<&B::negate>);
  register_lowering(op::exp, unary<&B::exponential>);
  register_lowering(op::log, unary<&B::log>);
  register_lowering(op::sqrt, unary<&B::sqrt>);
  register_lowering(op::abs, unary<&B::abs>);
  register_lowering(op::tanh, unary<&B::tanh>);
  register_lowering(op::square, [](LoweringContext& cx, const Node& n) {
    HloValue x = cx.in(n, 0);
    return Values{cx.b.multiply(x, x)};
  });
  register_lowering(op::scale_shift, [](LoweringContext& cx, const Node& n) {
    return Values{scale_shift(cx, cx.in(n, 0), attr_f(n, "scale"), attr_f(n, "shift"))};
  });
  // dy * sign(x): x > 0 ? dy : (x < 0 ? -dy : 0).
  register_lowering(op::abs_grad, [](LoweringContext& cx, const Node& n) {
    return Values{cx.b.multiply(cx.in(n, 0), cx.b.sign(cx.in(n, 1)))};
  });
}

void register_relus() {
  register_lowering(op::relu_grad, [](LoweringContext& cx, const Node& n) {
    HloValue dy = cx.in(n, 0), y = cx.in(n, 1);
    return Values{cx.b.select(gt_zero(cx, y), dy, zeros(cx, dy))};
  });
  register_lowering(op::relu6_grad, [](LoweringContext& cx, const Node& n) {
    HloValue dy = cx.in(n, 0), y = cx.in(n, 1);
    HloValue inside = cx.b.compare(y, cx.full_like(y, 6.0), Compare::LT);
    HloValue pass = cx.b.select(gt_zero(cx, y), inside, cx.full(inside.type, 0.0));
    return Values{cx.b.select(pass, dy, zeros(cx, dy))};
  });
  register_lowering(op::leaky_relu, [](LoweringContext& cx, const Node& n) {
    HloValue x = cx.in(n, 0);
    HloValue neg = cx.b.multiply(cx.full_like(x, attr_f(n, "alpha")), x);
    return Values{cx.b.select(gt_zero(cx, x), x, neg)};
  });
  register_lowering(op::leaky_relu_grad, [](LoweringContext& cx, const Node& n) {
    HloValue dy = cx.in(n, 0), x = cx.in(n, 1);
    HloValue neg = cx.b.multiply(cx.full_like(dy, attr_f(n, "alpha")), dy);
    return Values{cx.b.select(gt_zero(cx, x), dy, neg)};
  });
  // x > 0 ? x : alpha * expm1(x); the gradient from the input: x > 0 ? dy : dy * alpha * e^x.
  register_lowering(op::elu, [](LoweringContext& cx, const Node& n) {
    HloValue x = cx.in(n, 0);
    HloValue neg =
        cx.b.multiply(cx.full_like(x, attr_f(n, "alpha")), cx.b.exponential_minus_one(x));
    return Values{cx.b.select(gt_zero(cx, x), x, neg)};
  });
  register_lowering(op::elu_grad, [](LoweringContext& cx, const Node& n) {
    HloValue dy = cx.in(n, 0), x = cx.in(n, 1);
    HloValue neg =
        cx.b.multiply(cx.b.multiply(cx.full_like(dy, attr_f(n, "alpha")), dy), cx.b.exponential(x));
    return Values{cx.b.select(gt_zero(cx, x), dy, neg)};
  });
}

void register_smooth_activations() {
  register_lowering(op::sigmoid_grad, [](LoweringContext& cx, const Node& n) {  // dy * y * (1 - y)
    HloValue dy = cx.in(n, 0), y = cx.in(n, 1);
    return Values{cx.b.multiply(cx.b.multiply(dy, y), cx.b.subtract(cx.full_like(y, 1.0), y))};
  });
  register_lowering(op::tanh_grad, [](LoweringContext& cx, const Node& n) {  // dy * (1 - y * y)
    HloValue dy = cx.in(n, 0), y = cx.in(n, 1);
    return Values{cx.b.multiply(dy, cx.b.subtract(cx.full_like(y, 1.0), cx.b.multiply(y, y)))};
  });
  register_lowering(
      op::swish_grad, [](LoweringContext& cx, const Node& n) {  // dy * (s + x s (1 - s))
        HloValue dy = cx.in(n, 0), x = cx.in(n, 1), s = sigmoid(cx, x);
        HloValue xs1 = cx.b.multiply(cx.b.multiply(x, s), cx.b.subtract(cx.full_like(s, 1.0), s));
        return Values{cx.b.multiply(dy, cx.b.add(s, xs1))};
      });
  register_lowering(op::softplus,
                    [](LoweringContext& cx, const Node& n) {  // log1p(e^-|x|) + max(x, 0)
                      HloValue x = cx.in(n, 0);
                      HloValue l = cx.b.log_plus_one(cx.b.exponential(cx.b.negate(cx.b.abs(x))));
                      return Values{cx.b.add(l, cx.b.select(gt_zero(cx, x), x, zeros(cx, x)))};
                    });
  register_lowering(op::softplus_grad, [](LoweringContext& cx, const Node& n) {
    return Values{cx.b.multiply(cx.in(n, 0), sigmoid(cx, cx.in(n, 1)))};
  });
}

// erf(x) in float32: the rational approximation XLA's own erf uses (ErfImpl32), x clamped to
// [-4, 4] where erf is 1 to float precision; StableHLO has no erf op.
HloValue erf(LoweringContext& cx, const HloValue& x_in) {
  static const double alpha[] = {
      -2.72614225801306e-10, 2.77068142495902e-08,  -2.10102402082508e-06, -5.69250639462346e-05,
      -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02};
  static const double beta[] = {-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
                                -7.37332916720468e-03, -1.42647390514189e-02};
  HloValue x = cx.b.minimum(cx.b.maximum(x_in, cx.full_like(x_in, -4.0)), cx.full_like(x_in, 4.0));
  HloValue x2 = cx.b.multiply(x, x);
  auto horner = [&](const double* c, int k) {
    HloValue r = cx.full_like(x2, c[0]);
    for (int j = 1; j < k; ++j) r = cx.b.add(cx.b.multiply(r, x2), cx.full_like(x2, c[j]));
    return r;
  };
  return cx.b.divide(cx.b.multiply(x, horner(alpha, 7)), horner(beta, 5));
}

constexpr double kSqrtHalf = 0.70710678118654752, kInvSqrt2Pi = 0.39894228040143268;
constexpr double kGeluC = 0.79788456080286536, kGeluA = 0.044715;

// tanh(c (x + a x^3)), the approximate gelu's inner term.
HloValue gelu_tanh(LoweringContext& cx, const HloValue& x) {
  HloValue x3 = cx.b.multiply(cx.b.multiply(x, x), x);
  HloValue inner = cx.b.add(x, cx.b.multiply(cx.full_like(x, kGeluA), x3));
  return cx.b.tanh(cx.b.multiply(cx.full_like(x, kGeluC), inner));
}

// x Phi(x): 0.5 x (1 + erf(x / sqrt 2)), or 0.5 x (1 + tanh(c (x + a x^3))) when approximate.
HloValue gelu(LoweringContext& cx, const HloValue& x, bool approximate) {
  HloValue one = cx.full_like(x, 1.0);
  HloValue t =
      approximate ? gelu_tanh(cx, x) : erf(cx, cx.b.multiply(x, cx.full_like(x, kSqrtHalf)));
  return cx.b.multiply(cx.b.multiply(cx.full_like(x, 0.5), x), cx.b.add(one, t));
}

Values gelu_grad(LoweringContext& cx, const Node& n) {
  HloValue dy = cx.in(n, 0), x = cx.in(n, 1), one = cx.full_like(x, 1.0),
           half = cx.full_like(x, 0.5);
  HloValue d;
  if (!attr_b(n, "approximate")) {  // 0.5 (1 + erf(x / sqrt 2)) + x e^(-x^2 / 2) / sqrt(2 pi)
    HloValue cdf =
        cx.b.multiply(half, cx.b.add(one, erf(cx, cx.b.multiply(x, cx.full_like(x, kSqrtHalf)))));
    HloValue pdf = cx.b.exponential(cx.b.multiply(cx.full_like(x, -0.5), cx.b.multiply(x, x)));
    d = cx.b.add(cdf, cx.b.multiply(cx.b.multiply(x, cx.full_like(x, kInvSqrt2Pi)), pdf));
  } else {  // 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2)
    HloValue t = gelu_tanh(cx, x);
    HloValue slope = cx.b.add(one, cx.b.multiply(cx.full_like(x, 3 * kGeluA), cx.b.multiply(x, x)));
    HloValue sech2 = cx.b.subtract(one, cx.b.multiply(t, t));
    HloValue right = cx.b.multiply(cx.b.multiply(cx.b.multiply(half, x), sech2),
                                   cx.b.multiply(cx.full_like(x, kGeluC), slope));
    d = cx.b.add(cx.b.multiply(half, cx.b.add(one, t)), right);
  }
  return {cx.b.multiply(dy, d)};
}

}  // namespace

HloValue lower_fused_activation(LoweringContext& cx, FusedActivation a, const HloValue& x) {
  switch (a) {
    case FusedActivation::linear:
      return x;
    case FusedActivation::relu:  // x <= 0 ? 0 : x, so NaN passes through (as TensorFlow's relu)
      return cx.b.select(le_zero(cx, x), zeros(cx, x), x);
    case FusedActivation::relu6: {
      HloValue six = cx.full_like(x, 6.0);
      HloValue capped = cx.b.select(cx.b.compare(x, six, Compare::GE), six, x);  // NaN stays
      return cx.b.select(le_zero(cx, x), zeros(cx, x), capped);
    }
    case FusedActivation::sigmoid:
      return sigmoid(cx, x);
    case FusedActivation::swish:
      return cx.b.multiply(x, sigmoid(cx, x));
    case FusedActivation::gelu:
      return gelu(cx, x, false);
  }
  LS_FAIL("unknown fused activation");
}

LOCKSTEP_REGISTER(xla_elementwise_lowerings) {
  // The activations a producer can fuse are lowered as that producer lowers them.
  for (FusedActivation a : kAllFusedActivations)
    if (const OpDef* act = OpRegistry::get().fused_activation_op(a))
      if (act->name != op::gelu)  // gelu's approximate form is its own
        register_lowering(act->name, [a](LoweringContext& cx, const Node& n) {
          return Values{lower_fused_activation(cx, a, cx.in(n, 0))};
        });
  register_lowering(op::gelu, [](LoweringContext& cx, const Node& n) {
    return Values{gelu(cx, cx.in(n, 0), attr_b(n, "approximate"))};
  });
  register_lowering(op::gelu_grad, gelu_grad);
  register_binaries();
  register_unary_math();
  register_relus();
  register_smooth_activations();
}

}  // namespace lockstep::xla
