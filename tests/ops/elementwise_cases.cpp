// Op-table cases for elementwise ops: broadcasting binaries, unary math, activations, grad ops.
#include <cmath>
#include <limits>

#include "ops/op_harness.h"

namespace lockstep::testing {
namespace {

OpInput in(Shape s, float lo = -1.f, float hi = 1.f) {
  return OpInput{.shape = s, .lo = lo, .hi = hi};
}
OpInput vals(Shape s, std::vector<float> v) { return OpInput{.shape = s, .values = std::move(v)}; }
// Values spread over [lo, hi] staying at least `gap` away from each kink in `kinks`.
OpInput away(Shape s, float lo, float hi, std::vector<float> kinks, float gap = 0.05f) {
  OpInput r{.shape = s};
  const int64_t n = s.numel();
  for (int64_t i = 0; i < n; ++i) {
    float v = lo + (hi - lo) * float((i * 7919) % n + 0.5f) / float(n);
    for (float k : kinks)
      if (std::abs(v - k) < gap) v = k + (v < k ? -gap : gap);
    r.values.push_back(v);
  }
  return r;
}

OpCase binary(const std::string& op, const std::string& tag, OpInput a, OpInput b) {
  return OpCase{.name = op + "_" + tag, .op = op, .inputs = {a, b}, .fd_eps = 1e-3f};
}
OpCase unary(const std::string& name, const std::string& op, OpInput x, Attrs at = {}) {
  return OpCase{.name = name, .op = op, .attrs = at, .inputs = {x}, .fd_eps = 1e-3f};
}
// Gradient ops: forward (cpu vs reference) only.
OpCase grad_op(const std::string& op, OpInput v, Attrs at = {}) {
  return OpCase{.name = op, .op = op, .attrs = at, .inputs = {in(v.shape), v}, .check_grad = false};
}

}  // namespace

LS_OP_CASES(elementwise_binary) {
  std::vector<OpCase> c;
  for (std::string op : {"add", "sub", "mul", "div", "maximum", "minimum"}) {
    bool d = op == "div";
    float lo = d ? 0.5f : -1.f, hi = d ? 2.f : 1.f;
    c.push_back(binary(op, "same", in({2, 3}), in({2, 3}, lo, hi)));
    c.push_back(binary(op, "row", in({2, 3}), in({3}, lo, hi)));
    c.push_back(binary(op, "row_lhs", in({4}, lo, hi), in({3, 4})));
    c.push_back(binary(op, "scalar", in({2, 3}), in({}, lo, hi)));
    c.push_back(binary(op, "scalar_lhs", in({}, lo, hi), in({2, 3}, lo, hi)));
    c.push_back(binary(op, "general", in({2, 1, 4}), in({3, 1}, lo, hi)));
    c.push_back(binary(op, "rank5", in({2, 1, 2, 1, 3}), in({2, 1, 2, 1}, lo, hi)));
  }
  c.push_back(binary("div", "pos_num_neg_den", in({3, 2}), in({3, 2}, -2.f, -0.5f)));
  // Ties: gradient split evenly between the two inputs.
  c.push_back(OpCase{.name = "maximum_grad",
                     .op = "maximum_grad",
                     .inputs = {in({2, 3}), vals({2, 3}, {1, 2, 3, 4, 5, 6}), vals({3}, {0, 2, 9})},
                     .check_grad = false});
  c.push_back(OpCase{.name = "minimum_grad",
                     .op = "minimum_grad",
                     .inputs = {in({2, 3}), vals({2, 3}, {1, 2, 3, 4, 5, 6}), vals({3}, {0, 2, 9})},
                     .check_grad = false});
  // Large: the parallel paths of the cpu kernels.
  c.push_back(OpCase{.name = "add_large_same",
                     .op = "add",
                     .inputs = {in({256, 256}), in({256, 256})},
                     .check_grad = false});
  c.push_back(OpCase{.name = "mul_large_row",
                     .op = "mul",
                     .inputs = {in({512, 128}), in({128})},
                     .check_grad = false});
  c.push_back(OpCase{.name = "sub_large_scalar",
                     .op = "sub",
                     .inputs = {in({}), in({300, 200})},
                     .check_grad = false});
  // The cpu backend's vectorised sigmoid (swish, its gradient) on the parallel path, and on
  // values past exp's float range.
  c.push_back(OpCase{
      .name = "swish_large", .op = "swish", .inputs = {in({300, 200})}, .check_grad = false});
  c.push_back(OpCase{.name = "swish_grad_large",
                     .op = "swish_grad",
                     .inputs = {in({300, 200}), in({300, 200})},
                     .check_grad = false});
  c.push_back(OpCase{.name = "sigmoid_wide_range",
                     .op = "sigmoid",
                     .inputs = {vals({8}, {-120, -87.5, -30, -0.5, 0, 3, 40, 100})},
                     .check_grad = false});
  c.push_back(OpCase{.name = "swish_wide_range",
                     .op = "swish",
                     .inputs = {vals({8}, {-120, -87.5, -30, -0.5, 0, 3, 40, 100})},
                     .check_grad = false});
  // Per-batch rows ([N, 1, 1, C] against [N, H, W, C]: squeeze-and-excitation's scale), both
  // operand orders, small (with gradients) and large (the parallel path).
  c.push_back(
      OpCase{.name = "mul_batch_row", .op = "mul", .inputs = {in({2, 3, 2, 4}), in({2, 1, 1, 4})}});
  c.push_back(
      OpCase{.name = "sub_batch_row_first", .op = "sub", .inputs = {in({3, 1, 5}), in({3, 4, 5})}});
  c.push_back(OpCase{.name = "mul_large_batch_row",
                     .op = "mul",
                     .inputs = {in({4, 24, 24, 32}), in({4, 1, 1, 32})},
                     .check_grad = false});
  // Per-image scalars ([N, 1, 1, 1] against [N, H, W, C]: a drop-connect mask), both operand
  // orders, small (with gradients) and large: the parallel path's 4096-element chunks straddle
  // the images (6,864 elements each).
  c.push_back(OpCase{
      .name = "mul_batch_scalar", .op = "mul", .inputs = {in({3, 2, 3, 5}), in({3, 1, 1, 1})}});
  c.push_back(OpCase{.name = "div_batch_scalar_first",
                     .op = "div",
                     .inputs = {in({2, 1, 1}), in({2, 4, 3}, 0.5f, 2.f)}});
  c.push_back(OpCase{.name = "mul_large_batch_scalar",
                     .op = "mul",
                     .inputs = {in({5, 13, 11, 48}), in({5, 1, 1, 1})},
                     .check_grad = false});
  return c;
}

LS_OP_CASES(elementwise_unary) {
  std::vector<OpCase> c;
  c.push_back(unary("neg", "neg", in({2, 3})));
  c.push_back(unary("exp", "exp", in({2, 3, 2})));
  c.push_back(unary("log", "log", in({5}, 0.5f, 3.f)));
  c.push_back(unary("sqrt", "sqrt", in({5}, 0.5f, 3.f)));
  c.push_back(unary("square", "square", in({2, 2, 2, 2})));
  c.push_back(unary("abs", "abs", away({3, 4}, -1.f, 1.f, {0.f})));
  c.push_back(
      unary("scale_shift", "scale_shift", in({2, 3}), Attrs{{"scale", 2.5}, {"shift", -1.0}}));
  c.push_back(unary("scale_shift_default", "scale_shift", in({4})));
  c.push_back(unary("relu", "relu", away({2, 3, 4}, -2.f, 2.f, {0.f})));
  c.push_back(unary("relu6", "relu6", away({4, 6}, -2.f, 8.f, {0.f, 6.f}, 0.1f)));
  c.push_back(unary("sigmoid", "sigmoid", in({3, 4}, -4.f, 4.f)));
  c.push_back(unary("tanh", "tanh", in({3, 4}, -2.f, 2.f)));
  c.push_back(unary("gelu", "gelu", in({3, 4}, -3.f, 3.f)));
  c.push_back(
      unary("gelu_approximate", "gelu", in({3, 4}, -3.f, 3.f), Attrs{{"approximate", true}}));
  c.push_back(unary("swish", "swish", in({3, 4}, -3.f, 3.f)));
  c.push_back(unary("leaky_relu", "leaky_relu", away({3, 4}, -2.f, 2.f, {0.f})));
  c.push_back(unary("leaky_relu_alpha", "leaky_relu", away({3, 4}, -2.f, 2.f, {0.f}),
                    Attrs{{"alpha", 0.01}}));
  c.push_back(unary("elu", "elu", away({3, 4}, -3.f, 2.f, {0.f})));
  c.push_back(unary("elu_alpha", "elu", away({3, 4}, -3.f, 2.f, {0.f}), Attrs{{"alpha", 0.5}}));
  c.push_back(unary("softplus", "softplus", in({3, 4}, -5.f, 5.f)));
  // NaN passes through the activations, as TensorFlow's and PyTorch's (the table compares NaN
  // positions; tests/ops/nan_activation_test.cpp checks the values themselves).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  OpInput with_nan{.shape = {2, 4}, .values = {nan, -1.f, 0.5f, 7.f, 2.f, -nan, 0.f, 6.f}};
  for (const char* op : {"relu", "relu6", "leaky_relu", "elu"}) {
    OpCase n = unary(std::string(op) + "_nan", op, with_nan);
    n.check_grad = false;
    c.push_back(n);
  }
  // Large: parallel unary path.
  OpCase big = unary("relu_large", "relu", in({300, 200}));
  big.check_grad = false;
  c.push_back(big);

  c.push_back(grad_op("relu_grad", away({3, 4}, -1.f, 1.f, {0.f})));
  c.push_back(grad_op("relu6_grad", away({3, 4}, -1.f, 7.f, {0.f, 6.f})));
  c.push_back(grad_op("sigmoid_grad", in({3, 4}, 0.f, 1.f)));
  c.push_back(grad_op("tanh_grad", in({3, 4})));
  c.push_back(grad_op("gelu_grad", in({3, 4}, -3.f, 3.f)));
  c.push_back(OpCase{.name = "gelu_grad_approximate",
                     .op = "gelu_grad",
                     .attrs = Attrs{{"approximate", true}},
                     .inputs = {in({3, 4}), in({3, 4}, -3.f, 3.f)},
                     .check_grad = false});
  c.push_back(grad_op("swish_grad", in({3, 4}, -3.f, 3.f)));
  c.push_back(grad_op("leaky_relu_grad", in({3, 4}), Attrs{{"alpha", 0.3}}));
  c.push_back(grad_op("elu_grad", in({3, 4}, -3.f, 2.f)));
  c.push_back(OpCase{.name = "elu_grad_alpha",
                     .op = "elu_grad",
                     .attrs = Attrs{{"alpha", 1.7}},
                     .inputs = {in({3, 4}), in({3, 4}, -3.f, 2.f)},
                     .check_grad = false});
  c.push_back(grad_op("softplus_grad", in({3, 4}, -3.f, 3.f)));
  c.push_back(grad_op("abs_grad", in({3, 4})));
  OpCase big_grad = grad_op("relu_grad", in({300, 200}));
  big_grad.name = "relu_grad_large";
  c.push_back(big_grad);
  return c;
}

}  // namespace lockstep::testing
