// Registrations of matmul, conv2d (+ backward ops) and pooling: shape functions and gradients.
#include "ops/internal/nn_geometry.h"
#include "ops/internal/op_util.h"

namespace lockstep::ops {

// The geometry attrs of a conv (without fusion attrs), for its backward ops.
static Attrs conv_attrs(const Attrs& a) {
  Attrs r;
  for (const char* k : {"strides", "padding", "pads", "dilations", "groups", "pool_size"})
    if (a.has(k)) r.set(k, a.map().at(k));
  return r;
}

static Shape with_batch(Shape s, int64_t n) {
  s[0] = n;
  return s;
}

static void check_dy(const ConvGeom& g, const Shape& dy, const char* what) {
  LS_CHECK(dy.rank() == 4, what, ": dy must be 4-D, got ", dy.str());
  Shape want{g.N, g.OH, g.OW, g.O};
  for (int i = 1; i < 4; ++i)
    LS_CHECK(want[i] < 0 || dy[i] < 0 || want[i] == dy[i], what, ": dy has shape ", dy.str(),
             ", the convolution produces ", want.str());
}

static std::vector<TensorType> infer_matmul(const Node& n, const std::vector<TensorType>& in) {
  expect_inputs(in, 2);
  expect_f32(in[0], "a");
  expect_f32(in[1], "b");
  LS_CHECK(in[0].shape.rank() == 2 && in[1].shape.rank() == 2, "expects 2-D operands, got ",
           in[0].shape.str(), " and ", in[1].shape.str(), " (flatten the input first)");
  bool ta = flag_attr(n.attrs, "transpose_a"), tb = flag_attr(n.attrs, "transpose_b");
  int64_t M = in[0].shape[ta ? 1 : 0], Ka = in[0].shape[ta ? 0 : 1];
  int64_t Kb = in[1].shape[tb ? 1 : 0], N = in[1].shape[tb ? 0 : 1];
  LS_CHECK(Ka < 0 || Kb < 0 || Ka == Kb, "inner dimensions differ: a ", in[0].shape.str(),
           " has K=", Ka, ", b ", in[1].shape.str(), " has K=", Kb,
           " (check the input features of this layer)");
  return {f32(Shape{M, N})};
}

static std::vector<Value> grad_matmul(GradBuilder& b, const Node& n, const std::vector<Value>& dy) {
  bool ta = flag_attr(n.attrs, "transpose_a"), tb = flag_attr(n.attrs, "transpose_b");
  Value A = n.inputs[0], B = n.inputs[1], G = dy[0];
  auto mm = [&](Value x, Value y, bool t1, bool t2) {
    return b.add("matmul", {x, y}, Attrs{{"transpose_a", t1}, {"transpose_b", t2}});
  };
  Value dA = ta ? mm(B, G, tb, true) : mm(G, B, false, !tb);
  Value dB = tb ? mm(G, A, true, ta) : mm(A, G, !ta, false);
  return {dA, dB};
}

static std::vector<TensorType> infer_conv(const Node& n, const std::vector<TensorType>& in) {
  LS_CHECK(in.size() == 2 || in.size() == 3, "expects inputs (x, w[, b]), got ", in.size());
  for (auto& t : in) expect_f32(t, "conv2d inputs");
  ConvGeom g = conv_geometry(in[0].shape, in[1].shape, n.attrs);
  LS_CHECK(g.fused_bias == (in.size() == 3), "fused_bias=", g.fused_bias, " needs ",
           g.fused_bias ? 3 : 2, " inputs, got ", in.size());
  if (g.fused_bias)
    LS_CHECK(in[2].shape == Shape{g.O}, "bias has shape ", in[2].shape.str(), ", expected (", g.O, ")");
  return {f32(Shape{g.N, g.OH, g.OW, g.O})};
}

static std::vector<Value> grad_conv(GradBuilder& b, const Node& n, const std::vector<Value>& dy) {
  Value G = dy[0];
  if (n.attrs.s("activation", "linear") == "relu") G = b.add("relu_grad", {G, Value{n.id, 0}});
  Value x = n.inputs[0], w = n.inputs[1];
  Attrs ai = conv_attrs(n.attrs), af = conv_attrs(n.attrs);
  ai.set("input_shape", b.type(x).shape.vec());
  af.set("filter_shape", b.type(w).shape.vec());
  std::vector<Value> r{b.add("conv2d_backward_input", {G, w}, ai),
                       b.add("conv2d_backward_filter", {G, x}, af)};
  if (n.inputs.size() == 3)
    r.push_back(b.add("reduce_sum", {G}, Attrs{{"axes", std::vector<int64_t>{0, 1, 2}}, {"keepdims", false}}));
  return r;
}

static std::vector<TensorType> infer_conv_bwd_input(const Node& n, const std::vector<TensorType>& in) {
  expect_inputs(in, 2);
  Shape xs = with_batch(Shape(n.attrs.ints("input_shape")), in[0].shape[0]);
  check_dy(conv_geometry(xs, in[1].shape, n.attrs), in[0].shape, "conv2d_backward_input");
  return {f32(xs)};
}

static std::vector<TensorType> infer_conv_bwd_filter(const Node& n, const std::vector<TensorType>& in) {
  expect_inputs(in, 2);
  Shape ws(n.attrs.ints("filter_shape"));
  check_dy(conv_geometry(in[1].shape, ws, n.attrs), in[0].shape, "conv2d_backward_filter");
  return {f32(ws)};
}

// bwd_input(dy, w) is linear in each argument: its adjoints are a conv and a filter gradient.
static std::vector<Value> grad_conv_bwd_input(GradBuilder& b, const Node& n, const std::vector<Value>& dy) {
  Value d = n.inputs[0], w = n.inputs[1];
  Attrs af = conv_attrs(n.attrs);
  af.set("filter_shape", b.type(w).shape.vec());
  return {b.add("conv2d", {dy[0], w}, conv_attrs(n.attrs)),
          b.add("conv2d_backward_filter", {d, dy[0]}, af)};
}

static std::vector<Value> grad_conv_bwd_filter(GradBuilder& b, const Node& n, const std::vector<Value>& dy) {
  Value d = n.inputs[0], x = n.inputs[1];
  Attrs ai = conv_attrs(n.attrs);
  ai.set("input_shape", b.type(x).shape.vec());
  return {b.add("conv2d", {x, dy[0]}, conv_attrs(n.attrs)),
          b.add("conv2d_backward_input", {d, dy[0]}, ai)};
}

static std::vector<TensorType> infer_pool(const Node& n, const std::vector<TensorType>& in) {
  expect_inputs(in, 1);
  expect_f32(in[0], "x");
  ConvGeom g = pool_geometry(in[0].shape, n.attrs);
  return {f32(Shape{g.N, g.OH, g.OW, g.C})};
}

LOCKSTEP_REGISTER(nn_ops) {
  add_op({.name = "matmul", .infer = infer_matmul, .grad = grad_matmul});
  add_op({.name = "conv2d", .infer = infer_conv, .grad = grad_conv});
  add_op({.name = "conv2d_backward_input", .infer = infer_conv_bwd_input, .grad = grad_conv_bwd_input});
  add_op({.name = "conv2d_backward_filter", .infer = infer_conv_bwd_filter, .grad = grad_conv_bwd_filter});
  add_op({.name = "max_pool2d", .infer = infer_pool,
          .grad = [](GradBuilder& b, const Node& n, const std::vector<Value>& dy) {
            return std::vector<Value>{
                b.add("max_pool2d_grad", {dy[0], n.inputs[0], Value{n.id, 0}}, conv_attrs(n.attrs))};
          }});
  add_op({.name = "max_pool2d_grad", .infer = [](const Node& n, const std::vector<TensorType>& in) {
            expect_inputs(in, 3);
            ConvGeom g = pool_geometry(in[1].shape, n.attrs);
            check_dy(g, in[0].shape, "max_pool2d_grad");
            LS_CHECK(in[2].shape == in[0].shape, "y ", in[2].shape.str(), " and dy ",
                     in[0].shape.str(), " differ");
            return std::vector<TensorType>{in[1]};
          }});
  add_op({.name = "avg_pool2d", .infer = infer_pool,
          .grad = [](GradBuilder& b, const Node& n, const std::vector<Value>& dy) {
            Attrs a = conv_attrs(n.attrs);
            a.set("input_shape", b.type(n.inputs[0]).shape.vec());
            return std::vector<Value>{b.add("avg_pool2d_grad", {dy[0]}, a)};
          }});
  add_op({.name = "avg_pool2d_grad",
          .infer = [](const Node& n, const std::vector<TensorType>& in) {
            expect_inputs(in, 1);
            Shape xs = with_batch(Shape(n.attrs.ints("input_shape")), in[0].shape[0]);
            check_dy(pool_geometry(xs, n.attrs), in[0].shape, "avg_pool2d_grad");
            return std::vector<TensorType>{f32(xs)};
          },
          .grad = [](GradBuilder& b, const Node& n, const std::vector<Value>& dy) {
            return std::vector<Value>{b.add("avg_pool2d", {dy[0]}, conv_attrs(n.attrs))};
          }});
}

}  // namespace lockstep::ops
