// Lowerings of the deterministic image adjustments (src/imaging/augment_kernels.cpp computes the
// same): flip, brightness and contrast with their gradients, on NHWC images with one parameter
// per image. uint8 images compute in float and round back as the reference's store<uint8_t>
// does (nearest, saturating). The random ops, crops, affine transforms and resize declare why
// they have no lowering (OpDef::xla in src/ops/image_ops.cpp).
#include "backends/xla/lowering.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep::xla {

namespace {

using Values = std::vector<HloValue>;

// Per-image values p[N] broadcast over the images' [N, H, W, C].
HloValue per_image(LoweringContext& cx, const HloValue& p, const HloValue& x) {
  return cx.b.broadcast_in_dim(p, x.type.dims, {0});
}

// Column k of a parameter table [N, K], as [N].
HloValue column(LoweringContext& cx, const HloValue& table, int64_t k) {
  const int64_t n = table.type.dims[0];
  return cx.b.reshape(cx.b.slice(table, {0, k}, {n, k + 1}), {n});
}

HloValue as_f32(LoweringContext& cx, const HloValue& x) {
  return x.type.elem == ElemType::f32 ? x : cx.b.convert(x, ElemType::f32);
}

HloValue clamp(LoweringContext& cx, const HloValue& v, double lo, double hi) {
  return cx.b.maximum(cx.b.minimum(v, cx.full_like(v, hi)), cx.full_like(v, lo));
}

// A float result stored as the images' element type (uint8: round half up, saturate).
HloValue store_as(LoweringContext& cx, const HloValue& v, ElemType elem) {
  if (elem != ElemType::u8) return v;
  HloValue r = cx.b.floor(cx.b.add(v, cx.full_like(v, 0.5)));
  return cx.b.convert(clamp(cx, r, 0.0, 255.0), ElemType::u8);
}

// dy where lo <= v <= hi (the output was not clipped), else 0.
HloValue unclipped(LoweringContext& cx, const HloValue& dy, const HloValue& v, double lo,
                   double hi) {
  HloValue zero = cx.full_like(dy, 0.0);
  HloValue below_hi = cx.b.select(cx.b.compare(v, cx.full_like(v, hi), Compare::LE), dy, zero);
  return cx.b.select(cx.b.compare(v, cx.full_like(v, lo), Compare::GE), below_hi, zero);
}

std::pair<double, double> value_range(const Node& n) {
  const std::vector<double>& r = attr_floats(n, "value_range");
  return {double(float(r.at(0))), double(float(r.at(1)))};
}

// (x, flags[N, 2]) -> y: reversed along W where flags[i, 0] != 0, along H where flags[i, 1] != 0.
Values flip(LoweringContext& cx, const Node& n) {
  HloValue x = cx.raw(n, 0), flags = cx.in(n, 1);
  for (int64_t k : {0, 1}) {
    HloValue f = column(cx, flags, k);
    HloValue on = cx.b.compare(f, cx.full_like(f, 0.0), Compare::NE);
    x = cx.b.select(per_image(cx, on, x), cx.b.reverse(x, {k == 0 ? 2 : 1}), x);
  }
  return {x};
}

// (x, deltas[N]) -> clip(x + delta).
Values brightness(LoweringContext& cx, const Node& n) {
  HloValue x = cx.raw(n, 0), xf = as_f32(cx, x);
  auto [lo, hi] = value_range(n);
  HloValue v = cx.b.add(xf, per_image(cx, cx.in(n, 1), xf));
  return {store_as(cx, clamp(cx, v, lo, hi), x.type.elem)};
}

Values brightness_grad(LoweringContext& cx, const Node& n) {
  HloValue dy = cx.in(n, 0), x = cx.in(n, 1);
  auto [lo, hi] = value_range(n);
  return {unclipped(cx, dy, cx.b.add(x, per_image(cx, cx.in(n, 2), x)), lo, hi)};
}

// The mean of x [N, H, W, C] per image and channel, broadcast back to x's shape.
HloValue channel_mean(LoweringContext& cx, const HloValue& x) {
  const auto& d = x.type.dims;
  HloValue s = cx.reduce_sum(x, {1, 2});
  s = cx.b.multiply(s, cx.full_like(s, 1.0 / double(d[1] * d[2])));
  return cx.b.broadcast_in_dim(s, d, {0, 3});
}

// (x - mean) * f + mean, the mean per image and channel.
HloValue contrast_value(LoweringContext& cx, const HloValue& x, const HloValue& factors) {
  HloValue m = channel_mean(cx, x);
  return cx.b.add(cx.b.multiply(cx.b.subtract(x, m), per_image(cx, factors, x)), m);
}

Values contrast(LoweringContext& cx, const Node& n) {
  HloValue x = cx.raw(n, 0);
  auto [lo, hi] = value_range(n);
  HloValue v = contrast_value(cx, as_f32(cx, x), cx.in(n, 1));
  return {store_as(cx, clamp(cx, v, lo, hi), x.type.elem)};
}

// g = dy where unclipped; dx = f * g + (1 - f) * mean(g), the mean per image and channel.
Values contrast_grad(LoweringContext& cx, const Node& n) {
  HloValue dy = cx.in(n, 0), x = cx.in(n, 1), factors = cx.in(n, 2);
  auto [lo, hi] = value_range(n);
  HloValue g = unclipped(cx, dy, contrast_value(cx, x, factors), lo, hi);
  HloValue f = per_image(cx, factors, x);
  HloValue rest = cx.b.multiply(channel_mean(cx, g), cx.b.subtract(cx.full_like(f, 1.0), f));
  return {cx.b.add(cx.b.multiply(g, f), rest)};
}

}  // namespace

LOCKSTEP_REGISTER(xla_image_lowerings) {
  register_lowering(op::image_flip, flip);
  register_lowering(op::image_adjust_brightness, brightness);
  register_lowering(op::image_adjust_brightness_grad, brightness_grad);
  register_lowering(op::image_adjust_contrast, contrast);
  register_lowering(op::image_adjust_contrast_grad, contrast_grad);
}

}  // namespace lockstep::xla
