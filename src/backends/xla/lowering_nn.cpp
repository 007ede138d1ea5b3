// Lowerings of matmul, conv2d and its two gradients, and the pools (NHWC, HWIO filters). The
// conv gradients are convolutions themselves: the input gradient convolves the stride-dilated
// dy with the spatially reversed kernel; the filter gradient convolves x with dy, batch and
// feature dims swapped. The max-pool gradient is select_and_scatter. upsample2d is two
// products with interpolation matrices.
#include <limits>

#include "backends/xla/lowering.h"
#include "lockstep/graph/op_registry.h"
#include "ops/internal/nn_geometry.h"

namespace lockstep::xla {

namespace {

using Values = std::vector<HloValue>;
using ops::ConvGeom;

void check_nhwc(const Node& n) {
  for (const char* key : {"src_layout", "dst_layout"})
    if (n.attrs.has(key))
      LS_CHECK(attr_s(n, key) == "nhwc", "layout ", key, "=", attr_s(n, key),
               " is the cpu backend's; the xla backend takes nhwc");
}

Values matmul(LoweringContext& cx, const Node& n) {
  const bool ta = attr_b(n, "transpose_a"), tb = attr_b(n, "transpose_b");
  auto [a, b] = cx.contraction_operands(n, 0, 1);
  return {cx.b.dot_general(a, b, {}, {}, {ta ? 0 : 1}, {tb ? 1 : 0}, ElemType::f32)};
}

ConvWindow forward_window(const ConvGeom& g) {
  return {{g.SH, g.SW}, {{g.PT, g.PB}, {g.PL, g.PR}}, {}, {g.DH, g.DW}, g.G, 1};
}

Values conv2d(LoweringContext& cx, const Node& n) {
  check_nhwc(n);
  auto [x, w] = cx.contraction_operands(n, 0, 1);
  const ConvGeom g = ops::conv2d_geometry(cx.in_type(n, 0).shape, cx.in_type(n, 1).shape, n);
  HloValue y = cx.b.convolution(x, w, ConvDims::nhwc(), forward_window(g), ElemType::f32);
  if (g.fused_bias) y = cx.b.add(y, cx.broadcast_numpy(cx.in(n, 2), y.type.dims));
  return {lower_fused_activation(cx, g.act, y)};
}

// The input gradient's padding on one axis: the forward window's reach minus its padding, and
// on the high side whatever makes the result as long as the forward input.
std::pair<int64_t, int64_t> transposed_padding(int64_t in, int64_t out, int64_t k, int64_t stride,
                                               int64_t dil, int64_t pad_lo) {
  const int64_t eff = (k - 1) * dil + 1;
  const int64_t lo = eff - 1 - pad_lo;
  const int64_t hi = in + eff - 2 - (out - 1) * stride - lo;
  return {lo, hi};
}

// dx = conv(dy dilated by the strides, w reversed, groups regrouped: [kh, kw, O/G, C]).
Values conv2d_backward_input(LoweringContext& cx, const Node& n) {
  check_nhwc(n);
  auto [dy, w] = cx.contraction_operands(n, 0, 1);
  const Shape xs = ops::input_shape_attr(n, cx.in_type(n, 0).shape[0]);
  const ConvGeom g = ops::conv_geometry(xs, cx.in_type(n, 1).shape, n);
  // [kh, kw, C/G, O] -> [kh, kw, C/G, G, O/G] -> [kh, kw, O/G, G, C/G] -> [kh, kw, O/G, C].
  HloValue k = cx.b.reshape(w, {g.KH, g.KW, g.Cg(), g.G, g.Og()});
  k = cx.b.transpose(k, {0, 1, 4, 3, 2});
  k = cx.b.reverse(cx.b.reshape(k, {g.KH, g.KW, g.Og(), g.C}), {0, 1});
  ConvWindow win;
  win.padding = {transposed_padding(g.H, g.OH, g.KH, g.SH, g.DH, g.PT),
                 transposed_padding(g.W, g.OW, g.KW, g.SW, g.DW, g.PL)};
  win.lhs_dilation = {g.SH, g.SW};
  win.rhs_dilation = {g.DH, g.DW};
  win.feature_group_count = g.G;
  return {cx.b.convolution(dy, k, ConvDims::nhwc(), win, ElemType::f32)};
}

// dw[kh, kw, C/G, O] = conv(x as [C]-batch, N-feature input, dy as the kernel), window strides
// = the forward dilations, kernel dilation = the forward strides; groups via batch groups.
Values conv2d_backward_filter(LoweringContext& cx, const Node& n) {
  check_nhwc(n);
  auto [dy, x] = cx.contraction_operands(n, 0, 1);
  const Shape ws(attr_ints(n, "filter_shape"));
  const ConvGeom g = ops::conv_geometry(cx.in_type(n, 1).shape, ws, n);
  ConvDims d;
  d.input_batch = 3, d.input_feature = 0, d.input_spatial = {1, 2};
  d.kernel_input_feature = 0, d.kernel_output_feature = 3, d.kernel_spatial = {1, 2};
  d.output_batch = 2, d.output_feature = 3, d.output_spatial = {0, 1};
  ConvWindow win;
  win.strides = {g.DH, g.DW};
  win.rhs_dilation = {g.SH, g.SW};
  win.padding = {{g.PT, (g.KH - 1) * g.DH + (g.OH - 1) * g.SH + 1 - g.H - g.PT},
                 {g.PL, (g.KW - 1) * g.DW + (g.OW - 1) * g.SW + 1 - g.W - g.PL}};
  win.batch_group_count = g.G;
  return {cx.b.convolution(x, dy, d, win, ElemType::f32)};
}

// reduce_window / select_and_scatter window of a pool over NHWC.
Window pool_window(const ConvGeom& g) {
  return {{1, g.KH, g.KW, 1}, {1, g.SH, g.SW, 1}, {{0, 0}, {g.PT, g.PB}, {g.PL, g.PR}, {0, 0}}};
}

Values max_pool2d(LoweringContext& cx, const Node& n) {
  check_nhwc(n);
  HloValue x = cx.in(n, 0);
  const ConvGeom g = ops::pool_geometry(cx.in_type(n, 0).shape, n);
  HloValue init = cx.b.scalar(x.type.elem, -std::numeric_limits<double>::infinity());
  return {cx.b.reduce_window(x, init, pool_window(g), Reducer::max)};
}

// (dy, x, y): dy to the first maximum of each window; activation relu masks dx by x > 0.
Values max_pool2d_grad(LoweringContext& cx, const Node& n) {
  check_nhwc(n);
  HloValue dy = cx.in(n, 0), x = cx.in(n, 1);
  const ConvGeom g = ops::pool_geometry(cx.in_type(n, 1).shape, n);
  HloValue dx = cx.b.select_and_scatter(x, dy, cx.b.scalar(x.type.elem, 0.0), pool_window(g));
  if (attr_activation(n) == FusedActivation::relu)
    dx = cx.b.select(cx.b.compare(x, cx.full_like(x, 0.0), Compare::GT), dx, cx.full_like(dx, 0.0));
  return {dx};
}

// The number of input elements under each output window (padding excluded), [1, OH, OW, 1].
HloValue window_counts(LoweringContext& cx, const ConvGeom& g) {
  HloValue ones = cx.full({ElemType::f32, {1, g.H, g.W, 1}}, 1.0);
  return cx.b.reduce_window(ones, cx.b.scalar(ElemType::f32, 0.0), pool_window(g), Reducer::add);
}

Values avg_pool2d(LoweringContext& cx, const Node& n) {
  HloValue x = cx.in(n, 0);
  const ConvGeom g = ops::pool_geometry(cx.in_type(n, 0).shape, n);
  HloValue sum = cx.b.reduce_window(x, cx.b.scalar(x.type.elem, 0.0), pool_window(g), Reducer::add);
  HloValue count = cx.b.broadcast_in_dim(window_counts(cx, g), sum.type.dims, {0, 1, 2, 3});
  return {cx.b.divide(sum, count)};
}

// dx[h, w] = sum over the windows covering (h, w) of dy / count: dy / count stride-dilated and
// padded, then summed over each window.
Values avg_pool2d_grad(LoweringContext& cx, const Node& n) {
  HloValue dy = cx.in(n, 0);
  const ConvGeom g = ops::pool_grad_geometry(n, cx.in_type(n, 0).shape);
  HloValue count = cx.b.broadcast_in_dim(window_counts(cx, g), dy.type.dims, {0, 1, 2, 3});
  HloValue share = cx.b.divide(dy, count);
  auto [lo_h, hi_h] = transposed_padding(g.H, g.OH, g.KH, g.SH, 1, g.PT);
  auto [lo_w, hi_w] = transposed_padding(g.W, g.OW, g.KW, g.SW, 1, g.PL);
  HloValue spread = cx.b.pad(share, cx.b.scalar(dy.type.elem, 0.0), {0, lo_h, lo_w, 0},
                             {0, hi_h, hi_w, 0}, {0, g.SH - 1, g.SW - 1, 0});
  Window w{{1, g.KH, g.KW, 1}, {}, {}};
  return {cx.b.reduce_window(spread, cx.b.scalar(dy.type.elem, 0.0), w, Reducer::add)};
}

// upsample2d: per spatial axis, a product with the [n * s, n] interpolation matrix (a constant
// of upsample_tap's weights); its gradient is the same with the matrices transposed.
HloValue interpolate_axis(LoweringContext& cx, const HloValue& x, int axis, int64_t n, int64_t s,
                          bool bilinear, bool transpose) {
  const int64_t m = n * s;
  std::vector<double> a(size_t(m * n), 0.0);  // [m, n], or [n, m] transposed
  for (int64_t j = 0; j < m; ++j) {
    ops::UpsampleTap t = ops::upsample_tap(n, s, bilinear, j);
    for (auto [i, w] : {std::pair{t.i0, t.w0}, {t.i1, t.w1}})
      a[size_t(transpose ? i * m + j : j * n + i)] += w;
  }
  const int64_t rows = transpose ? n : m, cols = transpose ? m : n;
  HloValue mat = cx.b.constant(HloType{ElemType::f32, {rows, cols}}, a);
  // [rows, x's other dims] -> rows back at `axis`.
  HloValue r = cx.b.dot_general(mat, x, {}, {}, {1}, {axis});
  std::vector<int64_t> perm;
  for (int i = 1; i <= axis; ++i) perm.push_back(i);
  perm.push_back(0);
  for (int i = axis + 1; i < int(x.type.dims.size()); ++i) perm.push_back(i);
  return cx.b.transpose(r, perm);
}

Values upsample(LoweringContext& cx, const Node& n, bool grad) {
  HloValue x = cx.in(n, 0);
  const auto s = ops::pair_attr(n, "size");
  const bool bilinear = attr_s(n, "interpolation") == "bilinear";
  for (int axis : {1, 2}) {
    const int64_t len = x.type.dims[size_t(axis)], f = s[size_t(axis - 1)];
    x = interpolate_axis(cx, x, axis, grad ? len / f : len, f, bilinear, grad);
  }
  return {x};
}

}  // namespace

LOCKSTEP_REGISTER(xla_nn_lowerings) {
  register_lowering(op::upsample2d,
                    [](LoweringContext& cx, const Node& n) { return upsample(cx, n, false); });
  register_lowering(op::upsample2d_grad,
                    [](LoweringContext& cx, const Node& n) { return upsample(cx, n, true); });
  register_lowering(op::matmul, matmul);
  register_lowering(op::conv2d, conv2d);
  register_lowering(op::conv2d_backward_input, conv2d_backward_input);
  register_lowering(op::conv2d_backward_filter, conv2d_backward_filter);
  register_lowering(op::max_pool2d, max_pool2d);
  register_lowering(op::max_pool2d_grad, max_pool2d_grad);
  register_lowering(op::avg_pool2d, avg_pool2d);
  register_lowering(op::avg_pool2d_grad, avg_pool2d_grad);
}

}  // namespace lockstep::xla
