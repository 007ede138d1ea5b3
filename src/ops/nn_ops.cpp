// Declarations of matmul, conv2d (+ backward ops), pooling and upsample2d (+ grad): shape
// functions and gradients.
#include "ops/internal/nn_geometry.h"
#include "ops/internal/op_util.h"

namespace lockstep::ops {

// The activations conv2d's kernels apply to their output (every backend's).
constexpr FusedActivationSet kConvActivations =
    bit(FusedActivation::relu) | bit(FusedActivation::relu6) | bit(FusedActivation::sigmoid) |
    bit(FusedActivation::swish) | bit(FusedActivation::gelu);

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
  bool ta = attr_b(n, "transpose_a"), tb = attr_b(n, "transpose_b");
  int64_t M = in[0].shape[ta ? 1 : 0], Ka = in[0].shape[ta ? 0 : 1];
  int64_t Kb = in[1].shape[tb ? 1 : 0], N = in[1].shape[tb ? 0 : 1];
  LS_CHECK(Ka < 0 || Kb < 0 || Ka == Kb, "inner dimensions differ: a ", in[0].shape.str(),
           " has K=", Ka, ", b ", in[1].shape.str(), " has K=", Kb,
           " (check the input features of this layer)");
  return {f32(Shape{M, N})};
}

static std::vector<Value> grad_matmul(GradBuilder& b, const Node& n, const std::vector<Value>& dy) {
  bool ta = attr_b(n, "transpose_a"), tb = attr_b(n, "transpose_b");
  Value A = n.inputs[0], B = n.inputs[1], G = dy[0];
  auto mm = [&](Value x, Value y, bool t1, bool t2) {
    return b.add(op::matmul, {x, y}, Attrs{{"transpose_a", t1}, {"transpose_b", t2}});
  };
  Value dA = ta ? mm(B, G, tb, true) : mm(G, B, false, !tb);
  Value dB = tb ? mm(G, A, true, ta) : mm(A, G, !ta, false);
  return {dA, dB};
}

static std::vector<TensorType> infer_conv(const Node& n, const std::vector<TensorType>& in) {
  LS_CHECK(in.size() == 2 || in.size() == 3, "expects inputs (x, w[, b]), got ", in.size());
  for (auto& t : in) expect_f32(t, "conv2d inputs");
  ConvGeom g = conv2d_geometry(in[0].shape, in[1].shape, n);
  LS_CHECK(g.fused_bias == (in.size() == 3), "fused_bias=", g.fused_bias, " needs ",
           g.fused_bias ? 3 : 2, " inputs, got ", in.size());
  if (g.fused_bias)
    LS_CHECK(in[2].shape == Shape{g.O}, "bias has shape ", in[2].shape.str(), ", expected (", g.O,
             ")");
  return {f32(Shape{g.N, g.OH, g.OW, g.O})};
}

static std::vector<TensorType> infer_pointwise_depthwise(const Node& n,
                                                         const std::vector<TensorType>& in) {
  expect_inputs(in, 5);
  for (auto& t : in) expect_f32(t, "conv2d_pointwise_depthwise inputs");
  const PointwiseDepthwise g =
      pointwise_depthwise_geometry(in[0].shape, in[1].shape, in[3].shape, n);
  LS_CHECK(in[2].shape == Shape{g.pw.O} && in[4].shape == Shape{g.pw.O}, "biases have shapes ",
           in[2].shape.str(), " and ", in[4].shape.str(), ", expected (", g.pw.O, ") each");
  return {f32(Shape{g.dw.N, g.dw.OH, g.dw.OW, g.dw.O})};
}

static std::vector<Value> grad_conv(GradBuilder& b, const Node& n, const std::vector<Value>& dy) {
  Value G = dy[0];
  G = fused_activation_grad(b, n, G);
  Value x = n.inputs[0], w = n.inputs[1];
  Attrs ai = attrs_for(op::conv2d_backward_input, n.attrs);
  Attrs af = attrs_for(op::conv2d_backward_filter, n.attrs);
  ai.set("input_shape", b.type(x).shape.vec());
  af.set("filter_shape", b.type(w).shape.vec());
  std::vector<Value> r{b.add(op::conv2d_backward_input, {G, w}, ai),
                       b.add(op::conv2d_backward_filter, {G, x}, af)};
  if (n.inputs.size() == 3)
    r.push_back(b.add(op::reduce_sum, {G},
                      Attrs{{"axes", std::vector<int64_t>{0, 1, 2}}, {"keepdims", false}}));
  return r;
}

