// Elementwise op declarations: broadcasting binaries, unary math, activations and their grads.
#include "ops/internal/op_util.h"

namespace lockstep::ops {

namespace {

using Types = std::vector<TensorType>;
using Values = std::vector<Value>;
constexpr const char* kGroup = "elementwise";

Types unary_infer(const Node&, const Types& in) {
  expect_inputs(in, 1);
  expect_f32(in[0], "x");
  return {f32(in[0].shape)};
}

Types binary_infer(const Node&, const Types& in) {
  expect_inputs(in, 2);
  expect_f32(in[0], "a");
  expect_f32(in[1], "b");
  return {f32(broadcast_shapes(in[0].shape, in[1].shape))};
}

// (dy, v) -> dx, same shapes.
Types grad_pair_infer(const Node&, const Types& in) {
  expect_inputs(in, 2);
  expect_f32(in[0], "dy");
  expect_f32(in[1], "x");
  LS_CHECK(in[0].shape == in[1].shape, "dy ", in[0].shape.str(), " and x ", in[1].shape.str(),
           " must have the same shape");
  return {f32(in[0].shape)};
}

// (dy, a, b) -> (da, db) at dy's (the broadcast) shape.
Types minmax_grad_infer(const Node&, const Types& in) {
  expect_inputs(in, 3);
  Shape s = broadcast_shapes(in[1].shape, in[2].shape);
  LS_CHECK(s == in[0].shape, "dy ", in[0].shape.str(), " does not match broadcast shape ", s.str());
  return {f32(s), f32(s)};
}

Value out0(const Node& n) { return Value{n.id, 0}; }
Value scaled(GradBuilder& b, Value v, double s) {
  return b.add(op::scale_shift, {v}, Attrs{{"scale", s}, {"shift", 0.0}});
}
Value sum_to_input(GradBuilder& b, const Node& n, int i, Value g) {
  return b.sum_to(g, b.type(n.inputs[i]).shape);
}

// A simple op: its name, what it computes, its gradient, and its facts beyond those every
// elementwise op has (bf16, pointwise rows).
struct MathOp {
  OpId name;
  const char* doc;
  GradFn grad;
  OnnxLowering onnx;
  bool layout_agnostic = true;
  uint32_t fusion = kFuseNone;
  std::vector<std::string> keras_activations = {};
};

// add/sub/mul/div's one attribute, set by the cpu layout pass only.
const std::vector<AttrDecl> kBinaryLayout = {
    {"layout", str, "nhwc",
     "\"nChw16c\" where the cpu backend's layout pass keeps the [N, H, W, C] operand and y "
     "blocked and the other operand is one [1, 1, C] row per image (squeeze-and-excitation's "
     "scale)"}};

void register_binaries() {
  const MathOp binaries[] = {
      {op::add,
       "a + b",
       [](GradBuilder& b, const Node& n, const Values& dy) {
         return Values{sum_to_input(b, n, 0, dy[0]), sum_to_input(b, n, 1, dy[0])};
       },
       {.op = "Add"},
       true,
       kFuseResidual},
      {op::sub,
       "a - b",
       [](GradBuilder& b, const Node& n, const Values& dy) {
         return Values{sum_to_input(b, n, 0, dy[0]),
                       sum_to_input(b, n, 1, b.add(op::neg, {dy[0]}))};
       },
       {.op = "Sub"}},
      {op::mul,
       "a * b",
       [](GradBuilder& b, const Node& n, const Values& dy) {
         return Values{sum_to_input(b, n, 0, b.add(op::mul, {dy[0], n.inputs[1]})),
                       sum_to_input(b, n, 1, b.add(op::mul, {dy[0], n.inputs[0]}))};
       },
       {.op = "Mul"}},
      // y = a / b: da = dy / b, db = -dy * y / b.
      {op::div,
       "a / b",
       [](GradBuilder& b, const Node& n, const Values& dy) {
         Value da = b.add(op::div, {dy[0], n.inputs[1]});
         Value db = b.add(op::neg, {b.add(op::mul, {da, out0(n)})});
         return Values{sum_to_input(b, n, 0, da), sum_to_input(b, n, 1, db)};
       },
       {.op = "Div"}},
  };
  for (const MathOp& op : binaries)
    add_op(kGroup, {.name = op.name,
                    .signature = "(a, b) -> y",
                    .doc = std::string(op.doc) + ", elementwise with numpy broadcasting.",
                    .attrs = kBinaryLayout,
                    .infer = binary_infer,
                    .grad = op.grad,
                    .bf16 = true,
                    .layout_agnostic = true,
                    .rows = RowRule::pointwise,
                    .fusion = op.fusion,
                    .onnx = op.onnx});
  const std::pair<OpId, OpId> minmax[] = {{op::maximum, op::maximum_grad},
                                          {op::minimum, op::minimum_grad}};
  for (const auto& pair : minmax) {
    const OpId fwd = pair.first, grad_op = pair.second;  // (clang: no capture of bindings)
    const std::string op = fwd;
    add_op(kGroup, {.name = fwd,
                    .signature = "(a, b) -> y",
                    .doc = "The elementwise " + op + " of a and b, with numpy broadcasting.",
                    .infer = binary_infer,
                    .grad =
                        [grad_op](GradBuilder& b, const Node& n, const Values& dy) {
                          auto g = b.add_multi(grad_op, {dy[0], n.inputs[0], n.inputs[1]});
                          return Values{sum_to_input(b, n, 0, g[0]), sum_to_input(b, n, 1, g[1])};
                        },
                    .bf16 = true,
                    .layout_agnostic = true,
                    .rows = RowRule::pointwise,
                    .onnx = {.op = fwd == op::maximum ? "Max" : "Min"}});
    add_op(kGroup, {.name = grad_op,
                    .signature = "(dy, a, b) -> (da, db)",
                    .doc = "Gradient of " + op +
                           ": dy goes to the selected input, ties split it "
                           "evenly; both at the broadcast shape.",
                    .infer = minmax_grad_infer,
                    .reference_only = "only Maximum/Minimum layers' backward pass uses it, "
                                      "with general broadcasting",
                    .bf16 = true,
                    .onnx = {.none = kOnnxGradient}});
  }
}

void register_unary_math() {
  const MathOp unaries[] = {
      {op::neg,
       "-x",
       [](GradBuilder& b, const Node&, const Values& dy) {
         return Values{b.add(op::neg, {dy[0]})};
       },
       {.op = "Neg"}},
      {op::exp,
       "e^x",
       [](GradBuilder& b, const Node& n, const Values& dy) {
         return Values{b.add(op::mul, {dy[0], out0(n)})};
       },
       {.op = "Exp"},
       false,
       kFuseNone,
       {"exponential"}},
      {op::log,
       "The natural logarithm of x",
       [](GradBuilder& b, const Node& n, const Values& dy) {
         return Values{b.add(op::div, {dy[0], n.inputs[0]})};
       },
       {.op = "Log"},
       false},
      {op::sqrt,
       "The square root of x",
       [](GradBuilder& b, const Node& n, const Values& dy) {
         return Values{b.add(op::div, {dy[0], scaled(b, out0(n), 2.0)})};
       },
       {.op = "Sqrt"},
       false},
      {op::square,
       "x * x",
       [](GradBuilder& b, const Node& n, const Values& dy) {
         return Values{b.add(op::mul, {dy[0], scaled(b, n.inputs[0], 2.0)})};
       },
       {.recipe = "x*x"}},
      {op::abs,
       "|x|",
       [](GradBuilder& b, const Node& n, const Values& dy) {
         return Values{b.add(op::abs_grad, {dy[0], n.inputs[0]})};
       },
       {.op = "Abs"}},
  };
  for (const MathOp& op : unaries)
    add_op(kGroup, {.name = op.name,
                    .signature = "(x) -> y",
                    .doc = std::string(op.doc) + ", elementwise.",
                    .infer = unary_infer,
                    .grad = op.grad,
                    .bf16 = true,
                    .layout_agnostic = op.layout_agnostic,
                    .rows = RowRule::pointwise,
                    .keras_activations = op.keras_activations,
                    .onnx = op.onnx});
  add_op(kGroup, {.name = op::abs_grad,
                  .signature = "(dy, x) -> dx",
                  .doc = "Gradient of abs: dy * sign(x).",
                  .infer = grad_pair_infer,
                  .bf16 = true,
                  .layout_agnostic = true,
                  .onnx = {.none = kOnnxGradient}});
  add_op(kGroup,
         {.name = op::scale_shift,
          .signature = "(x) -> y",
          .doc = "x * scale + shift, elementwise (Rescaling, and gradient scaling).",
          .attrs = {{"scale", f64, 1.0, "multiplier"}, {"shift", f64, 0.0, "offset"}},
          .infer = unary_infer,
          .grad = [](GradBuilder& b, const Node& n,
                     const Values& dy) { return Values{scaled(b, dy[0], attr_f(n, "scale"))}; },
          .bf16 = true,
          .layout_agnostic = true,
          .rows = RowRule::pointwise,
          .onnx = {.recipe = "x*scale+shift"}});
}

struct Activation {
  OpId name;
  OpId grad_name;
  const char* doc;
  bool grad_of_output;  // the gradient op takes (dy, y), else (dy, x)
  std::vector<AttrDecl> attrs = {};
  std::vector<std::string> keras_activations = {};  // OpDef::keras_activations
  OnnxLowering onnx = {};
  bool layout_agnostic = true;  // both ops (softplus's kernels are not)
  // Set: a producer may apply it (kFuseActivation, OpDef::fused_as); with grad_of_output, its
  // gradient op is kFuseActivationGrad (a gradient kernel may mask its own dy by it) and a
  // producer that applies it keeps a gradient (kFuseGradFromOutput).
  std::optional<FusedActivation> fused = std::nullopt;
};

// An activation and its gradient op, which takes the activation's attributes too.
void add_activation(const Activation& act) {
  const OpId grad_op = act.grad_name;
  const bool uses_output = act.grad_of_output;
  const FusedActivation fused_as = act.fused.value_or(FusedActivation::linear);
  uint32_t fusion = kFuseNone, grad_fusion = kFuseNone;
  if (act.fused) fusion = kFuseActivation | (uses_output ? kFuseGradFromOutput : kFuseNone);
  if (act.fused && uses_output) grad_fusion = kFuseActivationGrad;
  add_op(kGroup, {.name = act.name,
                  .signature = "(x) -> y",
                  .doc = std::string(act.doc) + ", elementwise.",
                  .attrs = act.attrs,
                  .infer = unary_infer,
                  .grad =
                      [grad_op, uses_output](GradBuilder& b, const Node& n, const Values& dy) {
                        Value v = uses_output ? out0(n) : n.inputs[0];
                        return Values{b.add(grad_op, {dy[0], v}, n.attrs)};
                      },
                  .bf16 = true,
                  .layout_agnostic = act.layout_agnostic,
                  .rows = RowRule::pointwise,
                  .fusion = fusion,
                  .fused_as = fused_as,
                  .keras_activations = act.keras_activations,
                  .onnx = act.onnx});
  add_op(kGroup, {.name = grad_op,
                  .signature = uses_output ? "(dy, y) -> dx" : "(dy, x) -> dx",
                  .doc = std::string("Gradient of ") + act.name + ", from its " +
                         (uses_output ? "output y." : "input x."),
                  .attrs = act.attrs,
                  .infer = grad_pair_infer,
                  .bf16 = true,
                  .layout_agnostic = act.layout_agnostic,
                  .fusion = grad_fusion,
                  .fused_as = grad_fusion ? fused_as : FusedActivation::linear,
                  .onnx = {.none = kOnnxGradient}});
}

void register_activations() {
  using FA = FusedActivation;
  const Activation activations[] = {
      {.name = op::relu,
       .grad_name = op::relu_grad,
       .doc = "max(x, 0)",
       .grad_of_output = true,
       .keras_activations = {"relu"},
       .onnx = {.op = "Relu"},
       .fused = FA::relu},
      {.name = op::relu6,
       .grad_name = op::relu6_grad,
       .doc = "min(max(x, 0), 6)",
       .grad_of_output = true,
       .keras_activations = {"relu6"},
       .onnx = {.recipe = "clip:0:6"},
       .fused = FA::relu6},
      {.name = op::sigmoid,
       .grad_name = op::sigmoid_grad,
       .doc = "1 / (1 + e^-x)",
       .grad_of_output = true,
       .keras_activations = {"sigmoid"},
       .onnx = {.op = "Sigmoid"},
       .fused = FA::sigmoid},
      {.name = op::tanh,
       .grad_name = op::tanh_grad,
       .doc = "The hyperbolic tangent of x",
       .grad_of_output = true,
       .keras_activations = {"tanh"},
       .onnx = {.op = "Tanh"}},
      {.name = op::gelu,
       .grad_name = op::gelu_grad,
       .doc = "x * Phi(x), Phi the standard normal CDF (Keras gelu)",
       .grad_of_output = false,
       .attrs = {{"approximate", boolean, false, "use the tanh approximation"}},
       .keras_activations = {"gelu"},
       .onnx = {.recipe = "erf_gelu"},
       .fused = FA::gelu},
      {.name = op::swish,
       .grad_name = op::swish_grad,
       .doc = "x * sigmoid(x) (silu)",
       .grad_of_output = false,
       .keras_activations = {"swish", "silu"},
       .onnx = {.recipe = "x*sigmoid(x)"},
       .fused = FA::swish},
      {.name = op::leaky_relu,
       .grad_name = op::leaky_relu_grad,
       .doc = "x for x > 0, else alpha * x",
       .grad_of_output = false,
       .attrs = {{"alpha", f64, 0.2, "slope for x <= 0 (Keras negative_slope)"}},
       .keras_activations = {"leaky_relu"},
       .onnx = {.op = "LeakyRelu", .attrs = {{"alpha", 0.2}}}},
      {.name = op::elu,
       .grad_name = op::elu_grad,
       .doc = "x for x > 0, else alpha * (e^x - 1)",
       .grad_of_output = false,
       .attrs = {{"alpha", f64, 1.0, "the negative saturation value is -alpha (Keras ELU alpha)"}},
       .keras_activations = {"elu"},
       .onnx = {.op = "Elu", .attrs = {{"alpha", 1.0}}}},
      {.name = op::softplus,
       .grad_name = op::softplus_grad,
       .doc = "log(1 + e^x)",
       .grad_of_output = false,
       .keras_activations = {"softplus"},
       .onnx = {.op = "Softplus"},
       .layout_agnostic = false},
  };
  for (const Activation& act : activations) add_activation(act);
}

}  // namespace

LOCKSTEP_REGISTER(elementwise_ops) {
  register_binaries();
  register_unary_math();
  register_activations();
}

}  // namespace lockstep::ops
