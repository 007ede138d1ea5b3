// Image op registrations (augmentation and preprocessing layers): random ops draw per-image
// parameters in-kernel from Philox (keyed like dropout: attr seed, node id, replica, model seed;
// counter = step) and output them next to the image, so the gradient replays the very same
// transformation through the deterministic op. Math: src/imaging/internal/augment.h.
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
  auto r = n.attrs.floats("value_range");
  LS_CHECK(r.size() == 2 && r[0] < r[1], "value_range must be [low, high] with low < high");
}

void check_size(const Node& n, const char* h, const char* w) {
  LS_CHECK(n.attrs.i(h) > 0 && n.attrs.i(w) > 0, h, " and ", w, " must be positive, got ",
           n.attrs.i(h), "x", n.attrs.i(w));
}

// True when `v` depends on a variable (a weight), i.e. a gradient through it would matter.
bool depends_on_variable(const Graph& g, Value v) {
  std::vector<char> seen(size_t(v.node + 1), 0);
  seen[v.node] = 1;
  for (int i = v.node; i >= 0; --i) {
    if (!seen[i]) continue;
    const Node& n = g.node(i);
    if (n.op == "variable") return true;
    for (Value in : n.inputs) seen[in.node] = 1;
  }
  return false;
}

}  // namespace

