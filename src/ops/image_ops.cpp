// Image op declarations (augmentation and preprocessing layers), one table per transformation:
// random ops draw per-image parameters in-kernel from Philox (keyed like dropout: attr seed,
// node id, replica, model seed; counter = step) and output them next to the image, so the
// gradient replays the very same transformation through the deterministic op. Math:
// src/imaging/internal/augment.h; kernels: src/ops/image_kernels.cpp.
#include "imaging/internal/augment.h"
#include "ops/internal/op_util.h"

namespace lockstep::ops {

namespace {

using Types = std::vector<TensorType>;
using Values = std::vector<Value>;

const Shape& expect_image(const TensorType& t, const char* what) {
  LS_CHECK(t.shape.rank() == 4, what, " must be NHWC (rank 4), got ", t.shape.str());
  LS_CHECK(t.dtype == DType::f32 || t.dtype == DType::u8, what, " must be float32 or uint8, got ",
           dtype_name(t.dtype));
  return t.shape;
}

// Checks a per-image parameter tensor [N, k] (k = 0: [N]).
void expect_params(const TensorType& t, const Shape& x, int64_t k, const char* what) {
  expect_f32(t, what);
  Shape want = k ? Shape{x[0], k} : Shape{x[0]};
  bool ok = t.shape.rank() == want.rank();
  for (int i = 0; ok && i < want.rank(); ++i)
    ok = t.shape[i] == want[i] || t.shape[i] < 0 || want[i] < 0;
  LS_CHECK(ok, what, " must have shape ", want.str(), ", got ", t.shape.str());
}

Shape params_shape(const Shape& x, int64_t k) { return k ? Shape{x[0], k} : Shape{x[0]}; }

Shape resized(const Shape& x, int64_t h, int64_t w) { return Shape{x[0], h, w, x[3]}; }

bool is_f32(GradBuilder& b, Value v) { return b.type(v).dtype == DType::f32; }

void check_value_range(const Node& n) {
  const auto& r = attr_floats(n, "value_range");
  LS_CHECK(r.size() == 2 && r[0] < r[1], "value_range must be [low, high] with low < high");
}

void check_size(const Node& n, const char* h, const char* w) {
  LS_CHECK(attr_i(n, h) > 0 && attr_i(n, w) > 0, h, " and ", w, " must be positive, got ",
           attr_i(n, h), "x", attr_i(n, w));
}

void check_fill(const Node& n) {
  augment::parse_fill_mode(attr_s(n, "fill_mode"));
  auto ip = augment::parse_interpolation(attr_s(n, "interpolation"));
  LS_CHECK(ip != augment::Interp::area, "interpolation must be bilinear or nearest");
}

// True when `v` depends on a variable (a weight), i.e. a gradient through it would matter.
bool depends_on_variable(const Graph& g, Value v) {
  std::vector<char> seen(size_t(v.node + 1), 0);
  seen[v.node] = 1;
  for (int i = v.node; i >= 0; --i) {
    if (!seen[i]) continue;
    const Node& n = g.node(i);
    if (n.op == op::variable) return true;
    for (Value in : n.inputs) seen[in.node] = 1;
  }
  return false;
}

// (dy, offsets){input_height, input_width} -> dx.
Types crop_grad_infer(const Node& n, const Types& in) {
  expect_inputs(in, 2);
  expect_f32(in[0], "dy");
  const Shape& d = expect_image(in[0], "dy");
  expect_params(in[1], d, 2, "offsets");
  check_size(n, "input_height", "input_width");
  LS_CHECK(attr_i(n, "input_height") >= d[1] && attr_i(n, "input_width") >= d[2],
           "input size must be at least the crop size");
  return {f32(resized(d, attr_i(n, "input_height"), attr_i(n, "input_width")))};
}

constexpr const char* kGroup = "image";
// Why an image op has no StableHLO lowering (OpDef::xla.none). Models usually augment in the
// input pipeline (Dataset::map, on the host), which never reaches the xla backend.
constexpr const char* kXlaRandom =
    "draws its per-image parameters in the kernel (Philox keyed by node, replica and image); not "
    "lowered: augment in the input pipeline (Dataset::map) or train on the cpu backend";
constexpr const char* kXlaGather =
    "samples each image at its own offsets or coordinates (a gather; its gradient a scatter); not "
    "lowered: augment in the input pipeline (Dataset::map) or train on the cpu backend";
constexpr const char* kXlaResize =
    "tf.image.resize's interpolation taps are not lowered: resize in the input pipeline "
    "(Dataset::map) or on the cpu backend";
const AttrDecl kSeed{"seed", i64, 0, "part of the random key (with node id, replica, model seed)"};
const AttrDecl kValueRange{"value_range", f64_list, required,
                           "[low, high] of the pixel values; results are clipped to it"};
const std::vector<AttrDecl> kFillAttrs = {
    {"fill_mode", str, "reflect",
     "points outside the image: reflect, wrap (modulo the size, bilinear neighbours too), constant "
     "or nearest"},
    {"interpolation", str, "bilinear", "bilinear or nearest"},
    {"fill_value", f64, 0.0, "the value outside the image with fill_mode constant"}};

// The gradient of an op whose input 0 is the image and whose gradient is `op`(dy, params...):
// none for uint8 images, none for the parameter inputs.
GradFn image_grad(OpId op,
                  std::function<std::vector<Value>(GradBuilder&, const Node&, Value dy)> inputs,
                  int num_inputs) {
  return [op, inputs, num_inputs](GradBuilder& b, const Node& n, const Values& dy) {
    Values r(size_t(num_inputs), Value{});
    if (is_f32(b, n.inputs[0])) r[0] = b.add(op, inputs(b, n, dy[0]), attrs_for(op, n.attrs));
    return r;
  };
}

// ---- flip ----
std::vector<OpDef> flip_ops() {
  return {
      {.name = op::image_random_flip,
       .signature = "(x[N, H, W, C]) -> (y, flags[N, 2])",
       .doc = "Flips each image at random; flags = (horizontal, vertical) in {0, 1}.",
       .attrs = {{"mode", str, "horizontal_and_vertical",
                  "horizontal, vertical or horizontal_and_vertical"},
                 kSeed},
       .infer =
           [](const Node& n, const Types& in) {
             expect_inputs(in, 1);
             const Shape& x = expect_image(in[0], "images");
             augment::parse_flip_mode(attr_s(n, "mode"));
             return Types{in[0], f32(params_shape(x, 2))};
           },
       .grad = image_grad(
           op::image_flip,
           [](GradBuilder&, const Node& n, Value dy) {
             return Values{dy, Value{n.id, 1}};
           },
           1),
       .onnx = {.none = kOnnxAugmentation},
       .xla = {.none = kXlaRandom}},
      {.name = op::image_flip,
       .signature = "(x, flags[N, 2]) -> y",
       .doc =
           "Flips image i as flags[i] says (self-adjoint: its gradient is image_flip(dy, flags)).",
       .infer =
           [](const Node&, const Types& in) {
             expect_inputs(in, 2);
             expect_params(in[1], expect_image(in[0], "images"), 2, "flags");
             return Types{in[0]};
           },
       .grad = image_grad(
           op::image_flip,
           [](GradBuilder&, const Node& n, Value dy) {
             return Values{dy, n.inputs[1]};
           },
           2),
       .onnx = {.none = kOnnxImageAdjust}},
  };
}

// ---- affine (rotation, zoom, translation) ----
Types random_affine_infer(const Node& n, const Types& in) {
  expect_inputs(in, 1);
  const Shape& x = expect_image(in[0], "images");
  check_fill(n);
  for (const char* k :
       {"rotation", "zoom_height", "zoom_width", "translation_height", "translation_width"})
    if (n.attrs.has(k))
      LS_CHECK(attr_floats(n, k).size() == 2, "attribute '", k, "' needs [lower, upper]");
  return {in[0], f32(params_shape(x, 8))};
}

std::vector<AttrDecl> random_affine_attrs() {
  std::vector<AttrDecl> a = {
      {"rotation", f64_list, optional, "[lower, upper] fraction of 2 pi"},
      {"zoom_height", f64_list, optional, "[lower, upper]; zoom = 1 + factor"},
      {"zoom_width", f64_list, optional, "[lower, upper]; absent: the height's zoom"},
      {"translation_height", f64_list, optional, "[lower, upper] fraction of the height"},
      {"translation_width", f64_list, optional, "[lower, upper] fraction of the width"}};
  a.insert(a.end(), kFillAttrs.begin(), kFillAttrs.end());
  a.push_back(kSeed);
  return a;
}

std::vector<OpDef> affine_ops() {
  auto transform_grad = [](GradBuilder&, const Node& n, Value dy) {
    return Values{dy, n.inputs[1]};
  };
  return {
      {.name = op::image_random_affine,
       .signature = "(x[N, H, W, C]) -> (y, transforms[N, 8])",
       .doc = "Random Keras rotation/zoom/translation per image (zoom * rotation * translation).",
       .attrs = random_affine_attrs(),
       .infer = random_affine_infer,
       .grad = image_grad(
           op::image_affine_transform_grad,
           [](GradBuilder&, const Node& n, Value dy) {
             return Values{dy, Value{n.id, 1}};
           },
           1),
       .onnx = {.none = kOnnxAugmentation},
       .xla = {.none = kXlaRandom}},
      {.name = op::image_affine_transform,
       .signature = "(x, transforms[N, 8]) -> y",
       .doc = "Projective transform per image: output (x, y) samples the input at ((a0 x + a1 y + "
              "a2) / k, (b0 x + b1 y + b2) / k), k = c0 x + c1 y + 1 (ImageProjectiveTransformV3).",
       .attrs = kFillAttrs,
       .infer =
           [](const Node& n, const Types& in) {
             expect_inputs(in, 2);
             expect_params(in[1], expect_image(in[0], "images"), 8, "transforms");
             check_fill(n);
             return Types{in[0]};
           },
       .grad = image_grad(op::image_affine_transform_grad, transform_grad, 2),
       .onnx = {.none = kOnnxImageAdjust},
       .xla = {.none = kXlaGather}},
      {.name = op::image_affine_transform_grad,
       .signature = "(dy, transforms) -> dx",
       .doc = "Adjoint of image_affine_transform: scatters the interpolation weights (the fill "
              "gets none).",
       .attrs = kFillAttrs,
       .infer =
           [](const Node&, const Types& in) {
             expect_inputs(in, 2);
             expect_f32(in[0], "dy");
             expect_params(in[1], expect_image(in[0], "dy"), 8, "transforms");
             return Types{in[0]};
           },
       .grad =
           [](GradBuilder& b, const Node& n, const Values& dy) {
             Attrs a = attrs_for(op::image_affine_transform, n.attrs);
             a.set("fill_value", AttrValue(0.0));
             return Values{b.add(op::image_affine_transform, {dy[0], n.inputs[1]}, a), Value{}};
           },
       .onnx = {.none = kOnnxGradient},
       .xla = {.none = kXlaGather}},
  };
}

// ---- contrast and brightness: the same three ops each ----
struct ColorAdjust {
  OpId random, adjust, grad;  // image_random_contrast, image_adjust_contrast(+_grad)
  std::string params;         // what the per-image parameters are: "factors"
  std::string random_doc, adjust_doc, lower_doc, upper_doc;
  bool (*bounds_ok)(double lower, double upper);
  std::string bounds_rule;
};

Types adjust_grad_infer(const Node&, const Types& in, const std::string& params) {
  expect_inputs(in, 3);
  expect_f32(in[0], "dy");
  expect_f32(in[1], "images");
  const Shape& x = expect_image(in[1], "images");
  LS_CHECK(in[0].shape == x, "dy ", in[0].shape.str(), " must match images ", x.str());
  expect_params(in[2], x, 0, params.c_str());
  return {in[1]};
}

std::vector<OpDef> color_ops(const ColorAdjust& c) {
  const OpId adjust = c.adjust, grad = c.grad;
  auto through = [](GradBuilder&, const Node& n, Value dy) {
    return Values{dy, n.inputs[0], n.inputs[1]};
  };
  return {
      {.name = c.random,
       .signature = "(x[N, H, W, C]) -> (y, " + c.params + "[N])",
       .doc = c.random_doc,
       .attrs = {{"lower", f64, required, c.lower_doc},
                 {"upper", f64, required, c.upper_doc},
                 kValueRange,
                 kSeed},
       .infer =
           [c](const Node& n, const Types& in) {
             expect_inputs(in, 1);
             const Shape& x = expect_image(in[0], "images");
             check_value_range(n);
             LS_CHECK(c.bounds_ok(attr_f(n, "lower"), attr_f(n, "upper")), c.bounds_rule);
             return Types{in[0], f32(params_shape(x, 0))};
           },
       .grad = image_grad(
           grad,
           [](GradBuilder&, const Node& n, Value dy) {
             return Values{dy, n.inputs[0], Value{n.id, 1}};
           },
           1),
       .onnx = {.none = kOnnxAugmentation},
       .xla = {.none = kXlaRandom}},
      {.name = adjust,
       .signature = "(x, " + c.params + "[N]) -> y",
       .doc = c.adjust_doc,
       .attrs = {kValueRange},
       .infer =
           [c](const Node& n, const Types& in) {
             expect_inputs(in, 2);
             expect_params(in[1], expect_image(in[0], "images"), 0, c.params.c_str());
             check_value_range(n);
             return Types{in[0]};
           },
       .grad = image_grad(grad, through, 2),
       .onnx = {.none = kOnnxImageAdjust}},
      {.name = grad,
       .signature = "(dy, x, " + c.params + ") -> dx",
       .doc = "Gradient of " + adjust + " with respect to x.",
       .attrs = {kValueRange},
       .infer = [c](const Node& n, const Types& in) { return adjust_grad_infer(n, in, c.params); },
       .onnx = {.none = kOnnxGradient}},
  };
}

std::vector<OpDef> contrast_ops() {
  return color_ops(
      {.random = op::image_random_contrast,
       .adjust = op::image_adjust_contrast,
       .grad = op::image_adjust_contrast_grad,
       .params = "factors",
       .random_doc = "Random contrast per image: factor in [1 - lower, 1 + upper].",
       .adjust_doc = "clip((x - mean) * factor + mean), the mean per image and channel.",
       .lower_doc = "the factor's distance below 1, in [0, 1]",
       .upper_doc = "the factor's distance above 1, >= 0",
       .bounds_ok = [](double lo, double hi) { return lo >= 0 && hi >= 0 && lo <= 1; },
       .bounds_rule = "contrast factor bounds must be >= 0 with lower <= 1"});
}

std::vector<OpDef> brightness_ops() {
  return color_ops(
      {.random = op::image_random_brightness,
       .adjust = op::image_adjust_brightness,
       .grad = op::image_adjust_brightness_grad,
       .params = "deltas",
       .random_doc = "Random brightness per image: delta = U(lower, upper) * (high - low).",
       .adjust_doc = "clip(x + delta), one delta per image.",
       .lower_doc = "the lowest delta, a fraction of the value range, >= -1",
       .upper_doc = "the highest delta, a fraction of the value range, <= 1",
       .bounds_ok = [](double lo, double hi) { return lo <= hi && lo >= -1 && hi <= 1; },
       .bounds_rule = "brightness factor bounds must lie in [-1, 1] with lower <= upper"});
}

// ---- crop ----
Types crop_infer(const Node& n, const Types& in, int num_inputs) {
  expect_inputs(in, size_t(num_inputs));
  const Shape& x = expect_image(in[0], "images");
  if (num_inputs == 2) expect_params(in[1], x, 2, "offsets");
  check_size(n, "height", "width");
  int64_t h = attr_i(n, "height"), w = attr_i(n, "width");
  LS_CHECK(x[1] >= h && x[2] >= w, "crop ", h, "x", w, " is larger than the images ", x.str());
  return {{in[0].dtype, resized(x, h, w)}};
}

// crop_grad's attrs from the image being cropped (input 0 of n).
Attrs crop_grad_attrs(GradBuilder& b, const Node& n) {
  const Shape& x = b.type(n.inputs[0]).shape;
  return Attrs{{"input_height", x[1]}, {"input_width", x[2]}};
}

std::vector<OpDef> crop_ops() {
  const std::vector<AttrDecl> size = {{"height", i64, required, "the crop's height"},
                                      {"width", i64, required, "the crop's width"}};
  return {
      {.name = op::image_random_crop,
       .signature = "(x[N, H, W, C]) -> (y, offsets[N, 2])",
       .doc = "A random height x width crop per image; offsets = (top, left).",
       .attrs = {size[0], size[1], kSeed},
       .infer =
           [](const Node& n, const Types& in) {
             return Types{crop_infer(n, in, 1)[0], f32(params_shape(in[0].shape, 2))};
           },
       .grad =
           [](GradBuilder& b, const Node& n, const Values& dy) {
             if (!is_f32(b, n.inputs[0])) return Values{Value{}};
             return Values{
                 b.add(op::image_crop_grad, {dy[0], Value{n.id, 1}}, crop_grad_attrs(b, n))};
           },
       .onnx = {.none = kOnnxAugmentation},
       .xla = {.none = kXlaRandom}},
      {.name = op::image_crop,
       .signature = "(x, offsets[N, 2]) -> y",
       .doc = "The height x width crop of image i at offsets[i].",
       .attrs = size,
       .infer = [](const Node& n, const Types& in) { return crop_infer(n, in, 2); },
       .grad =
           [](GradBuilder& b, const Node& n, const Values& dy) {
             if (!is_f32(b, n.inputs[0])) return Values{Value{}, Value{}};
             return Values{b.add(op::image_crop_grad, {dy[0], n.inputs[1]}, crop_grad_attrs(b, n)),
                           Value{}};
           },
       .onnx = {.none = kOnnxImageAdjust},
       .xla = {.none = kXlaGather}},
      {.name = op::image_crop_grad,
       .signature = "(dy, offsets) -> dx",
       .doc = "Gradient of image_crop: dy padded back into zeros of the input's size.",
       .attrs = {{"input_height", i64, required, "the cropped images' height"},
                 {"input_width", i64, required, "the cropped images' width"}},
       .infer = crop_grad_infer,
       .grad =
           [](GradBuilder& b, const Node& n, const Values& dy) {
             const Shape& d = b.type(n.inputs[0]).shape;
             return Values{b.add(op::image_crop, {dy[0], n.inputs[1]},
                                 Attrs{{"height", d[1]}, {"width", d[2]}}),
                           Value{}};
           },
       .onnx = {.none = kOnnxGradient},
       .xla = {.none = kXlaGather}},
  };
}

// ---- resize ----
std::vector<OpDef> resize_ops() {
  return {
      {.name = op::image_resize,
       .signature = "(x[N, H, W, C]) -> y[N, height, width, C]",
       .doc = "tf.image.resize (lockstep/data/image.h). No gradient: fine right after the model "
              "input, an error naming the op when weights lie before it.",
       .attrs = {{"height", i64, required, "the output height"},
                 {"width", i64, required, "the output width"},
                 {"interpolation", str, "bilinear", "bilinear, nearest or area"}},
       .infer =
           [](const Node& n, const Types& in) {
             expect_inputs(in, 1);
             const Shape& x = expect_image(in[0], "images");
             check_size(n, "height", "width");
             augment::parse_interpolation(attr_s(n, "interpolation"));
             return Types{{in[0].dtype, resized(x, attr_i(n, "height"), attr_i(n, "width"))}};
           },
       .grad =
           [](GradBuilder& b, const Node& n, const Values&) {
             LS_CHECK(!depends_on_variable(b.graph(), n.inputs[0]), "image_resize",
                      n.name.empty() ? "" : " ('" + n.name + "')",
                      " has no gradient, so it cannot sit between trainable weights and the loss; "
                      "resize in the input pipeline or right after the model's Input");
             return Values{Value{}};
           },
       .rows = RowRule::per_row,
       .onnx = {.op = "Resize"},
       .xla = {.none = kXlaResize}},
  };
}

}  // namespace

LOCKSTEP_REGISTER(image_ops) {
  for (auto table : {flip_ops, affine_ops, contrast_ops, brightness_ops, crop_ops, resize_ops})
    for (OpDef& def : table()) add_op(kGroup, std::move(def));
}

}  // namespace lockstep::ops
