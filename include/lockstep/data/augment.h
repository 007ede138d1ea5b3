// Image augmentation as pure functions, for Dataset::map: each takes an image (HWC) or a batch
// (NHWC) as a f32 or u8 tensor plus a Philox key, and returns a new tensor of the same dtype
// (u8 results rounded to nearest and saturated). The same key gives the same result on any
// machine and thread count. These are the very kernels the Keras preprocessing layers
// (layers::RandomFlip, ...) run inside a model, so a layer and its map function agree exactly
// for the same key and counter.
//
//   ds = ds.map([](data::Element e, const data::MapContext& ctx) {
//     Tensor img = data::random_flip(e.tensor(0), ctx.key(), "horizontal");
//     e[0] = data::random_rotation(img, ctx.key(), 0.1);
//     return e;
//   }, {.num_parallel_calls = data::AUTOTUNE, .seed = 123});
//
// Randomness: image i of a batch (0 for one HWC image) draws from Philox blocks (2i, 2i+1) at
// `counter` under the key salted by the transformation kind, so one key can drive a whole
// chain of different transformations without correlating them.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/core/tensor.h"

namespace lockstep::data {

/// Philox key and counter of one call (a dataset element's seed; a model's step).
struct RandomKey {
  ///@{
  /// The Philox key (a seed) and counter (an element index, a step).
  uint64_t key = 0, counter = 0;
  ///@}
  /// A key from a seed and a counter (implicit: `random_flip(x, seed)` works).
  RandomKey(uint64_t key = 0, uint64_t counter = 0) : key(key), counter(counter) {}  // NOLINT
};

/// A Keras "factor" argument: one number, or a (lower, upper) pair. Each transformation reads
/// it as Keras does: rotation, zoom, translation and brightness take one number f as [-f, f];
/// contrast takes f as [1 - f, 1 + f] and a pair (lo, hi) as [1 - lo, 1 + hi].
struct Factor {
  ///@{
  /// The range's ends (both f for one number).
  double lower = 0, upper = 0;
  ///@}
  bool single = true;  ///< given as one number
  /// One number f.
  Factor(double f = 0) : lower(f), upper(f), single(true) {}             // NOLINT
  Factor(double lo, double hi) : lower(lo), upper(hi), single(false) {}  ///< a pair (lo, hi)
  /// [-f, f] for one number, [lower, upper] for a pair.
  std::pair<double, double> symmetric() const {
    return single ? std::pair{-lower, lower} : std::pair{lower, upper};
  }
};

/// Resampling options of the geometric transforms (Keras names and defaults).
struct TransformOptions {
  std::string fill_mode = "reflect";       ///< reflect | wrap | constant | nearest
  std::string interpolation = "bilinear";  ///< bilinear | nearest
  float fill_value = 0.f;                  ///< for fill_mode "constant"
};

/// The (low, high) values pixels are clipped to: (0, 255) for raw images, (0, 1) rescaled.
using ValueRange = std::pair<float, float>;

/// Flips each image left-right and/or up-down with probability 1/2 each.
/// mode: "horizontal", "vertical" or "horizontal_and_vertical" (Keras RandomFlip).
Tensor random_flip(const Tensor& images, RandomKey key,
                   const std::string& mode = "horizontal_and_vertical");
/// Rotates by factor * 2*pi radians, factor drawn from the range (positive = counter-clockwise).
Tensor random_rotation(const Tensor& images, RandomKey key, Factor factor,
                       const TransformOptions& o = {});
/// Zooms by 1 + factor (positive factor zooms out, negative zooms in); without width_factor
/// the width uses the height's zoom (aspect ratio kept).
Tensor random_zoom(const Tensor& images, RandomKey key, Factor height_factor,
                   std::optional<Factor> width_factor = std::nullopt,
                   const TransformOptions& o = {});
/// Shifts by factor * height down and factor * width right (negative: up / left).
Tensor random_translation(const Tensor& images, RandomKey key, Factor height_factor,
                          Factor width_factor, const TransformOptions& o = {});
/// Per channel: (x - mean) * f + mean, f drawn per image, clipped to value_range.
Tensor random_contrast(const Tensor& images, RandomKey key, Factor factor,
                       ValueRange value_range = {0.f, 255.f});
/// Adds delta * (hi - lo), delta drawn per image from the factor's range in [-1, 1], clipped to
/// value_range.
Tensor random_brightness(const Tensor& images, RandomKey key, Factor factor,
                         ValueRange value_range = {0.f, 255.f});
/// A height x width window at a random position of each image (an image smaller than that is
/// resized, cropping to the aspect ratio first, as Keras does).
Tensor random_crop(const Tensor& images, RandomKey key, int64_t height, int64_t width);
/// The centred height x width window (top = (H - height) / 2); smaller images are resized as in
/// random_crop.
Tensor center_crop(const Tensor& images, int64_t height, int64_t width);

/// Deterministic building blocks (explicit parameters).
Tensor flip(const Tensor& images, bool horizontal, bool vertical);
/// transform: 8 floats [a0 a1 a2 b0 b1 b2 c0 c1] mapping output (x, y) to the input point
/// ((a0 x + a1 y + a2) / k, (b0 x + b1 y + b2) / k), k = c0 x + c1 y + 1, as in
/// tf.raw_ops.ImageProjectiveTransformV3; one for all images, or 8 per image.
Tensor affine_transform(const Tensor& images, const std::vector<float>& transform,
                        const TransformOptions& o = {});
/// Per channel of each image: (x - mean) * factor + mean, clipped to value_range.
Tensor adjust_contrast(const Tensor& images, float factor, ValueRange value_range = {0.f, 255.f});
/// Adds delta * (hi - lo) to every pixel, clipped to value_range.
Tensor adjust_brightness(const Tensor& images, float delta, ValueRange value_range = {0.f, 255.f});
/// The height x width window at (top, left) of every image: [N, H, W, C] -> [N, height, width, C].
Tensor crop(const Tensor& images, int64_t top, int64_t left, int64_t height, int64_t width);

}  // namespace lockstep::data
