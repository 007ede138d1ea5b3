// Conv/pool geometry: Keras padding rules and shape validation with actionable errors.
#include "ops/internal/nn_geometry.h"

#include "lockstep/core/error.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep::ops {

std::vector<int64_t> pair_attr(const Node& n, const std::string& key) {
  std::vector<int64_t> v;
  auto it = n.attrs.map().find(key);
  if (it != n.attrs.map().end() && std::holds_alternative<int64_t>(it->second))
    v = {std::get<int64_t>(it->second)};
  else
    v = attr_ints(n, key);
  if (v.size() == 1) v.push_back(v[0]);
  LS_CHECK(v.size() == 2, "attribute '", key, "' needs 2 values, got ", v.size());
  LS_CHECK(v[0] >= 1 && v[1] >= 1, "attribute '", key, "' must be positive, got [", v[0], ", ",
           v[1], "]");
  return v;
}

void axis_geometry(int64_t in, int64_t k, int64_t stride, int64_t dil, const std::string& padding,
                   int64_t* out, int64_t* pad_lo, int64_t* pad_hi) {
  const int64_t eff = (k - 1) * dil + 1;
  if (padding == "same") {
    if (in < 0) {
      *out = -1;
      *pad_lo = *pad_hi = 0;
      return;
    }
    *out = (in + stride - 1) / stride;
    int64_t total = std::max<int64_t>((*out - 1) * stride + eff - in, 0);
    *pad_lo = total / 2;
    *pad_hi = total - *pad_lo;
  } else {
    LS_CHECK(padding == "valid", "padding must be \"valid\" or \"same\", got \"", padding, "\"");
    *pad_lo = *pad_hi = 0;
    if (in < 0) {
      *out = -1;
      return;
    }
    LS_CHECK(in >= eff, "input size ", in, " is smaller than the window ", eff,
             " with padding=\"valid\" (use padding=\"same\" or a smaller kernel/pool)");
    *out = (in - eff) / stride + 1;
  }
}

// Strides, dilations, padding (Keras rule or explicit pads) and the output size.
static void apply_geometry(ConvGeom& g, const Node& n, const std::vector<int64_t>& strides,
                           const std::vector<int64_t>& dil) {
  g.SH = strides[0];
  g.SW = strides[1];
  g.DH = dil[0];
  g.DW = dil[1];
  if (n.attrs.has("pads")) {
    const auto& p = attr_ints(n, "pads");
    LS_CHECK(p.size() == 4, "pads must be [top, bottom, left, right], got ", p.size(), " values");
    g.PT = p[0];
    g.PB = p[1];
    g.PL = p[2];
    g.PR = p[3];
    auto one = [](int64_t in, int64_t k, int64_t st, int64_t d, int64_t lo, int64_t hi) -> int64_t {
      if (in < 0) return -1;
      int64_t eff = (k - 1) * d + 1;
      LS_CHECK(in + lo + hi >= eff, "padded input size ", in + lo + hi,
               " is smaller than the window ", eff);
      return (in + lo + hi - eff) / st + 1;
    };
    g.OH = one(g.H, g.KH, g.SH, g.DH, g.PT, g.PB);
    g.OW = one(g.W, g.KW, g.SW, g.DW, g.PL, g.PR);
  } else {
    const std::string& pad = attr_s(n, "padding");
    axis_geometry(g.H, g.KH, g.SH, g.DH, pad, &g.OH, &g.PT, &g.PB);
    axis_geometry(g.W, g.KW, g.SW, g.DW, pad, &g.OW, &g.PL, &g.PR);
  }
}

ConvGeom conv_geometry(const Shape& x, const Shape& w, const Node& n) {
  LS_CHECK(x.rank() == 4, "expects a 4-D input [batch, height, width, channels], got ", x.str(),
           " (check Input shape, or add a Reshape before the convolution)");
  LS_CHECK(w.rank() == 4, "expects a 4-D filter [kh, kw, in/groups, out], got ", w.str());
  ConvGeom g;
  g.N = x[0];
  g.H = x[1];
  g.W = x[2];
  g.C = x[3];
  g.KH = w[0];
  g.KW = w[1];
  g.O = w[3];
  g.G = attr_i(n, "groups");
  LS_CHECK(g.G >= 1, "groups must be >= 1, got ", g.G);
  LS_CHECK(g.C > 0, "input channel count must be known, got ", x.str());
  LS_CHECK(
      g.C == w[2] * g.G, "input has ", g.C, " channels, kernel expects ", w[2] * g.G,
      (g.G > 1 ? " (" + std::to_string(w[2]) + " per group x " + std::to_string(g.G) + " groups)"
               : ""),
      " (check Input shape)");
  LS_CHECK(g.O % g.G == 0, "filters (", g.O, ") must be divisible by groups (", g.G, ")");
  apply_geometry(g, n, pair_attr(n, "strides"), pair_attr(n, "dilations"));
  return g;
}

ConvGeom conv2d_geometry(const Shape& x, const Shape& w, const Node& n) {
  ConvGeom g = conv_geometry(x, w, n);
  g.fused_bias = attr_b(n, "fused_bias");
  g.act = attr_activation(n);
  return g;
}

PointwiseDepthwise pointwise_depthwise_geometry(const Shape& x, const Shape& w, const Shape& wd,
                                                const Node& n) {
  Node c;
  c.op = op::conv2d;
  c.name = n.name;
  c.attrs.set("fused_bias", true).set("activation", fused_activation_name(attr_activation(n)));
  PointwiseDepthwise r;
  r.pw = conv2d_geometry(x, w, c);
  LS_CHECK(r.pw.KH == 1 && r.pw.KW == 1 && r.pw.G == 1 && r.pw.SH == 1 && r.pw.SW == 1,
           "the pointwise filter must be 1x1, got ", w.str());
  c.attrs.set("activation", fused_activation_name(attr_activation(n, "dw_activation")))
      .set("strides", attr_ints(n, "dw_strides"))
      .set("pads", attr_ints(n, "dw_pads"))
      .set("groups", AttrValue(r.pw.O));
  r.dw = conv2d_geometry(Shape{r.pw.N, r.pw.OH, r.pw.OW, r.pw.O}, wd, c);
  LS_CHECK(r.dw.O == r.pw.O, "the depthwise filter must be [kh, kw, 1, ", r.pw.O, "], got ",
           wd.str());
  return r;
}

ConvGeom pool_geometry(const Shape& x, const Node& n) {
  LS_CHECK(x.rank() == 4, "expects a 4-D input [batch, height, width, channels], got ", x.str(),
           " (check Input shape)");
  auto k = pair_attr(n, "pool_size");
  ConvGeom g;
  g.N = x[0];
  g.H = x[1];
  g.W = x[2];
  g.C = x[3];
  g.KH = k[0];
  g.KW = k[1];
  g.O = g.C;
  g.G = g.C;
  apply_geometry(g, n, n.attrs.has("strides") ? pair_attr(n, "strides") : k, {1, 1});
  return g;
}

Shape input_shape_attr(const Node& n, int64_t batch) {
  Shape xs(attr_ints(n, "input_shape"));
  LS_CHECK(xs.rank() >= 1, "input_shape must not be empty");
  xs[0] = batch;
  return xs;
}

ConvGeom pool_grad_geometry(const Node& n, const Shape& dy) {
  return pool_geometry(input_shape_attr(n, dy[0]), n);
}

}  // namespace lockstep::ops
