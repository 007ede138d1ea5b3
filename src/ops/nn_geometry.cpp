// Conv/pool geometry: Keras padding rules and shape validation with actionable errors.
#include "ops/internal/nn_geometry.h"

#include "lockstep/core/error.h"

namespace lockstep::ops {

std::vector<int64_t> pair_attr(const Attrs& a, const std::string& key, std::vector<int64_t> dflt) {
  if (!a.has(key)) return dflt;
  std::vector<int64_t> v;
  if (std::holds_alternative<int64_t>(a.map().at(key))) v = {a.i(key)};
  else v = a.ints(key);
  if (v.size() == 1) v.push_back(v[0]);
  LS_CHECK(v.size() == 2, "attribute '", key, "' needs 2 values, got ", v.size());
  LS_CHECK(v[0] >= 1 && v[1] >= 1, "attribute '", key, "' must be positive, got [", v[0], ", ",
           v[1], "]");
  return v;
}

bool flag_attr(const Attrs& a, const std::string& key) {
  if (!a.has(key)) return false;
  const AttrValue& v = a.map().at(key);
  if (std::holds_alternative<int64_t>(v)) return std::get<int64_t>(v) != 0;
  return a.b(key);
}

void axis_geometry(int64_t in, int64_t k, int64_t stride, int64_t dil, const std::string& padding,
                   int64_t* out, int64_t* pad_lo, int64_t* pad_hi) {
  const int64_t eff = (k - 1) * dil + 1;
  if (padding == "same") {
    if (in < 0) { *out = -1; *pad_lo = *pad_hi = 0; return; }
    *out = (in + stride - 1) / stride;
    int64_t total = std::max<int64_t>((*out - 1) * stride + eff - in, 0);
    *pad_lo = total / 2;
    *pad_hi = total - *pad_lo;
  } else {
    LS_CHECK(padding == "valid", "padding must be \"valid\" or \"same\", got \"", padding, "\"");
    *pad_lo = *pad_hi = 0;
    if (in < 0) { *out = -1; return; }
    LS_CHECK(in >= eff, "input size ", in, " is smaller than the window ", eff,
             " with padding=\"valid\" (use padding=\"same\" or a smaller kernel/pool)");
    *out = (in - eff) / stride + 1;
  }
}

static void apply_geometry(ConvGeom& g, const Attrs& a, const std::vector<int64_t>& dil) {
  auto s = pair_attr(a, "strides", {1, 1});
  g.SH = s[0]; g.SW = s[1]; g.DH = dil[0]; g.DW = dil[1];
  if (a.has("pads")) {
    auto p = a.ints("pads");
    LS_CHECK(p.size() == 4, "pads must be [top, bottom, left, right], got ", p.size(), " values");
    g.PT = p[0]; g.PB = p[1]; g.PL = p[2]; g.PR = p[3];
    auto one = [](int64_t in, int64_t k, int64_t st, int64_t d, int64_t lo, int64_t hi) -> int64_t {
      if (in < 0) return -1;
      int64_t eff = (k - 1) * d + 1;
      LS_CHECK(in + lo + hi >= eff, "padded input size ", in + lo + hi, " is smaller than the window ", eff);
      return (in + lo + hi - eff) / st + 1;
    };
    g.OH = one(g.H, g.KH, g.SH, g.DH, g.PT, g.PB);
    g.OW = one(g.W, g.KW, g.SW, g.DW, g.PL, g.PR);
  } else {
    std::string pad = a.s("padding", "valid");
    axis_geometry(g.H, g.KH, g.SH, g.DH, pad, &g.OH, &g.PT, &g.PB);
    axis_geometry(g.W, g.KW, g.SW, g.DW, pad, &g.OW, &g.PL, &g.PR);
  }
}

ConvGeom conv_geometry(const Shape& x, const Shape& w, const Attrs& a) {
  LS_CHECK(x.rank() == 4, "expects a 4-D input [batch, height, width, channels], got ",
           x.str(), " (check Input shape, or add a Reshape before the convolution)");
  LS_CHECK(w.rank() == 4, "expects a 4-D filter [kh, kw, in/groups, out], got ", w.str());
  ConvGeom g;
  g.N = x[0]; g.H = x[1]; g.W = x[2]; g.C = x[3];
  g.KH = w[0]; g.KW = w[1]; g.O = w[3];
  g.G = a.i("groups", 1);
  LS_CHECK(g.G >= 1, "groups must be >= 1, got ", g.G);
  LS_CHECK(g.C > 0, "input channel count must be known, got ", x.str());
  LS_CHECK(g.C == w[2] * g.G, "input has ", g.C, " channels, kernel expects ", w[2] * g.G,
           (g.G > 1 ? " (" + std::to_string(w[2]) + " per group x " + std::to_string(g.G) + " groups)" : ""),
           " (check Input shape)");
  LS_CHECK(g.O % g.G == 0, "filters (", g.O, ") must be divisible by groups (", g.G, ")");
  g.fused_bias = flag_attr(a, "fused_bias");
  std::string act = a.s("activation", "linear");
  LS_CHECK(act == "linear" || act == "relu", "conv2d activation must be linear or relu, got ", act);
  g.relu = act == "relu";
  apply_geometry(g, a, pair_attr(a, "dilations", {1, 1}));
  return g;
}

ConvGeom pool_geometry(const Shape& x, const Attrs& a) {
  LS_CHECK(x.rank() == 4, "expects a 4-D input [batch, height, width, channels], got ",
           x.str(), " (check Input shape)");
  auto k = pair_attr(a, "pool_size", {2, 2});
  ConvGeom g;
  g.N = x[0]; g.H = x[1]; g.W = x[2]; g.C = x[3];
  g.KH = k[0]; g.KW = k[1]; g.O = g.C; g.G = g.C;
  Attrs b = a;
  if (!a.has("strides")) b.set("strides", k);
  apply_geometry(g, b, {1, 1});
  return g;
}

}  // namespace lockstep::ops
