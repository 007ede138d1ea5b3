// The dataset-map augmentation functions (lockstep/data/augment.h): argument checks, HWC/NHWC
// handling, then the shared kernels of src/imaging/internal/augment.h (the same code the image ops
// run).
#include "lockstep/data/augment.h"

#include <vector>

#include "imaging/internal/augment.h"

namespace lockstep::data {

namespace {

using augment::AffineRanges;

// An NHWC view of `images` (HWC gets a batch of 1), contiguous.
struct Batch {
  Tensor x;
  bool single = false;
};

Batch as_batch(const Tensor& images, const char* fn) {
  LS_CHECK(images.defined(), fn, ": images is an empty tensor");
  LS_CHECK(images.rank() == 3 || images.rank() == 4, fn,
           ": images must be HWC (rank 3) or NHWC (rank 4), got shape ", images.shape().str());
  LS_CHECK(images.dtype() == DType::f32 || images.dtype() == DType::u8, fn,
           ": images must be float32 or uint8, got ", dtype_name(images.dtype()));
  Batch b;
  b.x = images.contiguous();
  if (images.rank() == 3) {
    b.single = true;
    b.x = b.x.reshape({1, images.dim(0), images.dim(1), images.dim(2)});
  }
  LS_CHECK(b.x.dim(1) > 0 && b.x.dim(2) > 0 && b.x.dim(3) > 0, fn, ": empty image ",
           images.shape().str());
  return b;
}

Tensor finish(const Batch& b, Tensor y) {
  if (!b.single) return y;
  return y.reshape({y.dim(1), y.dim(2), y.dim(3)});
}

Tensor empty_like(const Batch& b, int64_t h, int64_t w) {
  return Tensor::empty({b.x.dim(0), h, w, b.x.dim(3)}, b.x.dtype());
}

augment::FillSpec fill_spec(const TransformOptions& o) {
  return {augment::parse_fill_mode(o.fill_mode), augment::parse_interpolation(o.interpolation),
          o.fill_value};
}

Tensor random_affine(const char* fn, const Tensor& images, RandomKey key, const AffineRanges& r,
                     const TransformOptions& o) {
  Batch b = as_batch(images, fn);
  augment::FillSpec f = fill_spec(o);
  LS_CHECK(f.interp != augment::Interp::area, fn,
           ": interpolation must be \"bilinear\" or \"nearest\"");
  const int64_t n = b.x.dim(0);
  std::vector<float> t(static_cast<size_t>(8 * n));
  augment::sample_affine(r, key.key, key.counter, n, b.x.dim(1), b.x.dim(2), t.data());
  Tensor y = Tensor::empty(b.x.shape(), b.x.dtype());
  augment::apply_affine(b.x, y, t.data(), f, false);
  return finish(b, y);
}

void check_range(const char* fn, const char* arg, std::pair<double, double> r, double min,
                 double max) {
  LS_CHECK(r.first <= r.second, fn, ": ", arg, " lower bound ", r.first,
           " is greater than the upper bound ", r.second);
  LS_CHECK(r.first >= min && r.second <= max, fn, ": ", arg, " must lie in [", min, ", ", max,
           "], got (", r.first, ", ", r.second, ")");
}

void check_value_range(const char* fn, ValueRange v) {
  LS_CHECK(v.first < v.second, fn, ": value_range must be (low, high) with low < high, got (",
           v.first, ", ", v.second, ")");
}

// Keras smart_resize: centre crop to the target aspect ratio, then resize.
Tensor smart_resize(const Batch& b, int64_t height, int64_t width) {
  auto box = augment::aspect_crop_box(b.x.dim(1), b.x.dim(2), height, width);
  Tensor c = empty_like(b, box.height, box.width);
  std::vector<float> off(size_t(2 * b.x.dim(0)));
  for (size_t i = 0; i < off.size(); i += 2) off[i] = float(box.top), off[i + 1] = float(box.left);
  augment::apply_crop(b.x, c, off.data(), false);
  Tensor y = empty_like(b, height, width);
  augment::resize(c, y, augment::Interp::bilinear, false);
  return y;
}

void check_size(const char* fn, int64_t h, int64_t w) {
  LS_CHECK(h > 0 && w > 0, fn, ": height and width must be positive, got ", h, "x", w);
}

}  // namespace

Tensor random_flip(const Tensor& images, RandomKey key, const std::string& mode) {
  Batch b = as_batch(images, "random_flip");
  int m = augment::parse_flip_mode(mode);
  std::vector<float> flags(size_t(2 * b.x.dim(0)));
  augment::sample_flip(m, key.key, key.counter, b.x.dim(0), flags.data());
  Tensor y = Tensor::empty(b.x.shape(), b.x.dtype());
  augment::apply_flip(b.x, y, flags.data(), false);
  return finish(b, y);
}

Tensor random_rotation(const Tensor& images, RandomKey key, Factor factor,
                       const TransformOptions& o) {
  AffineRanges r;
  auto [lo, hi] = factor.symmetric();
  check_range("random_rotation", "factor", {lo, hi}, -1e9, 1e9);
  r.rotation[0] = lo, r.rotation[1] = hi;
  return random_affine("random_rotation", images, key, r, o);
}

Tensor random_zoom(const Tensor& images, RandomKey key, Factor height_factor,
                   std::optional<Factor> width_factor, const TransformOptions& o) {
  AffineRanges r;
  auto h = height_factor.symmetric();
  check_range("random_zoom", "height_factor", h, -1.0, 1e9);
  r.zoom_height[0] = h.first, r.zoom_height[1] = h.second;
  if (width_factor) {
    auto w = width_factor->symmetric();
    check_range("random_zoom", "width_factor", w, -1.0, 1e9);
    r.zoom_width_from_height = false;
    r.zoom_width[0] = w.first, r.zoom_width[1] = w.second;
  }
  return random_affine("random_zoom", images, key, r, o);
}

Tensor random_translation(const Tensor& images, RandomKey key, Factor height_factor,
                          Factor width_factor, const TransformOptions& o) {
  AffineRanges r;
  auto h = height_factor.symmetric(), w = width_factor.symmetric();
  check_range("random_translation", "height_factor", h, -1.0, 1.0);
  check_range("random_translation", "width_factor", w, -1.0, 1.0);
  r.translation_height[0] = h.first, r.translation_height[1] = h.second;
  r.translation_width[0] = w.first, r.translation_width[1] = w.second;
  return random_affine("random_translation", images, key, r, o);
}

Tensor random_contrast(const Tensor& images, RandomKey key, Factor factor, ValueRange value_range) {
  Batch b = as_batch(images, "random_contrast");
  check_value_range("random_contrast", value_range);
  LS_CHECK(factor.lower >= 0 && factor.upper >= 0 && factor.lower <= 1,
           "random_contrast: factor must be non-negative with lower bound <= 1 (contrast is drawn "
           "from [1 - lower, 1 + upper]), got (",
           factor.lower, ", ", factor.upper, ")");
  const int64_t n = b.x.dim(0);
  std::vector<float> f(static_cast<size_t>(n));
  augment::sample_uniform(augment::Kind::contrast, 1.0 - factor.lower, 1.0 + factor.upper, key.key,
                          key.counter, n, f.data());
  Tensor y = Tensor::empty(b.x.shape(), b.x.dtype());
  augment::apply_contrast(b.x, y, f.data(), value_range.first, value_range.second, false);
  return finish(b, y);
}

Tensor random_brightness(const Tensor& images, RandomKey key, Factor factor,
                         ValueRange value_range) {
  Batch b = as_batch(images, "random_brightness");
  check_value_range("random_brightness", value_range);
  auto r = factor.symmetric();
  check_range("random_brightness", "factor", r, -1.0, 1.0);
  const double span = double(value_range.second) - double(value_range.first);
  const int64_t n = b.x.dim(0);
  std::vector<float> d(static_cast<size_t>(n));
  augment::sample_uniform(augment::Kind::brightness, r.first * span, r.second * span, key.key,
                          key.counter, n, d.data());
  Tensor y = Tensor::empty(b.x.shape(), b.x.dtype());
  augment::apply_brightness(b.x, y, d.data(), value_range.first, value_range.second, false);
  return finish(b, y);
}

Tensor random_crop(const Tensor& images, RandomKey key, int64_t height, int64_t width) {
  Batch b = as_batch(images, "random_crop");
  check_size("random_crop", height, width);
  const int64_t n = b.x.dim(0), H = b.x.dim(1), W = b.x.dim(2);
  if (H < height || W < width) return finish(b, smart_resize(b, height, width));
  std::vector<float> off(static_cast<size_t>(2 * n));
  augment::sample_crop(key.key, key.counter, n, H, W, height, width, off.data());
  Tensor y = empty_like(b, height, width);
  augment::apply_crop(b.x, y, off.data(), false);
  return finish(b, y);
}

Tensor center_crop(const Tensor& images, int64_t height, int64_t width) {
  Batch b = as_batch(images, "center_crop");
  check_size("center_crop", height, width);
  const int64_t H = b.x.dim(1), W = b.x.dim(2);
  if (H < height || W < width) return finish(b, smart_resize(b, height, width));
  return finish(b, crop(b.x, (H - height) / 2, (W - width) / 2, height, width));
}

Tensor flip(const Tensor& images, bool horizontal, bool vertical) {
  Batch b = as_batch(images, "flip");
  std::vector<float> flags;
  for (int64_t i = 0; i < b.x.dim(0); ++i) {
    flags.push_back(horizontal ? 1.f : 0.f);
    flags.push_back(vertical ? 1.f : 0.f);
  }
  Tensor y = Tensor::empty(b.x.shape(), b.x.dtype());
  augment::apply_flip(b.x, y, flags.data(), false);
  return finish(b, y);
}

Tensor affine_transform(const Tensor& images, const std::vector<float>& transform,
                        const TransformOptions& o) {
  Batch b = as_batch(images, "affine_transform");
  const int64_t n = b.x.dim(0);
  LS_CHECK(transform.size() == 8 || int64_t(transform.size()) == 8 * n,
           "affine_transform: transform needs 8 values (or 8 per image: ", 8 * n, "), got ",
           transform.size());
  augment::FillSpec f = fill_spec(o);
  LS_CHECK(f.interp != augment::Interp::area,
           "affine_transform: interpolation must be \"bilinear\" or \"nearest\"");
  Tensor y = Tensor::empty(b.x.shape(), b.x.dtype());
  augment::apply_affine(b.x, y, transform.data(), f, false, transform.size() == 8);
  return finish(b, y);
}

Tensor adjust_contrast(const Tensor& images, float factor, ValueRange value_range) {
  Batch b = as_batch(images, "adjust_contrast");
  check_value_range("adjust_contrast", value_range);
  std::vector<float> f(size_t(b.x.dim(0)), factor);
  Tensor y = Tensor::empty(b.x.shape(), b.x.dtype());
  augment::apply_contrast(b.x, y, f.data(), value_range.first, value_range.second, false);
  return finish(b, y);
}

Tensor adjust_brightness(const Tensor& images, float delta, ValueRange value_range) {
  Batch b = as_batch(images, "adjust_brightness");
  check_value_range("adjust_brightness", value_range);
  std::vector<float> d(size_t(b.x.dim(0)), delta);
  Tensor y = Tensor::empty(b.x.shape(), b.x.dtype());
  augment::apply_brightness(b.x, y, d.data(), value_range.first, value_range.second, false);
  return finish(b, y);
}

Tensor crop(const Tensor& images, int64_t top, int64_t left, int64_t height, int64_t width) {
  Batch b = as_batch(images, "crop");
  check_size("crop", height, width);
  LS_CHECK(top >= 0 && left >= 0 && top + height <= b.x.dim(1) && left + width <= b.x.dim(2),
           "crop: window (top ", top, ", left ", left, ", ", height, "x", width,
           ") does not fit in the ", b.x.dim(1), "x", b.x.dim(2), " image");
  std::vector<float> off;
  for (int64_t i = 0; i < b.x.dim(0); ++i) off.push_back(float(top)), off.push_back(float(left));
  Tensor y = empty_like(b, height, width);
  augment::apply_crop(b.x, y, off.data(), false);
  return finish(b, y);
}

}  // namespace lockstep::data
