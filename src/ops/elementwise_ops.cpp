// Elementwise op registrations: broadcasting binaries, unary math, activations and their grads.
#include "ops/internal/op_util.h"

namespace lockstep::ops {

namespace {

using Types = std::vector<TensorType>;
using Values = std::vector<Value>;

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

// Registers an activation whose gradient op takes (dy, y) or (dy, x) and copies the attrs.
void add_activation(const std::string& name, const std::string& grad_op, bool uses_output) {
  add_op({.name = name, .infer = unary_infer,
          .grad = [grad_op, uses_output](GradBuilder& b, const Node& n, const Values& dy) {
            Value v = uses_output ? out0(n) : n.inputs[0];
            return Values{b.add(grad_op, {dy[0], v}, n.attrs)};
          }});
  add_op({.name = grad_op, .infer = grad_pair_infer});
}

}  // namespace

LOCKSTEP_REGISTER(elementwise_ops) {
  // Binary ops with numpy broadcasting.
  add_op({.name = "add", .infer = binary_infer,
          .grad = [](GradBuilder& b, const Node& n, const Values& dy) {
            return Values{sum_to_input(b, n, 0, dy[0]), sum_to_input(b, n, 1, dy[0])};
          }});
  add_op({.name = "sub", .infer = binary_infer,
          .grad = [](GradBuilder& b, const Node& n, const Values& dy) {
            return Values{sum_to_input(b, n, 0, dy[0]),
                          sum_to_input(b, n, 1, b.add("neg", {dy[0]}))};
          }});
  add_op({.name = "mul", .infer = binary_infer,
          .grad = [](GradBuilder& b, const Node& n, const Values& dy) {
            return Values{sum_to_input(b, n, 0, b.add("mul", {dy[0], n.inputs[1]})),
                          sum_to_input(b, n, 1, b.add("mul", {dy[0], n.inputs[0]}))};
          }});
  // y = a / b: da = dy / b, db = -dy * y / b.
  add_op({.name = "div", .infer = binary_infer,
          .grad = [](GradBuilder& b, const Node& n, const Values& dy) {
            Value da = b.add("div", {dy[0], n.inputs[1]});
            Value db = b.add("neg", {b.add("mul", {da, out0(n)})});
            return Values{sum_to_input(b, n, 0, da), sum_to_input(b, n, 1, db)};
          }});
  for (std::string op : {"maximum", "minimum"}) {
    add_op({.name = op, .infer = binary_infer,
            .grad = [op](GradBuilder& b, const Node& n, const Values& dy) {
              auto g = b.add_multi(op + "_grad", {dy[0], n.inputs[0], n.inputs[1]});
              return Values{sum_to_input(b, n, 0, g[0]), sum_to_input(b, n, 1, g[1])};
            }});
    // (dy, a, b) -> (da, db): dy goes to the selected input; ties split it evenly.
    add_op({.name = op + "_grad", .infer = minmax_grad_infer});
  }

  // Unary math.
  add_op({.name = "neg", .infer = unary_infer,
          .grad = [](GradBuilder& b, const Node&, const Values& dy) {
            return Values{b.add("neg", {dy[0]})};
          }});
  add_op({.name = "exp", .infer = unary_infer,
          .grad = [](GradBuilder& b, const Node& n, const Values& dy) {
            return Values{b.add("mul", {dy[0], out0(n)})};
          }});
  add_op({.name = "log", .infer = unary_infer,
          .grad = [](GradBuilder& b, const Node& n, const Values& dy) {
            return Values{b.add("div", {dy[0], n.inputs[0]})};
          }});
  add_op({.name = "sqrt", .infer = unary_infer,
          .grad = [](GradBuilder& b, const Node& n, const Values& dy) {
            return Values{b.add("div", {dy[0], scaled(b, out0(n), 2.0)})};
          }});
  add_op({.name = "square", .infer = unary_infer,
          .grad = [](GradBuilder& b, const Node& n, const Values& dy) {
            return Values{b.add("mul", {dy[0], scaled(b, n.inputs[0], 2.0)})};
          }});
  add_op({.name = "abs", .infer = unary_infer,
          .grad = [](GradBuilder& b, const Node& n, const Values& dy) {
            return Values{b.add("abs_grad", {dy[0], n.inputs[0]})};
          }});
  add_op({.name = "abs_grad", .infer = grad_pair_infer});  // dy * sign(x)
  add_op({.name = "scale_shift", .infer = unary_infer,
          .grad = [](GradBuilder& b, const Node& n, const Values& dy) {
            return Values{scaled(b, dy[0], n.attrs.f("scale", 1.0))};
          }});

  // Activations.
  add_activation("relu", "relu_grad", true);
  add_activation("relu6", "relu6_grad", true);
  add_activation("sigmoid", "sigmoid_grad", true);
  add_activation("tanh", "tanh_grad", true);
  add_activation("gelu", "gelu_grad", false);
  add_activation("swish", "swish_grad", false);
  add_activation("leaky_relu", "leaky_relu_grad", false);
  add_activation("softplus", "softplus_grad", false);
}

}  // namespace lockstep::ops