static std::vector<TensorType> infer_conv_bwd_input(const Node& n,
                                                    const std::vector<TensorType>& in) {
  expect_inputs(in, 2);
  Shape xs = input_shape_attr(n, in[0].shape[0]);
  check_dy(conv_geometry(xs, in[1].shape, n), in[0].shape, "conv2d_backward_input");
  return {f32(xs)};
}

static std::vector<TensorType> infer_conv_bwd_filter(const Node& n,
                                                     const std::vector<TensorType>& in) {
  expect_inputs(in, 2);
  Shape ws(attr_ints(n, "filter_shape"));
  check_dy(conv_geometry(in[1].shape, ws, n), in[0].shape, "conv2d_backward_filter");
  return {f32(ws)};
}

// bwd_input(dy, w) is linear in each argument: its adjoints are a conv and a filter gradient.
static std::vector<Value> grad_conv_bwd_input(GradBuilder& b, const Node& n,
                                              const std::vector<Value>& dy) {
  Value d = n.inputs[0], w = n.inputs[1];
  Attrs af = attrs_for(op::conv2d_backward_filter, n.attrs);
  af.set("filter_shape", b.type(w).shape.vec());
  return {b.add(op::conv2d, {dy[0], w}, attrs_for(op::conv2d, n.attrs)),
          b.add(op::conv2d_backward_filter, {d, dy[0]}, af)};
}

static std::vector<Value> grad_conv_bwd_filter(GradBuilder& b, const Node& n,
                                               const std::vector<Value>& dy) {
  Value d = n.inputs[0], x = n.inputs[1];
  Attrs ai = attrs_for(op::conv2d_backward_input, n.attrs);
  ai.set("input_shape", b.type(x).shape.vec());
  return {b.add(op::conv2d, {x, dy[0]}, attrs_for(op::conv2d, n.attrs)),
          b.add(op::conv2d_backward_input, {d, dy[0]}, ai)};
}

static std::vector<TensorType> infer_pool(const Node& n, const std::vector<TensorType>& in) {
  expect_inputs(in, 1);
  expect_f32(in[0], "x");
  ConvGeom g = pool_geometry(in[0].shape, n);
  return {f32(Shape{g.N, g.OH, g.OW, g.C})};
}

static std::vector<TensorType> infer_max_pool_grad(const Node& n,
                                                   const std::vector<TensorType>& in) {
  expect_inputs(in, 3);
  ConvGeom g = pool_geometry(in[1].shape, n);
  check_dy(g, in[0].shape, "max_pool2d_grad");
  LS_CHECK(in[2].shape == in[0].shape, "y ", in[2].shape.str(), " and dy ", in[0].shape.str(),
           " differ");
  return {in[1]};
}

static std::vector<TensorType> infer_avg_pool_grad(const Node& n,
                                                   const std::vector<TensorType>& in) {
  expect_inputs(in, 1);
  ConvGeom g = pool_grad_geometry(n, in[0].shape);
  check_dy(g, in[0].shape, "avg_pool2d_grad");
  return {f32(Shape{g.N, g.H, g.W, g.C})};
}

