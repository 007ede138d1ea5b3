// Images: decode (JPEG via TurboJPEG, PNG via libpng, BMP), encode (PNG, JPEG), colour
// conversion with Keras semantics, and resizing with tf.image.resize semantics.
//
// Decoded images are uint8 tensors [H, W, C] (HWC, like Keras). Resized images are float32
// [H, W, C] in 0..255, what Keras's image_dataset_from_directory yields.
// Every error is a lockstep::Error whose message names the file (or the `name` given for an
// in-memory buffer) and says what is wrong.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/core/tensor.h"
#include "lockstep/imaging/resize.h"

namespace lockstep::data {

/// The image file formats Lockstep decodes (unknown: none of them).
enum class ImageFormat { unknown, jpeg, png, bmp };
/// "JPEG", "PNG", "BMP" or "unknown", for messages.
const char* image_format_name(ImageFormat f);
/// By magic bytes, never by extension: JPEG FF D8 FF, PNG 89 'PNG' 0D 0A 1A 0A, BMP 'BM'.
ImageFormat detect_image_format(const uint8_t* data, size_t size);

/// Keras color_mode. `keep` means the file's own channel count (1, 2, 3 or 4).
enum class ColorMode { keep, grayscale, rgb, rgba };
ColorMode parse_color_mode(const std::string& s);  ///< "grayscale" | "rgb" | "rgba" | "keep"
int color_mode_channels(ColorMode m);              ///< 1, 3, 4; 0 for keep

/// The largest image file read_file_bytes reads (1 GiB; a 8192 x 8192 RGBA PNG stored without
/// compression is 256 MiB).
constexpr uint64_t kMaxImageFileBytes = 1ull << 30;
/// Reads a whole regular file. Errors: missing, a directory, not a regular file (a FIFO, a
/// device such as /dev/zero), larger than kMaxImageFileBytes, unreadable, read failure.
std::vector<uint8_t> read_file_bytes(const std::string& path);

/// Decoded-image size cap. Every decoder reads the image's width and height from its header
/// and refuses an image of more than max_image_pixels() pixels before allocating anything, with a
/// lockstep::Error naming the file, its size and how to raise the cap: a small compressed file
/// can otherwise expand to gigabytes (a 1 MB PNG of 16384 x 16384 RGBA decodes to 1 GiB).
/// Default kDefaultMaxImagePixels = 2^26 = 67,108,864 pixels (8192 x 8192, at most 256 MiB
/// decoded as RGBA), far above any training image. set_max_image_pixels(N) (1..2^40; for
/// decodes that start afterwards) changes it; until a program sets it, the environment variable
/// LOCKSTEP_MAX_IMAGE_PIXELS=N does (a value that is not a number in range makes every decode
/// fail naming the variable). set_max_image_pixels(0) goes back to the environment / default.
constexpr int64_t kDefaultMaxImagePixels = int64_t(1) << 26;
/// The cap in force: set_max_image_pixels's value, else LOCKSTEP_MAX_IMAGE_PIXELS, else
/// kDefaultMaxImagePixels.
int64_t max_image_pixels();
/// Sets the cap for decodes that start afterwards (1..2^40; 0 goes back to the environment /
/// default); an error outside that range.
void set_max_image_pixels(int64_t pixels);

/// Decodes an in-memory image (format by magic bytes) to uint8 [H, W, C]. `name` appears in
/// error messages (pass the path). `mode` converts channels like Keras:
///   grayscale: luma 0.299 R + 0.587 G + 0.114 B (ITU-R 601, as libjpeg and PIL), alpha dropped;
///   rgb: gray replicated, alpha dropped;  rgba: gray replicated, alpha 255 when absent.
Tensor decode_image(const uint8_t* data, size_t size, const std::string& name,
                    ColorMode mode = ColorMode::keep);
/// decode_image of a byte vector (e.g. read_file_bytes's result).
Tensor decode_image(const std::vector<uint8_t>& bytes, const std::string& name,
                    ColorMode mode = ColorMode::keep);
/// read_file_bytes + decode_image.
Tensor read_image(const std::string& path, ColorMode mode = ColorMode::keep);

/// Format-specific decoders (same conventions). JPEG: 1 or 3 channels (CMYK becomes RGB);
/// PNG: 8/16-bit gray, gray+alpha, RGB, RGBA and palette (16-bit scaled to 8-bit);
/// BMP: uncompressed 24-bit (3 channels) and 32-bit (4 channels; BI_RGB or BI_BITFIELDS).
Tensor decode_jpeg(const uint8_t* data, size_t size, const std::string& name,
                   ColorMode mode = ColorMode::keep);
/// PNG only (see decode_jpeg for the conventions).
Tensor decode_png(const uint8_t* data, size_t size, const std::string& name,
                  ColorMode mode = ColorMode::keep);
/// BMP only (see decode_jpeg for the conventions).
Tensor decode_bmp(const uint8_t* data, size_t size, const std::string& name,
                  ColorMode mode = ColorMode::keep);

/// Channel conversion of a uint8 [H, W, C] image (C in 1..4) to `channels` (1, 3 or 4),
/// with the rules above. `name` is used in errors. Returns the input when nothing changes.
Tensor convert_channels(const Tensor& image, int channels, const std::string& name = "image");

/// Encoders. The image is [H, W, C] (C = 1, 2, 3 or 4 for PNG; 1 or 3 for JPEG — JPEG drops
/// alpha) of uint8, or float32 in 0..255 (rounded and clamped).
std::vector<uint8_t> encode_png(const Tensor& image);
/// JPEG bytes at `quality` 1..100 (default 95), 4:2:0 chroma subsampling for colour.
std::vector<uint8_t> encode_jpeg(const Tensor& image, int quality = 95);
/// Writes by the path's extension (.png, .jpg/.jpeg, .bmp); creates no directories.
void write_image(const std::string& path, const Tensor& image, int jpeg_quality = 95);
/// Writes `bytes` to `path` atomically (a temporary renamed over it: a failure leaves no partial
/// file and any previous one unchanged); an error names the path.
void write_file_bytes(const std::string& path, const std::vector<uint8_t>& bytes);
std::vector<uint8_t> encode_bmp(const Tensor& image);  ///< 24-bit (C=1,3) or 32-bit (C=4)

// ---- resize (lockstep/imaging/resize.h, re-exported here) --------------------------------
using imaging::aspect_crop_box;
using imaging::CropBox;
using imaging::Interpolation;
using imaging::parse_interpolation;
using imaging::resize_f32_to_f32;
using imaging::resize_image;
using imaging::resize_u8_to_f32;

/// Decode + (optional central aspect crop) + resize into a float32 [height, width, C]
/// destination, the per-file work of image_dataset_from_directory.
Tensor load_image(const std::string& path, ColorMode mode, int height, int width,
                  Interpolation interpolation = Interpolation::bilinear,
                  bool crop_to_aspect_ratio = false);

}  // namespace lockstep::data
