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
  return b.add("scale_shift", {v}, Attrs{{"scale", s}, {"shift", 0.0}});
}
Value sum_to_input(GradBuilder& b, const Node& n, int i, Value g) {
  return b.sum_to(g, b.type(n.inputs[i]).shape);
}

// A simple op: its name, what it computes and its gradient.
struct MathOp {
  const char* name;
  const char* doc;
  GradFn grad;
};

void register_binaries() {
  const MathOp binaries[] = {
      {"add", "a + b",
       [](GradBuilder& b, const Node& n, const Values& dy) {
         return Values{sum_to_input(b, n, 0, dy[0]), sum_to_input(b, n, 1, dy[0])};
       }},
      {"sub", "a - b",
       [](GradBuilder& b, const Node& n, const Values& dy) {
         return Values{sum_to_input(b, n, 0, dy[0]), sum_to_input(b, n, 1, b.add("neg", {dy[0]}))};
       }},
      {"mul", "a * b",
       [](GradBuilder& b, const Node& n, const Values& dy) {
         return Values{sum_to_input(b, n, 0, b.add("mul", {dy[0], n.inputs[1]})),
                       sum_to_input(b, n, 1, b.add("mul", {dy[0], n.inputs[0]}))};
       }},
      // y = a / b: da = dy / b, db = -dy * y / b.
      {"div", "a / b",
       [](GradBuilder& b, const Node& n, const Values& dy) {
         Value da = b.add("div", {dy[0], n.inputs[1]});
         Value db = b.add("neg", {b.add("mul", {da, out0(n)})});
         return Values{sum_to_input(b, n, 0, da), sum_to_input(b, n, 1, db)};
       }},
  };
  for (const MathOp& op : binaries)
    add_op(kGroup, {.name = op.name,
                    .signature = "(a, b) -> y",
                    .doc = std::string(op.doc) + ", elementwise with numpy broadcasting.",
                    .infer = binary_infer,
                    .grad = op.grad});
  for (std::string op : {"maximum", "minimum"}) {
    add_op(kGroup, {.name = op,
                    .signature = "(a, b) -> y",
                    .doc = "The elementwise " + op + " of a and b, with numpy broadcasting.",
                    .infer = binary_infer,
                    .grad = [op](GradBuilder& b, const Node& n, const Values& dy) {
                      auto g = b.add_multi(op + "_grad", {dy[0], n.inputs[0], n.inputs[1]});
                      return Values{sum_to_input(b, n, 0, g[0]), sum_to_input(b, n, 1, g[1])};
                    }});
    add_op(kGroup, {.name = op + "_grad",
                    .signature = "(dy, a, b) -> (da, db)",
                    .doc = "Gradient of " + op +
                           ": dy goes to the selected input, ties split it "
                           "evenly; both at the broadcast shape.",
                    .infer = minmax_grad_infer,
                    .reference_only = "only Maximum/Minimum layers' backward pass uses it, "
                                      "with general broadcasting"});
  }
}

void register_unary_math() {
  const MathOp unaries[] = {
      {"neg", "-x",
       [](GradBuilder& b, const Node&, const Values& dy) { return Values{b.add("neg", {dy[0]})}; }},
      {"exp", "e^x",
       [](GradBuilder& b, const Node& n, const Values& dy) {
         return Values{b.add("mul", {dy[0], out0(n)})};
       }},
      {"log", "The natural logarithm of x",
       [](GradBuilder& b, const Node& n, const Values& dy) {
         return Values{b.add("div", {dy[0], n.inputs[0]})};
       }},
      {"sqrt", "The square root of x",
       [](GradBuilder& b, const Node& n, const Values& dy) {
         return Values{b.add("div", {dy[0], scaled(b, out0(n), 2.0)})};
       }},
      {"square", "x * x",
       [](GradBuilder& b, const Node& n, const Values& dy) {
         return Values{b.add("mul", {dy[0], scaled(b, n.inputs[0], 2.0)})};
       }},
      {"abs", "|x|",
       [](GradBuilder& b, const Node& n, const Values& dy) {
         return Values{b.add("abs_grad", {dy[0], n.inputs[0]})};
       }},
  };
  for (const MathOp& op : unaries)
    add_op(kGroup, {.name = op.name,
                    .signature = "(x) -> y",
                    .doc = std::string(op.doc) + ", elementwise.",
                    .infer = unary_infer,
                    .grad = op.grad});
  add_op(kGroup, {.name = "abs_grad",
                  .signature = "(dy, x) -> dx",
                  .doc = "Gradient of abs: dy * sign(x).",
                  .infer = grad_pair_infer});
  add_op(kGroup, {.name = "scale_shift",
                  .signature = "(x) -> y",
                  .doc = "x * scale + shift, elementwise (Rescaling, and gradient scaling).",
                  .attrs = {{"scale", f64, 1.0, "multiplier"}, {"shift", f64, 0.0, "offset"}},
                  .infer = unary_infer,
                  .grad = [](GradBuilder& b, const Node& n, const Values& dy) {
                    return Values{scaled(b, dy[0], attr_f(n, "scale"))};
                  }});
}

struct Activation {
  const char* name;
  const char* doc;
  bool grad_of_output;  // the gradient op takes (dy, y), else (dy, x)
  std::vector<AttrDecl> attrs;
};

// An activation and its gradient op, which takes the activation's attributes too.
void add_activation(const Activation& act) {
  const std::string grad_op = std::string(act.name) + "_grad";
  const bool uses_output = act.grad_of_output;
  add_op(kGroup, {.name = act.name,
                  .signature = "(x) -> y",
                  .doc = std::string(act.doc) + ", elementwise.",
                  .attrs = act.attrs,
                  .infer = unary_infer,
                  .grad = [grad_op, uses_output](GradBuilder& b, const Node& n, const Values& dy) {
                    Value v = uses_output ? out0(n) : n.inputs[0];
                    return Values{b.add(grad_op, {dy[0], v}, n.attrs)};
                  }});
  add_op(kGroup, {.name = grad_op,
                  .signature = uses_output ? "(dy, y) -> dx" : "(dy, x) -> dx",
                  .doc = std::string("Gradient of ") + act.name + ", from its " +
                         (uses_output ? "output y." : "input x."),
                  .attrs = act.attrs,
                  .infer = grad_pair_infer});
}

void register_activations() {
  const Activation activations[] = {
      {"relu", "max(x, 0)", true, {}},
      {"relu6", "min(max(x, 0), 6)", true, {}},
      {"sigmoid", "1 / (1 + e^-x)", true, {}},
      {"tanh", "The hyperbolic tangent of x", true, {}},
      {"gelu",
       "x * Phi(x), Phi the standard normal CDF (Keras gelu)",
       false,
       {{"approximate", boolean, false, "use the tanh approximation"}}},
      {"swish", "x * sigmoid(x) (silu)", false, {}},
      {"leaky_relu",
       "x for x > 0, else alpha * x",
       false,
       {{"alpha", f64, 0.2, "slope for x <= 0 (Keras negative_slope)"}}},
      {"softplus", "log(1 + e^x)", false, {}},
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