namespace {

constexpr const char* kGroup = "nn";
using Values = std::vector<Value>;
using Types = std::vector<TensorType>;

// The attributes of one conv node, plus `extra` (a backward op's shape attr).
std::vector<AttrDecl> conv_attrs(std::vector<AttrDecl> extra) {
  std::vector<AttrDecl> a = {
      {"strides", i64_list, Ints{1, 1}, "[sh, sw] (one int: both)"},
      {"padding", str, "valid", "\"valid\" or \"same\" (Keras: extra pad at the bottom/right)"},
      {"pads", i64_list, optional, "[top, bottom, left, right]; overrides padding"},
      {"dilations", i64_list, Ints{1, 1}, "[dh, dw]"},
      {"groups", i64, 1, "channel groups (depthwise: groups = C)"}};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::vector<AttrDecl> pool_attrs(std::vector<AttrDecl> extra) {
  std::vector<AttrDecl> a = {
      {"pool_size", i64_list, Ints{2, 2}, "[ph, pw] (one int: both)"},
      {"strides", i64_list, optional, "[sh, sw]; absent: pool_size"},
      {"padding", str, "valid", "\"valid\" or \"same\""},
      {"pads", i64_list, optional, "[top, bottom, left, right]; overrides padding"}};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// The conv gradients' layouts (the layout pass sets them, as conv2d's).
const AttrDecl kSrcLayout{"src_layout", str, "nhwc", "x's memory layout, as conv2d's"};
const AttrDecl kDstLayout{"dst_layout", str, "nhwc", "y's memory layout, as conv2d's"};

void register_matmul_conv() {
  add_op(kGroup, {.name = op::matmul,
                  .signature = "(a[M, K], b[K, N]) -> y[M, N]",
                  .doc = "The matrix product, either operand optionally transposed.",
                  .attrs = {{"transpose_a", boolean, false, "use a's transpose ([K, M] given)"},
                            {"transpose_b", boolean, false, "use b's transpose ([N, K] given)"}},
                  .infer = infer_matmul,
                  .grad = grad_matmul,
                  .bf16 = true,
                  .rows = RowRule::by_attrs,
                  .keeps_rows = keeps_rows_matmul,
                  .onnx = {.op = "MatMul"}});
  add_op(kGroup,
         {.name = op::conv2d,
          .signature = "(x[N, H, W, C], w[kh, kw, C/groups, O][, bias[O]]) -> y[N, OH, OW, O]",
          .doc = "2-D convolution (cross-correlation), NHWC with HWIO filters; the "
                 "fusion pass folds a following bias_add and relu into it.",
          .attrs = conv_attrs(
              {{"fused_bias", boolean, false, "input 2 is a bias added to y"},
               {"activation", str, "linear",
                "a fused activation it applies last (one of takes_activations)"},
               {"src_layout", str, "nhwc",
                "x's memory layout: \"nhwc\", or \"nChw16c\" (channels blocked by 16), which the "
                "cpu backend's layout pass sets when every reader of a conv's output takes it"},
               {"dst_layout", str, "nhwc", "y's memory layout, as src_layout"}}),
          .infer = infer_conv,
          .grad = grad_conv,
          .bf16 = true,
          .rows = RowRule::per_row,
          .fusion = kFuseTakesBias | kFuseTakesActivation,
          .takes_activations = kConvActivations,
          .onnx = {.op = "Conv"}});
  add_op(kGroup, {.name = op::conv2d_backward_input,
                  .signature = "(dy, w) -> dx",
                  .doc = "Gradient of conv2d with respect to x (linear in dy and w, so it has a "
                         "gradient too).",
                  .attrs = conv_attrs(
                      {{"input_shape", i64_list, required, "x's shape"}, kSrcLayout, kDstLayout}),
                  .infer = infer_conv_bwd_input,
                  .grad = grad_conv_bwd_input,
                  .bf16 = true,
                  .rows = RowRule::per_row,  // Conv2DTranspose's forward
                  .onnx = {.none = kOnnxGradient}});
  add_op(kGroup, {.name = op::conv2d_backward_filter,
                  .signature = "(dy, x) -> dw",
                  .doc = "Gradient of conv2d with respect to the filter (linear, so it has a "
                         "gradient too).",
                  .attrs = conv_attrs(
                      {{"filter_shape", i64_list, required, "w's shape"}, kSrcLayout, kDstLayout}),
                  .infer = infer_conv_bwd_filter,
                  .grad = grad_conv_bwd_filter,
                  .bf16 = true,
                  .onnx = {.none = kOnnxGradient}});
}

// Made by the cpu backend's pass (src/backends/cpu/conv_chain.cpp) in programs that need no
// gradient through the pair: oneDNN computes the depthwise conv from the 1x1 conv's output rows
// while they are still in cache.
void register_fused_convs() {
  const char* act = "\"linear\" or one of conv2d's takes_activations the cpu pair applies";
  add_op(kGroup,
         {.name = op::conv2d_pointwise_depthwise,
          .signature = "(x[N, H, W, C], w[1, 1, C, M], b[M], wd[kh, kw, 1, M], bd[M]) -> "
                       "y[N, OH, OW, M]",
          .doc = "A 1x1 conv2d (bias b, then activation) whose output only a depthwise conv2d "
                 "(bias bd, then dw_activation) reads, in one node: the intermediate "
                 "[N, H, W, M] is never written to memory.",
          .attrs = {{"activation", str, "linear", std::string("the 1x1 conv's: ") + act},
                    {"dw_activation", str, "linear", std::string("the depthwise conv's: ") + act},
                    {"dw_strides", i64_list, Ints{1, 1}, "the depthwise conv's [sh, sw]"},
                    {"dw_pads", i64_list, Ints{0, 0, 0, 0},
                     "the depthwise conv's [top, bottom, left, right]"},
                    kSrcLayout,
                    kDstLayout},
          .infer = infer_pointwise_depthwise,
          .rows = RowRule::per_row,
          .fusion = kFuseTakesActivation,  // both convs' (only the cpu pass makes the node)
          .takes_activations = bit(FusedActivation::relu) | bit(FusedActivation::relu6) |
                               bit(FusedActivation::swish),
          .onnx = {.none = kOnnxBackendFusion},
          .xla = {.none = "made only by the cpu backend's fusion pass, after the xla backend "
                          "would have lowered the two conv2d nodes"}});
}

void register_pools() {
  add_op(kGroup,
         {.name = op::max_pool2d,
          .signature = "(x[N, H, W, C]) -> y",
          .doc = "The maximum of each window, NHWC.",
          .attrs = pool_attrs(
              {{"src_layout", str, "nhwc", "x's memory layout, as conv2d's (y is always nhwc)"}}),
          .infer = infer_pool,
          .grad =
              [](GradBuilder& b, const Node& n, const Values& dy) {
                return Values{b.add(op::max_pool2d_grad, {dy[0], n.inputs[0], Value{n.id, 0}},
                                    attrs_for(op::max_pool2d_grad, n.attrs))};
              },
          .bf16 = true,
          .rows = RowRule::per_row,
          .onnx = {.op = "MaxPool"}});
  add_op(kGroup, {.name = op::max_pool2d_grad,
                  .signature = "(dy, x, y) -> dx",
                  .doc = "Gradient of max_pool2d: dy goes to the first maximum of each window "
                         "(found again from x and y, no saved indices).",
                  .attrs = pool_attrs({{"src_layout", str, "nhwc",
                                        "x's and dx's memory layout, as conv2d's (dy and y are "
                                        "always nhwc)"},
                                       {"activation", str, "linear",
                                        "\"relu\": dx is masked by x > 0 (the fusion pass folds "
                                        "a following relu_grad(dx, x) into it)"}}),
                  .infer = infer_max_pool_grad,
                  .bf16 = true,
                  .fusion = kFuseTakesActivationGrad,
                  .takes_activations = bit(FusedActivation::relu),
                  .onnx = {.none = kOnnxGradient}});
  add_op(kGroup, {.name = op::avg_pool2d,
                  .signature = "(x[N, H, W, C]) -> y",
                  .doc = "The mean of each window, padding excluded from the count (Keras).",
                  .attrs = pool_attrs({}),
                  .infer = infer_pool,
                  .grad =
                      [](GradBuilder& b, const Node& n, const Values& dy) {
                        Attrs a = attrs_for(op::avg_pool2d_grad, n.attrs);
                        a.set("input_shape", b.type(n.inputs[0]).shape.vec());
                        return Values{b.add(op::avg_pool2d_grad, {dy[0]}, a)};
                      },
                  .bf16 = true,
                  .rows = RowRule::per_row,
                  .onnx = {.op = "AveragePool"}});
  add_op(kGroup,
         {.name = op::avg_pool2d_grad,
          .signature = "(dy) -> dx",
          .doc = "Gradient of avg_pool2d (linear: its gradient is avg_pool2d).",
          .attrs = pool_attrs({{"input_shape", i64_list, required, "x's shape"}}),
          .infer = infer_avg_pool_grad,
          .grad =
              [](GradBuilder& b, const Node& n, const Values& dy) {
                return Values{b.add(op::avg_pool2d, {dy[0]}, attrs_for(op::avg_pool2d, n.attrs))};
              },
          .bf16 = true,
          .onnx = {.none = kOnnxGradient}});
}

// upsample2d's attributes (and its gradient's).
std::vector<AttrDecl> upsample_attrs() {
  return {{"size", i64_list, Ints{2, 2}, "[sh, sw]: y is sh times taller and sw times wider"},
          {"interpolation", str, "nearest",
           "\"nearest\" (each pixel repeated) or \"bilinear\" (half-pixel centres, edges "
           "clamped: keras.layers.UpSampling2D's, jax.image.resize's)"}};
}

// The checked [sh, sw] and interpolation of an upsample node.
std::vector<int64_t> upsample_size(const Node& n) {
  const std::string& ip = attr_s(n, "interpolation");
  LS_CHECK(ip == "nearest" || ip == "bilinear",
           "interpolation must be \"nearest\" or \"bilinear\", got \"", ip, "\"");
  return pair_attr(n, "size");
}

void register_upsample() {
  add_op(kGroup,
         {.name = op::upsample2d,
          .signature = "(x[N, H, W, C]) -> y[N, H * sh, W * sw, C]",
          .doc = "keras.layers.UpSampling2D: each image enlarged by whole factors, nearest or "
                 "bilinear (linear in x: its gradient is upsample2d_grad).",
          .attrs = upsample_attrs(),
          .infer =
              [](const Node& n, const Types& in) {
                expect_inputs(in, 1);
                expect_f32(in[0], "x");
                const Shape& x = in[0].shape;
                LS_CHECK(x.rank() == 4,
                         "expects NHWC images [batch, height, width, channels], got ", x.str());
                auto s = upsample_size(n);
                return Types{f32(
                    Shape{x[0], x[1] < 0 ? -1 : x[1] * s[0], x[2] < 0 ? -1 : x[2] * s[1], x[3]})};
              },
          .grad =
              [](GradBuilder& b, const Node& n, const Values& dy) {
                return Values{b.add(op::upsample2d_grad, {dy[0]}, n.attrs)};
              },
          .bf16 = true,
          .rows = RowRule::per_row,
          .onnx = {.op = "Resize"}});
  add_op(kGroup,
         {.name = op::upsample2d_grad,
          .signature = "(dy[N, H * sh, W * sw, C]) -> dx[N, H, W, C]",
          .doc = "Gradient of upsample2d: each dy value added back to the pixels it was "
                 "interpolated from (linear: its gradient is upsample2d).",
          .attrs = upsample_attrs(),
          .infer =
              [](const Node& n, const Types& in) {
                expect_inputs(in, 1);
                expect_f32(in[0], "dy");
                const Shape& d = in[0].shape;
                LS_CHECK(d.rank() == 4, "expects NHWC dy, got ", d.str());
                auto s = upsample_size(n);
                LS_CHECK((d[1] < 0 || d[1] % s[0] == 0) && (d[2] < 0 || d[2] % s[1] == 0), "dy ",
                         d.str(), " is not a multiple of size [", s[0], ", ", s[1], "]");
                return Types{f32(
                    Shape{d[0], d[1] < 0 ? -1 : d[1] / s[0], d[2] < 0 ? -1 : d[2] / s[1], d[3]})};
              },
          .grad = [](GradBuilder& b, const Node& n,
                     const Values& dy) { return Values{b.add(op::upsample2d, {dy[0]}, n.attrs)}; },
          .bf16 = true,
          .rows = RowRule::per_row,
          .onnx = {.none = kOnnxGradient}});
}

}  // namespace

LOCKSTEP_REGISTER(nn_ops) {
  register_matmul_conv();
  register_fused_convs();
  register_pools();
  register_upsample();
}

}  // namespace lockstep::ops
