// Op-table cases for the image ops: every op's cpu kernel against the reference, and finite
// differences for the deterministic ops (the random ops draw new parameters every step, so their
// gradients are the deterministic ops' gradients, replayed with the drawn parameters).
#include <cmath>

#include "ops/op_harness.h"

namespace lockstep::testing {
namespace {

using I = std::vector<int64_t>;
using F = std::vector<double>;

OpInput in(Shape s, float lo = -1.f, float hi = 1.f) {
  return OpInput{.shape = s, .lo = lo, .hi = hi};
}
OpInput fixed(Shape s, std::vector<float> v) {
  return OpInput{.shape = s, .differentiable = false, .values = std::move(v)};
}

// Per-image transforms: rotation by deg degrees about the centre, scaled by z, shifted by (tx, ty).
std::vector<float> transforms(int n, int h, int w, double deg, double z, double tx, double ty) {
  std::vector<float> t;
  for (int i = 0; i < n; ++i) {
    double a = (deg + 17.0 * i) * M_PI / 180.0, c = std::cos(a) * z, s = std::sin(a) * z;
    double cx = (w - 1) / 2.0, cy = (h - 1) / 2.0;
    std::vector<double> m{c, -s, cx - c * cx + s * cy + tx, s, c, cy - s * cx - c * cy + ty, 0, 0};
    for (double v : m) t.push_back(float(v));
  }
  return t;
}

Attrs affine_attrs(const char* fill, const char* interp, double fill_value = 0.0) {
  return Attrs{{"fill_mode", fill}, {"interpolation", interp}, {"fill_value", fill_value}};
}

}  // namespace

LS_OP_CASES(image_ops) {
  std::vector<OpCase> c;
  const Shape x{3, 5, 6, 2};
  // ---- flip ----
  for (const char* mode : {"horizontal", "vertical", "horizontal_and_vertical"})
    c.push_back(OpCase{.name = std::string("image_random_flip_") + mode,
                       .op = "image_random_flip",
                       .attrs = Attrs{{"mode", mode}, {"seed", 3}},
                       .inputs = {in({8, 4, 5, 3})},
                       .check_grad = false});
  c.push_back(OpCase{.name = "image_flip",
                     .op = "image_flip",
                     .inputs = {in(x), fixed({3, 2}, {1, 0, 0, 1, 1, 1})}});
  // ---- affine ----
  Attrs ra = affine_attrs("reflect", "bilinear");
  ra.set("rotation", F{-0.2, 0.2}).set("zoom_height", F{-0.3, 0.3}).set("zoom_width", F{-0.2, 0.4});
  ra.set("translation_height", F{-0.2, 0.2}).set("translation_width", F{-0.1, 0.3}).set("seed", 5);
  c.push_back(OpCase{.name = "image_random_affine_reflect",
                     .op = "image_random_affine",
                     .attrs = ra,
                     .inputs = {in({4, 7, 9, 3})},
                     .check_grad = false});
  Attrs rn = affine_attrs("constant", "nearest", 0.25);
  rn.set("rotation", F{-0.5, 0.5});
  c.push_back(OpCase{.name = "image_random_affine_constant_nearest",
                     .op = "image_random_affine",
                     .attrs = rn,
                     .inputs = {in({4, 6, 6, 1})},
                     .check_grad = false});
  Attrs rw = affine_attrs("wrap", "bilinear");
  rw.set("translation_height", F{-0.5, 0.5}).set("translation_width", F{-0.5, 0.5});
  c.push_back(OpCase{.name = "image_random_affine_wrap",
                     .op = "image_random_affine",
                     .attrs = rw,
                     .inputs = {in({4, 5, 7, 2})},
                     .check_grad = false});
  auto t = transforms(3, 5, 6, 30, 1.2, 0.7, -0.4);
  for (const char* fill : {"reflect", "wrap", "constant", "nearest"})
    for (const char* interp : {"bilinear", "nearest"}) {
      std::string nm = std::string(fill) + "_" + interp;
      c.push_back(OpCase{.name = "image_affine_transform_" + nm,
                         .op = "image_affine_transform",
                         .attrs = affine_attrs(fill, interp, 0.5),
                         .inputs = {in(x), fixed({3, 8}, t)}});
      c.push_back(OpCase{.name = "image_affine_transform_grad_" + nm,
                         .op = "image_affine_transform_grad",
                         .attrs = affine_attrs(fill, interp),
                         .inputs = {in(x), fixed({3, 8}, t)}});
    }
  // ---- contrast / brightness ----
  Attrs cr{{"lower", 0.5}, {"upper", 0.7}, {"value_range", F{-1.0, 1.0}}, {"seed", 9}};
  c.push_back(OpCase{.name = "image_random_contrast",
                     .op = "image_random_contrast",
                     .attrs = cr,
                     .inputs = {in({6, 4, 5, 3})},
                     .check_grad = false});
  c.push_back(OpCase{.name = "image_adjust_contrast",
                     .op = "image_adjust_contrast",
                     .attrs = Attrs{{"value_range", F{-5.0, 5.0}}},
                     .inputs = {in(x), fixed({3}, {0.5f, 1.0f, 1.7f})}});
  c.push_back(OpCase{.name = "image_adjust_contrast_clipped",
                     .op = "image_adjust_contrast",
                     .attrs = Attrs{{"value_range", F{-0.6, 0.55}}},
                     .inputs = {in(x), fixed({3}, {0.8f, 1.3f, 1.9f})},
                     .fd_eps = 1e-3f});
  c.push_back(OpCase{.name = "image_adjust_contrast_grad",
                     .op = "image_adjust_contrast_grad",
                     .attrs = Attrs{{"value_range", F{-0.6, 0.55}}},
                     .inputs = {in(x), in(x), fixed({3}, {0.8f, 1.3f, 1.9f})},
                     .check_grad = false});
  Attrs br{{"lower", -0.3}, {"upper", 0.4}, {"value_range", F{0.0, 1.0}}, {"seed", 2}};
  c.push_back(OpCase{.name = "image_random_brightness",
                     .op = "image_random_brightness",
                     .attrs = br,
                     .inputs = {in({6, 4, 5, 3}, 0.f, 1.f)},
                     .check_grad = false});
  c.push_back(OpCase{.name = "image_adjust_brightness_clipped",
                     .op = "image_adjust_brightness",
                     .attrs = Attrs{{"value_range", F{-0.5, 0.6}}},
                     .inputs = {in(x), fixed({3}, {0.25f, -0.3f, 0.05f})},
                     .fd_eps = 1e-3f});
  c.push_back(OpCase{.name = "image_adjust_brightness_grad",
                     .op = "image_adjust_brightness_grad",
                     .attrs = Attrs{{"value_range", F{-0.5, 0.6}}},
                     .inputs = {in(x), in(x), fixed({3}, {0.25f, -0.3f, 0.05f})},
                     .check_grad = false});
  // ---- crop ----
  c.push_back(OpCase{.name = "image_random_crop",
                     .op = "image_random_crop",
                     .attrs = Attrs{{"height", 3}, {"width", 4}, {"seed", 4}},
                     .inputs = {in({5, 6, 7, 2})},
                     .check_grad = false});
  c.push_back(OpCase{.name = "image_crop",
                     .op = "image_crop",
                     .attrs = Attrs{{"height", 3}, {"width", 4}},
                     .inputs = {in(x), fixed({3, 2}, {0, 0, 2, 2, 1, 1})}});
  c.push_back(OpCase{.name = "image_crop_grad",
                     .op = "image_crop_grad",
                     .attrs = Attrs{{"input_height", 5}, {"input_width", 6}},
                     .inputs = {in({3, 3, 4, 2}), fixed({3, 2}, {0, 0, 2, 2, 1, 1})}});
  // ---- resize (no gradient: it sits right after the input) ----
  for (const char* interp : {"bilinear", "nearest"}) {
    c.push_back(OpCase{.name = std::string("image_resize_up_") + interp,
                       .op = "image_resize",
                       .attrs = Attrs{{"height", 8}, {"width", 9}, {"interpolation", interp}},
                       .inputs = {in(x)},
                       .check_grad = false});
    c.push_back(OpCase{.name = std::string("image_resize_down_") + interp,
                       .op = "image_resize",
                       .attrs = Attrs{{"height", 3}, {"width", 4}, {"interpolation", interp}},
                       .inputs = {in(x)},
                       .check_grad = false});
  }
  return c;
}

}  // namespace lockstep::testing
