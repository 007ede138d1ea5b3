// Image augmentation math shared by the dataset map functions (lockstep/data/augment.h) and
// the image op kernels of every backend (src/backends/*/image_kernels.cpp), so a Keras
// preprocessing layer and the map function compute bit-identical results for the same key.
//
// Every transformation is split in two: sample_* draws per-image parameters from a Philox key
// (image i of a batch uses counter blocks (2i, 2i+1) at `counter`, the key salted per kind so
// that flip, rotation, contrast... under one key are independent), and apply_* applies explicit
// parameters. The random graph ops output those parameters so their gradients can reuse them.
//
// Images are NHWC tensors (contiguous), f32 or u8; outputs have the input's dtype (u8 results
// are rounded to nearest and saturated). Gradients are f32.
#pragma once
#include <cstdint>
#include <string>

#include "lockstep/core/tensor.h"

namespace lockstep::augment {

enum class Fill { reflect, wrap, constant, nearest };
enum class Interp { bilinear, nearest, area };

// Parsers; throw naming the valid values.
Fill parse_fill_mode(const std::string& s);
Interp parse_interpolation(const std::string& s);
// "horizontal" -> 1, "vertical" -> 2, "horizontal_and_vertical" -> 3.
int parse_flip_mode(const std::string& s);

// Salts that make each transformation kind draw an independent stream from one key.
enum class Kind : uint64_t { flip = 1, affine = 2, contrast = 3, brightness = 4, crop = 5 };

// Eight uniform [0, 1) draws for image `index`.
struct Draws {
  float u[8];
};
Draws draws(Kind kind, uint64_t key, uint64_t counter, uint64_t index);

// The sample_* functions draw image i's parameters with index first_index + i (the layers'
// ops pass the global row of the step's first image under op determinism, else 0).
// ---- flip: flags [n, 2] = (horizontal, vertical) in {0, 1} ----
void sample_flip(int mode, uint64_t key, uint64_t counter, int64_t n, float* flags,
                 uint64_t first_index = 0);
void apply_flip(const Tensor& x, const Tensor& y, const float* flags, bool parallel);

// ---- affine (projective) transforms: 8 floats per image [a0 a1 a2 b0 b1 b2 c0 c1], mapping
// output pixel (x, y) to input point ((a0 x + a1 y + a2) / k, (b0 x + b1 y + b2) / k) with
// k = c0 x + c1 y + 1 (the tf.raw_ops.ImageProjectiveTransformV3 convention).
struct AffineRanges {
  double rotation[2] = {0, 0};     // fraction of 2*pi
  double zoom_height[2] = {0, 0};  // zoom = 1 + factor (> 1 zooms out)
  double zoom_width[2] = {0, 0};
  bool zoom_width_from_height = true;     // Keras width_factor=None: keep the aspect ratio
  double translation_height[2] = {0, 0};  // fraction of the height (+ shifts down)
  double translation_width[2] = {0, 0};   // fraction of the width (+ shifts right)
};
struct FillSpec {
  Fill fill = Fill::reflect;
  Interp interp = Interp::bilinear;
  float value = 0.f;
};
void sample_affine(const AffineRanges& r, uint64_t key, uint64_t counter, int64_t n, int64_t height,
                   int64_t width, float* transforms, uint64_t first_index = 0);
// transforms: 8 floats per image, or one transform for all images when `shared` is set.
void apply_affine(const Tensor& x, const Tensor& y, const float* transforms, const FillSpec& f,
                  bool parallel, bool shared = false);
// dx (f32, x's shape) = adjoint of apply_affine with fill value 0, applied to dy.
void apply_affine_grad(const Tensor& dy, const Tensor& dx, const float* transforms,
                       const FillSpec& f, bool parallel);

// ---- contrast: y = clip((x - mean_c) * f + mean_c, lo, hi), mean per image and channel ----
// One uniform draw per image in [lo, hi) (used for contrast factors and brightness deltas).
void sample_uniform(Kind kind, double lo, double hi, uint64_t key, uint64_t counter, int64_t n,
                    float* out, uint64_t first_index = 0);
void apply_contrast(const Tensor& x, const Tensor& y, const float* factors, float lo, float hi,
                    bool parallel);
void apply_contrast_grad(const Tensor& dy, const Tensor& x, const Tensor& dx, const float* factors,
                         float lo, float hi, bool parallel);

// ---- brightness: y = clip(x + delta, lo, hi) ----
void apply_brightness(const Tensor& x, const Tensor& y, const float* deltas, float lo, float hi,
                      bool parallel);
void apply_brightness_grad(const Tensor& dy, const Tensor& x, const Tensor& dx, const float* deltas,
                           float lo, float hi, bool parallel);

// ---- crop: offsets [n, 2] = (top, left); y's shape gives the crop size ----
void sample_crop(uint64_t key, uint64_t counter, int64_t n, int64_t height, int64_t width,
                 int64_t crop_height, int64_t crop_width, float* offsets, uint64_t first_index = 0);
void apply_crop(const Tensor& x, const Tensor& y, const float* offsets, bool parallel);
void apply_crop_grad(const Tensor& dy, const Tensor& dx, const float* offsets, bool parallel);

// Keras smart_resize crop box: the largest centred window of the target aspect ratio (the
// image layer's data::aspect_crop_box).
struct CropBox {
  int64_t top, left, height, width;
};
CropBox aspect_crop_box(int64_t height, int64_t width, int64_t target_height, int64_t target_width);

// ---- resize (NHWC, y's shape gives the size): lockstep/data/image.h's tf.image.resize ----
void resize(const Tensor& x, const Tensor& y, Interp interp, bool parallel);

}  // namespace lockstep::augment