LOCKSTEP_REGISTER(image_ops) {
  // ---- flip ----
  add_op({.name = "image_random_flip",
          .infer =
              [](const Node& n, const Types& in) {
                expect_inputs(in, 1);
                const Shape& x = expect_image(in[0], "images");
                augment::parse_flip_mode(n.attrs.s("mode", "horizontal_and_vertical"));
                return Types{in[0], f32(params_shape(x, 2))};
              },
          .grad =
              [](GradBuilder& b, const Node& n, const Values& dy) {
                if (!is_f32(b, n.inputs[0])) return Values{Value{}};
                return Values{b.add("image_flip", {dy[0], Value{n.id, 1}})};
              }});
  add_op({.name = "image_flip",
          .infer =
              [](const Node& n, const Types& in) {
                expect_inputs(in, 2);
                const Shape& x = expect_image(in[0], "images");
                expect_params(in[1], x, 2, "flags");
                return Types{in[0]};
              },
          .grad =
              [](GradBuilder& b, const Node& n, const Values& dy) {
                if (!is_f32(b, n.inputs[0])) return Values{Value{}, Value{}};
                return Values{b.add("image_flip", {dy[0], n.inputs[1]}), Value{}};
              }});

  // ---- affine (rotation, zoom, translation) ----
  add_op(
      {.name = "image_random_affine",
       .infer =
           [](const Node& n, const Types& in) {
             expect_inputs(in, 1);
             const Shape& x = expect_image(in[0], "images");
             augment::parse_fill_mode(n.attrs.s("fill_mode", "reflect"));
             auto ip = augment::parse_interpolation(n.attrs.s("interpolation", "bilinear"));
             LS_CHECK(ip != augment::Interp::area, "interpolation must be bilinear or nearest");
             for (const char* k : {"rotation", "zoom_height", "zoom_width", "translation_height",
                                   "translation_width"})
               if (n.attrs.has(k))
                 LS_CHECK(n.attrs.floats(k).size() == 2, "attribute '", k,
                          "' needs [lower, upper]");
             return Types{in[0], f32(params_shape(x, 8))};
           },
       .grad =
           [](GradBuilder& b, const Node& n, const Values& dy) {
             if (!is_f32(b, n.inputs[0])) return Values{Value{}};
             return Values{b.add("image_affine_transform_grad", {dy[0], Value{n.id, 1}}, n.attrs)};
           }});
  add_op({.name = "image_affine_transform",
          .infer =
              [](const Node& n, const Types& in) {
                expect_inputs(in, 2);
                const Shape& x = expect_image(in[0], "images");
                expect_params(in[1], x, 8, "transforms");
                augment::parse_fill_mode(n.attrs.s("fill_mode", "reflect"));
                auto ip = augment::parse_interpolation(n.attrs.s("interpolation", "bilinear"));
                LS_CHECK(ip != augment::Interp::area, "interpolation must be bilinear or nearest");
                return Types{in[0]};
              },
          .grad =
              [](GradBuilder& b, const Node& n, const Values& dy) {
                if (!is_f32(b, n.inputs[0])) return Values{Value{}, Value{}};
                return Values{b.add("image_affine_transform_grad", {dy[0], n.inputs[1]}, n.attrs),
                              Value{}};
              }});
  // (dy, transforms) -> dx: the adjoint (scatter of the interpolation weights; fill gets none).
  add_op({.name = "image_affine_transform_grad",
          .infer =
              [](const Node& n, const Types& in) {
                expect_inputs(in, 2);
                expect_f32(in[0], "dy");
                const Shape& x = expect_image(in[0], "dy");
                expect_params(in[1], x, 8, "transforms");
                return Types{in[0]};
              },
          .grad =
              [](GradBuilder& b, const Node& n, const Values& dy) {
                Attrs a = n.attrs;
                a.set("fill_value", AttrValue(0.0));
                return Values{b.add("image_affine_transform", {dy[0], n.inputs[1]}, a), Value{}};
              }});

  // ---- contrast ----
  add_op({.name = "image_random_contrast",
          .infer =
              [](const Node& n, const Types& in) {
                expect_inputs(in, 1);
                const Shape& x = expect_image(in[0], "images");
                check_value_range(n);
                LS_CHECK(
                    n.attrs.f("lower") >= 0 && n.attrs.f("upper") >= 0 && n.attrs.f("lower") <= 1,
                    "contrast factor bounds must be >= 0 with lower <= 1");
                return Types{in[0], f32(params_shape(x, 0))};
              },
          .grad =
              [](GradBuilder& b, const Node& n, const Values& dy) {
                if (!is_f32(b, n.inputs[0])) return Values{Value{}};
                return Values{b.add("image_adjust_contrast_grad",
                                    {dy[0], n.inputs[0], Value{n.id, 1}}, n.attrs)};
              }});
  add_op({.name = "image_adjust_contrast",
          .infer =
              [](const Node& n, const Types& in) {
                expect_inputs(in, 2);
                const Shape& x = expect_image(in[0], "images");
                expect_params(in[1], x, 0, "factors");
                check_value_range(n);
                return Types{in[0]};
              },
          .grad =
              [](GradBuilder& b, const Node& n, const Values& dy) {
                if (!is_f32(b, n.inputs[0])) return Values{Value{}, Value{}};
                return Values{
                    b.add("image_adjust_contrast_grad", {dy[0], n.inputs[0], n.inputs[1]}, n.attrs),
                    Value{}};
              }});
  add_op({.name = "image_adjust_contrast_grad", .infer = [](const Node& n, const Types& in) {
            expect_inputs(in, 3);
            expect_f32(in[0], "dy");
            expect_f32(in[1], "images");
            const Shape& x = expect_image(in[1], "images");
            LS_CHECK(in[0].shape == x, "dy ", in[0].shape.str(), " must match images ", x.str());
            expect_params(in[2], x, 0, "factors");
            return Types{in[1]};
          }});

  // ---- brightness ----
  add_op({.name = "image_random_brightness",
          .infer =
              [](const Node& n, const Types& in) {
                expect_inputs(in, 1);
                const Shape& x = expect_image(in[0], "images");
                check_value_range(n);
                LS_CHECK(n.attrs.f("lower") <= n.attrs.f("upper") && n.attrs.f("lower") >= -1 &&
                             n.attrs.f("upper") <= 1,
                         "brightness factor bounds must lie in [-1, 1] with lower <= upper");
                return Types{in[0], f32(params_shape(x, 0))};
              },
          .grad =
              [](GradBuilder& b, const Node& n, const Values& dy) {
                if (!is_f32(b, n.inputs[0])) return Values{Value{}};
                return Values{b.add("image_adjust_brightness_grad",
                                    {dy[0], n.inputs[0], Value{n.id, 1}}, n.attrs)};
              }});
  add_op({.name = "image_adjust_brightness",
          .infer =
              [](const Node& n, const Types& in) {
                expect_inputs(in, 2);
                const Shape& x = expect_image(in[0], "images");
                expect_params(in[1], x, 0, "deltas");
                check_value_range(n);
                return Types{in[0]};
              },
          .grad =
              [](GradBuilder& b, const Node& n, const Values& dy) {
                if (!is_f32(b, n.inputs[0])) return Values{Value{}, Value{}};
                return Values{b.add("image_adjust_brightness_grad",
                                    {dy[0], n.inputs[0], n.inputs[1]}, n.attrs),
                              Value{}};
              }});
  add_op({.name = "image_adjust_brightness_grad", .infer = [](const Node& n, const Types& in) {
            expect_inputs(in, 3);
            expect_f32(in[0], "dy");
            expect_f32(in[1], "images");
            const Shape& x = expect_image(in[1], "images");
            LS_CHECK(in[0].shape == x, "dy ", in[0].shape.str(), " must match images ", x.str());
            expect_params(in[2], x, 0, "deltas");
            return Types{in[1]};
          }});

  // ---- crop ----
  add_op({.name = "image_random_crop",
          .infer =
              [](const Node& n, const Types& in) {
                expect_inputs(in, 1);
                const Shape& x = expect_image(in[0], "images");
                check_size(n, "height", "width");
                int64_t h = n.attrs.i("height"), w = n.attrs.i("width");
                LS_CHECK(x[1] >= h && x[2] >= w, "crop ", h, "x", w, " is larger than the images ",
                         x.str());
                return Types{{in[0].dtype, resized(x, h, w)}, f32(params_shape(x, 2))};
              },
          .grad =
              [](GradBuilder& b, const Node& n, const Values& dy) {
                if (!is_f32(b, n.inputs[0])) return Values{Value{}};
                const Shape& x = b.type(n.inputs[0]).shape;
                return Values{b.add("image_crop_grad", {dy[0], Value{n.id, 1}},
                                    Attrs{{"input_height", x[1]}, {"input_width", x[2]}})};
              }});
  add_op({.name = "image_crop",
          .infer =
              [](const Node& n, const Types& in) {
                expect_inputs(in, 2);
                const Shape& x = expect_image(in[0], "images");
                expect_params(in[1], x, 2, "offsets");
                check_size(n, "height", "width");
                int64_t h = n.attrs.i("height"), w = n.attrs.i("width");
                LS_CHECK(x[1] >= h && x[2] >= w, "crop ", h, "x", w, " is larger than the images ",
                         x.str());
                return Types{{in[0].dtype, resized(x, h, w)}};
              },
          .grad =
              [](GradBuilder& b, const Node& n, const Values& dy) {
                if (!is_f32(b, n.inputs[0])) return Values{Value{}, Value{}};
                const Shape& x = b.type(n.inputs[0]).shape;
                return Values{b.add("image_crop_grad", {dy[0], n.inputs[1]},
                                    Attrs{{"input_height", x[1]}, {"input_width", x[2]}}),
                              Value{}};
              }});
  // (dy, offsets){input_height, input_width} -> dx: dy padded back into zeros.
  add_op({.name = "image_crop_grad",
          .infer =
              [](const Node& n, const Types& in) {
                expect_inputs(in, 2);
                expect_f32(in[0], "dy");
                const Shape& d = expect_image(in[0], "dy");
                expect_params(in[1], d, 2, "offsets");
                check_size(n, "input_height", "input_width");
                LS_CHECK(n.attrs.i("input_height") >= d[1] && n.attrs.i("input_width") >= d[2],
                         "input size must be at least the crop size");
                return Types{f32(resized(d, n.attrs.i("input_height"), n.attrs.i("input_width")))};
              },
          .grad =
              [](GradBuilder& b, const Node& n, const Values& dy) {
                const Shape& d = b.type(n.inputs[0]).shape;
                return Values{b.add("image_crop", {dy[0], n.inputs[1]},
                                    Attrs{{"height", d[1]}, {"width", d[2]}}),
                              Value{}};
              }});

  // ---- resize ----
  add_op({.name = "image_resize",
          .infer =
              [](const Node& n, const Types& in) {
                expect_inputs(in, 1);
                const Shape& x = expect_image(in[0], "images");
                check_size(n, "height", "width");
                augment::parse_interpolation(n.attrs.s("interpolation", "bilinear"));
                return Types{{in[0].dtype, resized(x, n.attrs.i("height"), n.attrs.i("width"))}};
              },
          // No gradient: fine right after the model input (the usual place of Resizing); an
          // error when weights sit before it.
          .grad =
              [](GradBuilder& b, const Node& n, const Values& dy) {
                LS_CHECK(!depends_on_variable(b.graph(), n.inputs[0]), "image_resize",
                         n.name.empty() ? "" : " ('" + n.name + "')",
                         " has no gradient, so it cannot sit between trainable weights and the "
                         "loss; resize in the input pipeline or right after the model's Input");
                return Values{Value{}};
              }});
}

}  // namespace lockstep::ops
