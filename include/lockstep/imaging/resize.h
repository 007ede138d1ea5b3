// Image resizing with tf.image.resize semantics, on raw pixel buffers and [H, W, C] tensors.
// The imaging module sits below data (decoders, pipelines) and ops (the resize/augment ops).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/core/tensor.h"

namespace lockstep::imaging {

/// tf.image.resize semantics (antialias=false): bilinear with half-pixel centres, nearest with
/// half-pixel centres (floor((x + 0.5) * in / out)), area = exact box average (ResizeArea).
enum class Interpolation { bilinear, nearest, area };
Interpolation parse_interpolation(const std::string& s);  ///< "bilinear" | "nearest" | "area"

/// Keras crop_to_aspect_ratio: the largest central window of the target aspect ratio.
struct CropBox {
  ///@{
  /// The window's top-left corner and size, in pixels of the source image.
  int y = 0, x = 0, height = 0, width = 0;
  ///@}
};
/// The largest window of a height x width image, centred, with the aspect ratio of
/// target_height x target_width.
CropBox aspect_crop_box(int height, int width, int target_height, int target_width);

/// Resizes a uint8 or float32 [H, W, C] image to float32 [height, width, C].
Tensor resize_image(const Tensor& image, int height, int width,
                    Interpolation interpolation = Interpolation::bilinear,
                    bool crop_to_aspect_ratio = false);

/// The allocation-free kernel behind resize_image: src is a uint8 image with row stride
/// `src_row_stride` elements (crop windows pass an offset pointer), dst is contiguous
/// [dh, dw, c] float32. `scratch` is reused between calls to avoid allocation.
void resize_u8_to_f32(const uint8_t* src, int sh, int sw, int c, int64_t src_row_stride, float* dst,
                      int dh, int dw, Interpolation interpolation,
                      std::vector<float>* scratch = nullptr);
/// resize_u8_to_f32 for a float32 source.
void resize_f32_to_f32(const float* src, int sh, int sw, int c, int64_t src_row_stride, float* dst,
                       int dh, int dw, Interpolation interpolation,
                       std::vector<float>* scratch = nullptr);

}  // namespace lockstep::imaging
