// Image decoding and encoding: JPEG through TurboJPEG, PNG through libpng's simplified API,
// BMP through a small own parser; channel conversion with Keras semantics.
#include <png.h>
#include <sys/stat.h>
#include <turbojpeg.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "lockstep/core/env.h"
#include "lockstep/core/file_io.h"
#include "lockstep/core/parse.h"
#include "lockstep/data/image.h"

namespace lockstep::data {

namespace {

// The decoded-image cap set by set_max_image_pixels (image.h); 0: not set.
std::atomic<int64_t> g_max_image_pixels{0};
constexpr int64_t kMaxImagePixelsLimit = int64_t(1) << 40;

// Refuses, from the header alone, an image larger than the cap.
void check_image_pixels(int64_t w, int64_t h, const std::string& name, const char* format) {
  const int64_t cap = max_image_pixels();
  LS_CHECK(w * h <= cap, "'", name, "' is a ", w, "x", h, " ", format, " (", w * h,
           " pixels), larger than the decoded-image cap of ", cap,
           " pixels; if the image is genuine, raise the cap with LOCKSTEP_MAX_IMAGE_PIXELS=N or "
           "lockstep::data::set_max_image_pixels(N)");
}

// One TurboJPEG handle per thread and direction, created on first use.
struct TjHandle {
  tjhandle h = nullptr;
  ~TjHandle() {
    if (h) tjDestroy(h);
  }
};

TjHandle& tj_decompressor_slot() {
  thread_local TjHandle handle;
  return handle;
}

tjhandle tj_decompressor() {
  TjHandle& handle = tj_decompressor_slot();
  if (!handle.h) handle.h = tjInitDecompress();
  LS_CHECK(handle.h, "TurboJPEG: cannot create a decompressor (", tjGetErrorStr2(nullptr), ")");
  return handle.h;
}

// A TurboJPEG 2.x handle whose last call failed can stay mid-header (tjDecompressHeader3 does
// not abort the libjpeg state on error), and the next file then reads as "tables only".
// After any failure the handle is thrown away; the next call makes a fresh one.
[[noreturn]] void jpeg_fail(tjhandle tj, const std::string& name) {
  std::string msg = tjGetErrorStr2(tj);
  TjHandle& slot = tj_decompressor_slot();
  if (slot.h) {
    tjDestroy(slot.h);
    slot.h = nullptr;
  }
  LS_FAIL("'", name, "' is a corrupt or truncated JPEG (", msg, ")");
}

tjhandle tj_compressor() {
  thread_local TjHandle handle;
  if (!handle.h) handle.h = tjInitCompress();
  LS_CHECK(handle.h, "TurboJPEG: cannot create a compressor (", tjGetErrorStr2(nullptr), ")");
  return handle.h;
}

uint32_t rd32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
uint16_t rd16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }

inline uint8_t luma(int r, int g, int b) {
  // ITU-R 601-2 luma in 16-bit fixed point, rounded: 0.299, 0.587, 0.114.
  return uint8_t((19595 * r + 38470 * g + 7471 * b + 32768) >> 16);
}

Tensor as_u8_image(const Tensor& image, const char* what) {
  LS_CHECK(image.defined() && image.rank() == 3, what, ": expected an image [H, W, C], got ",
           image.defined() ? image.shape().str() : std::string("an undefined tensor"));
  Tensor src = image.contiguous();
  if (src.dtype() == DType::u8) return src;
  LS_CHECK(src.dtype() == DType::f32, what, ": image dtype must be uint8 or float32, got ",
           dtype_name(src.dtype()));
  Tensor out = Tensor::empty(src.shape(), DType::u8);
  const float* s = src.data<float>();
  uint8_t* d = out.data<uint8_t>();
  for (int64_t i = 0, n = src.numel(); i < n; ++i) {
    float v = std::nearbyint(s[i]);
    d[i] = uint8_t(v < 0.f ? 0.f : (v > 255.f ? 255.f : v));
  }
  return out;
}

}  // namespace

int64_t max_image_pixels() {
  const int64_t set = g_max_image_pixels.load(std::memory_order_relaxed);
  if (set > 0) return set;
  // Not set by the program: the environment's value (a few characters to parse, per decode).
  if (auto v = env::text(env::max_image_pixels))
    return parse_int("LOCKSTEP_MAX_IMAGE_PIXELS", *v, 1, kMaxImagePixelsLimit);
  return kDefaultMaxImagePixels;
}

void set_max_image_pixels(int64_t pixels) {
  LS_CHECK(pixels >= 0 && pixels <= kMaxImagePixelsLimit,
           "set_max_image_pixels: the cap must be in 1..", kMaxImagePixelsLimit,
           " (or 0 for the default), got ", pixels);
  g_max_image_pixels.store(pixels, std::memory_order_relaxed);
}

const char* image_format_name(ImageFormat f) {
  switch (f) {
    case ImageFormat::jpeg:
      return "JPEG";
    case ImageFormat::png:
      return "PNG";
    case ImageFormat::bmp:
      return "BMP";
    default:
      return "unknown";
  }
}

ImageFormat detect_image_format(const uint8_t* d, size_t n) {
  if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return ImageFormat::jpeg;
  static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (n >= 8 && std::memcmp(d, png_sig, 8) == 0) return ImageFormat::png;
  if (n >= 2 && d[0] == 'B' && d[1] == 'M') return ImageFormat::bmp;
  return ImageFormat::unknown;
}

ColorMode parse_color_mode(const std::string& s) {
  if (s == "grayscale") return ColorMode::grayscale;
  if (s == "rgb") return ColorMode::rgb;
  if (s == "rgba") return ColorMode::rgba;
  if (s == "keep") return ColorMode::keep;
  LS_FAIL("color_mode must be \"grayscale\", \"rgb\" or \"rgba\", got \"", s, "\"");
}

int color_mode_channels(ColorMode m) {
  switch (m) {
    case ColorMode::grayscale:
      return 1;
    case ColorMode::rgb:
      return 3;
    case ColorMode::rgba:
      return 4;
    default:
      return 0;
  }
}

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::error_code ec;
  auto st = std::filesystem::status(path, ec);
  LS_CHECK(!ec && std::filesystem::exists(st), "image file '", path, "' does not exist");
  LS_CHECK(!std::filesystem::is_directory(st), "'", path, "' is a directory, not an image file");
  // A regular file (a FIFO named x.png would hang the read, /dev/zero would never end), at
  // most kMaxImageFileBytes, read no further than its size.
  const std::string bytes = read_regular_file(path, kMaxImageFileBytes, "image file");
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

// Through a temporary and a rename (write_file_atomic): a full disk or a size limit leaves no
// empty or truncated image behind, and a previous file of that name untouched.
void write_file_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  write_file_atomic(path, bytes, "image file");
}

// ---- channel conversion ------------------------------------------------------------------

Tensor convert_channels(const Tensor& image, int channels, const std::string& name) {
  LS_CHECK(image.rank() == 3 && image.dtype() == DType::u8, name,
           ": convert_channels expects a uint8 [H, W, C] image, got ", image.shape().str());
  const int c = int(image.dim(2));
  LS_CHECK(c >= 1 && c <= 4, name, ": an image has 1 to 4 channels, this one has ", c);
  LS_CHECK(channels == 1 || channels == 3 || channels == 4, name,
           ": can convert to 1, 3 or 4 channels, not ", channels);
  if (c == channels) return image;
  Tensor src = image.contiguous();
  const int64_t n = image.dim(0) * image.dim(1);
  Tensor out = Tensor::empty({image.dim(0), image.dim(1), channels}, DType::u8);
  const uint8_t* s = src.data<uint8_t>();
  uint8_t* d = out.data<uint8_t>();
  const bool gray_src = c <= 2, alpha_src = (c == 2 || c == 4);
  for (int64_t i = 0; i < n; ++i, s += c, d += channels) {
    uint8_t r = s[0], g = gray_src ? s[0] : s[1], b = gray_src ? s[0] : s[2];
    uint8_t a = alpha_src ? s[c - 1] : 255;
    if (channels == 1) {
      d[0] = gray_src ? s[0] : luma(r, g, b);
    } else {
      d[0] = r;
      d[1] = g;
      d[2] = b;
      if (channels == 4) d[3] = a;
    }
  }
  return out;
}

static Tensor finish_mode(Tensor img, ColorMode mode, const std::string& name) {
  int want = color_mode_channels(mode);
  if (want == 0) return img;
  return convert_channels(img, want, name);
}

// ---- JPEG --------------------------------------------------------------------------------

// The number of scans (SOS markers) in a JPEG's marker structure, walked segment by segment
// (an entropy-coded segment ends at the first 0xFF not followed by 0x00 or RSTn), so bytes
// inside APPn payloads or scan data are not counted. Stops at EOI, or where the structure ends
// early (the decoder reports that).
static int64_t jpeg_scan_count(const uint8_t* d, size_t size) {
  int64_t scans = 0;
  size_t i = 2;  // after SOI
  while (i + 4 <= size) {
    if (d[i] != 0xFF) return scans;
    const uint8_t marker = d[i + 1];
    if (marker == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    if (marker == 0xD9) return scans;                            // EOI
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {  // TEM, RSTn: no length
      i += 2;
      continue;
    }
    i += 2 + ((size_t(d[i + 2]) << 8) | d[i + 3]);
    if (marker != 0xDA) continue;
    ++scans;
    while (i + 1 < size &&
           !(d[i] == 0xFF && d[i + 1] != 0x00 && (d[i + 1] < 0xD0 || d[i + 1] > 0xD7)))
      ++i;
  }
  return scans;
}

// libjpeg-turbo's own fuzzers stop progressive JPEGs at 500 scans: a legal file of ~2,000 scans
// took 46 s to decode one 8192x8192 image. Real encoders write at most a few dozen.
constexpr int64_t kMaxJpegScans = 500;

static void check_jpeg_scans(const uint8_t* data, size_t size, const std::string& name) {
  const int64_t scans = jpeg_scan_count(data, size);
  LS_CHECK(scans <= kMaxJpegScans, "'", name, "' is a progressive JPEG of ", scans,
           " scans, more than the ", kMaxJpegScans,
           " this decoder accepts (decoding it would take minutes; re-encode it, e.g. as a "
           "baseline JPEG)");
}

Tensor decode_jpeg(const uint8_t* data, size_t size, const std::string& name, ColorMode mode) {
  tjhandle tj = tj_decompressor();
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(tj, data, (unsigned long)size, &w, &h, &subsamp, &colorspace) != 0)
    jpeg_fail(tj, name);
  LS_CHECK(w > 0 && h > 0, "'", name, "' is a corrupt JPEG (implausible size ", w, "x", h, ")");
  check_image_pixels(w, h, name, "JPEG");
  check_jpeg_scans(data, size, name);
  const bool gray_file = colorspace == TJCS_GRAY;
  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  int pf, c;
  // libjpeg converts CMYK to nothing but CMYK: a CMYK file wanted in grayscale goes through
  // RGB (below) and finish_mode's luma.
  if ((mode == ColorMode::grayscale && !cmyk) || (gray_file && mode == ColorMode::keep)) {
    pf = TJPF_GRAY;  // libjpeg takes the Y (601 luma) plane directly
    c = 1;
  } else if (cmyk) {
    pf = TJPF_CMYK;
    c = 4;
  } else {
    pf = TJPF_RGB;
    c = 3;
  }
  Tensor out = Tensor::empty({h, w, c}, DType::u8);
  // TJFLAG_FASTDCT: the integer fast IDCT, TensorFlow's decode_jpeg default (JDCT_IFAST).
  // STOPONWARNING: a truncated file is an error, not a grey-padded image.
  if (tjDecompress2(tj, data, (unsigned long)size, out.data<uint8_t>(), w, 0, h, pf,
                    TJFLAG_FASTDCT | TJFLAG_STOPONWARNING) != 0)
    jpeg_fail(tj, name);
  if (cmyk) {  // Adobe CMYK JPEGs store inverted ink values: R = C * K / 255, ...
    Tensor rgb = Tensor::empty({h, w, 3}, DType::u8);
    const uint8_t* s = out.data<uint8_t>();
    uint8_t* d = rgb.data<uint8_t>();
    for (int64_t i = 0, n = int64_t(w) * h; i < n; ++i, s += 4, d += 3)
      for (int k = 0; k < 3; ++k) d[k] = uint8_t((s[k] * s[3] + 127) / 255);
    out = rgb;
  }
  return finish_mode(out, mode, name);
}

std::vector<uint8_t> encode_jpeg(const Tensor& image, int quality) {
  Tensor img = as_u8_image(image, "encode_jpeg");
  const int h = int(img.dim(0)), w = int(img.dim(1)), c = int(img.dim(2));
  LS_CHECK(c == 1 || c == 3, "encode_jpeg: JPEG holds 1 or 3 channels, the image has ", c,
           " (convert it with convert_channels first, or write PNG)");
  LS_CHECK(quality >= 1 && quality <= 100, "encode_jpeg: quality must be in 1..100, got ", quality);
  LS_CHECK(h > 0 && w > 0, "encode_jpeg: empty image ", img.shape().str());
  tjhandle tj = tj_compressor();
  unsigned char* buf = nullptr;
  unsigned long len = 0;
  int rc = tjCompress2(tj, img.data<uint8_t>(), w, 0, h, c == 1 ? TJPF_GRAY : TJPF_RGB, &buf, &len,
                       c == 1 ? TJSAMP_GRAY : TJSAMP_420, quality, 0);
  if (rc != 0) {
    std::string msg = tjGetErrorStr2(tj);
    if (buf) tjFree(buf);
    LS_FAIL("encode_jpeg failed: ", msg);
  }
  std::vector<uint8_t> out(buf, buf + len);
  tjFree(buf);
  return out;
}

// ---- PNG ---------------------------------------------------------------------------------

Tensor decode_png(const uint8_t* data, size_t size, const std::string& name, ColorMode mode) {
  png_image img;
  std::memset(&img, 0, sizeof(img));
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&img, data, size)) {
    std::string msg = img.message;
    png_image_free(&img);
    LS_FAIL("'", name, "' is a corrupt or truncated PNG (", msg, ")");
  }
  if (img.width == 0 || img.height == 0) {
    png_image_free(&img);
    LS_FAIL("'", name, "' is a corrupt PNG (implausible size ", img.width, "x", img.height, ")");
  }
  try {
    check_image_pixels(img.width, img.height, name, "PNG");
  } catch (...) {
    png_image_free(&img);
    throw;
  }
  // The file's own layout, expanded to 8-bit direct colour (palettes become RGB/RGBA).
  img.format &= ~(PNG_FORMAT_FLAG_COLORMAP | PNG_FORMAT_FLAG_LINEAR);
  // 16-bit samples are gamma-encoded like 8-bit ones: scale them, no linear->sRGB curve.
  img.flags |= PNG_IMAGE_FLAG_16BIT_sRGB;
  const int c = int(PNG_IMAGE_SAMPLE_CHANNELS(img.format));
  Tensor out = Tensor::empty({int64_t(img.height), int64_t(img.width), c}, DType::u8);
  if (!png_image_finish_read(&img, nullptr, out.raw(), 0, nullptr)) {
    std::string msg = img.message;
    png_image_free(&img);
    LS_FAIL("'", name, "' is a corrupt or truncated PNG (", msg, ")");
  }
  png_image_free(&img);
  return finish_mode(out, mode, name);
}

std::vector<uint8_t> encode_png(const Tensor& image) {
  Tensor img = as_u8_image(image, "encode_png");
  const int c = int(img.dim(2));
  LS_CHECK(c >= 1 && c <= 4, "encode_png: PNG holds 1 to 4 channels, the image has ", c);
  LS_CHECK(img.dim(0) > 0 && img.dim(1) > 0, "encode_png: empty image ", img.shape().str());
  png_image pi;
  std::memset(&pi, 0, sizeof(pi));
  pi.version = PNG_IMAGE_VERSION;
  pi.width = png_uint_32(img.dim(1));
  pi.height = png_uint_32(img.dim(0));
  static const png_uint_32 formats[5] = {0, PNG_FORMAT_GRAY, PNG_FORMAT_GA, PNG_FORMAT_RGB,
                                         PNG_FORMAT_RGBA};
  pi.format = formats[c];
  png_alloc_size_t len = 0;
  if (!png_image_write_to_memory(&pi, nullptr, &len, 0, img.raw(), 0, nullptr))
    LS_FAIL("encode_png failed: ", pi.message);
  std::vector<uint8_t> out(len);
  if (!png_image_write_to_memory(&pi, out.data(), &len, 0, img.raw(), 0, nullptr))
    LS_FAIL("encode_png failed: ", pi.message);
  out.resize(len);
  return out;
}

// ---- BMP ---------------------------------------------------------------------------------

Tensor decode_bmp(const uint8_t* d, size_t n, const std::string& name, ColorMode mode) {
  LS_CHECK(n >= 54, "'", name, "' is a truncated BMP (", n, " bytes, the headers need 54)");
  LS_CHECK(d[0] == 'B' && d[1] == 'M', "'", name, "' is not a BMP file (no 'BM' signature)");
  const uint32_t pixel_offset = rd32(d + 10);
  const uint32_t dib = rd32(d + 14);
  LS_CHECK(dib >= 40, "'", name, "': unsupported BMP header (", dib,
           "-byte DIB header; only BITMAPINFOHEADER and later)");
  const int32_t w = int32_t(rd32(d + 18)), h_raw = int32_t(rd32(d + 22));
  const int bpp = rd16(d + 28);
  const uint32_t compression = rd32(d + 30);
  LS_CHECK(w > 0 && h_raw != 0 && h_raw != INT32_MIN, "'", name, "' is a corrupt BMP (size ", w,
           "x", h_raw, ")");
  const bool top_down = h_raw < 0;
  const int64_t h = top_down ? -int64_t(h_raw) : h_raw;
  check_image_pixels(w, h, name, "BMP");
  LS_CHECK(bpp == 24 || bpp == 32, "'", name, "': unsupported BMP with ", bpp,
           " bits per pixel (only uncompressed 24- and 32-bit)");
  LS_CHECK(compression == 0 || (compression == 3 && bpp == 32), "'", name,
           "': unsupported BMP compression ", compression, " (only uncompressed)");
  int shift[4] = {16, 8, 0, 24};  // B G R A byte order of BI_RGB, as shifts of a 32-bit pixel
  bool has_alpha_mask = true;
  if (compression == 3) {
    LS_CHECK(n >= 14 + 40 + 12, "'", name, "' is a truncated BMP (bit masks)");
    uint32_t masks[4] = {rd32(d + 54), rd32(d + 58), rd32(d + 62),
                         dib >= 56 && n >= 70 ? rd32(d + 66) : 0};
    for (int k = 0; k < 4; ++k) {
      uint32_t m = masks[k];
      if (k == 3 && m == 0) {
        has_alpha_mask = false;
        continue;
      }
      int s = 0;
      while (s < 32 && !((m >> s) & 1)) ++s;
      LS_CHECK(s < 32 && (m >> s) == 0xFF, "'", name,
               "': unsupported BMP bit masks (only 8 bits per channel)");
      shift[k] = s;
    }
  }
  const int bytes_pp = bpp / 8;
  const int64_t row = (int64_t(w) * bytes_pp + 3) / 4 * 4;
  LS_CHECK(pixel_offset >= 26 && uint64_t(pixel_offset) + uint64_t(row) * h <= n, "'", name,
           "' is a truncated BMP (needs ", uint64_t(pixel_offset) + uint64_t(row) * h,
           " bytes, has ", n, ")");
  const int c = bpp == 24 ? 3 : 4;
  Tensor out = Tensor::empty({h, w, c}, DType::u8);
  uint8_t* o = out.data<uint8_t>();
  for (int64_t y = 0; y < h; ++y) {
    const uint8_t* s = d + pixel_offset + row * (top_down ? y : h - 1 - y);
    uint8_t* r = o + y * w * c;
    if (bpp == 24) {
      for (int x = 0; x < w; ++x, s += 3, r += 3) {
        r[0] = s[2];
        r[1] = s[1];
        r[2] = s[0];
      }
    } else {
      for (int x = 0; x < w; ++x, s += 4, r += 4) {
        uint32_t p = rd32(s);
        r[0] = uint8_t(p >> shift[0]);
        r[1] = uint8_t(p >> shift[1]);
        r[2] = uint8_t(p >> shift[2]);
        r[3] = has_alpha_mask ? uint8_t(p >> shift[3]) : 255;
      }
    }
  }
  return finish_mode(out, mode, name);
}

std::vector<uint8_t> encode_bmp(const Tensor& image) {
  Tensor img = as_u8_image(image, "encode_bmp");
  int c = int(img.dim(2));
  LS_CHECK(c == 1 || c == 3 || c == 4, "encode_bmp: BMP holds 1, 3 or 4 channels here, got ", c);
  const int64_t h = img.dim(0), w = img.dim(1);
  const int bpp = c == 4 ? 32 : 24, bytes_pp = bpp / 8;
  const int64_t row = (w * bytes_pp + 3) / 4 * 4;
  const int64_t total = 54 + row * h;
  std::vector<uint8_t> out(size_t(total), 0);
  auto w32 = [&](size_t at, uint32_t v) {
    for (int k = 0; k < 4; ++k) out[at + k] = uint8_t(v >> (8 * k));
  };
  out[0] = 'B';
  out[1] = 'M';
  w32(2, uint32_t(total));
  w32(10, 54);
  w32(14, 40);
  w32(18, uint32_t(w));
  w32(22, uint32_t(h));
  out[26] = 1;
  out[28] = uint8_t(bpp);
  w32(34, uint32_t(row * h));
  const uint8_t* s = img.data<uint8_t>();
  for (int64_t y = 0; y < h; ++y) {
    uint8_t* r = out.data() + 54 + row * (h - 1 - y);
    for (int64_t x = 0; x < w; ++x, s += c, r += bytes_pp) {
      uint8_t R = s[0], G = c == 1 ? s[0] : s[1], B = c == 1 ? s[0] : s[2];
      r[0] = B;
      r[1] = G;
      r[2] = R;
      if (c == 4) r[3] = s[3];
    }
  }
  return out;
}

// ---- dispatch ----------------------------------------------------------------------------

Tensor decode_image(const uint8_t* data, size_t size, const std::string& name, ColorMode mode) {
  LS_CHECK(size > 0, "'", name, "' is empty (0 bytes), not an image");
  switch (detect_image_format(data, size)) {
    case ImageFormat::jpeg:
      return decode_jpeg(data, size, name, mode);
    case ImageFormat::png:
      return decode_png(data, size, name, mode);
    case ImageFormat::bmp:
      return decode_bmp(data, size, name, mode);
    default:
      break;
  }
  std::string head;
  for (size_t i = 0; i < std::min<size_t>(size, 8); ++i) {
    char b[4];
    std::snprintf(b, sizeof(b), "%02X", data[i]);
    head += (i ? " " : "") + std::string(b);
  }
  LS_FAIL("'", name, "' is not a JPEG, PNG or BMP image (first bytes ", head,
          "); remove it or use on_error=\"skip\"");
}

Tensor decode_image(const std::vector<uint8_t>& bytes, const std::string& name, ColorMode mode) {
  return decode_image(bytes.data(), bytes.size(), name, mode);
}

Tensor read_image(const std::string& path, ColorMode mode) {
  std::vector<uint8_t> bytes = read_file_bytes(path);
  return decode_image(bytes, path, mode);
}

void write_image(const std::string& path, const Tensor& image, int jpeg_quality) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char ch) { return char(std::tolower(ch)); });
  if (ext == ".png") return write_file_bytes(path, encode_png(image));
  if (ext == ".jpg" || ext == ".jpeg")
    return write_file_bytes(path, encode_jpeg(image, jpeg_quality));
  if (ext == ".bmp") return write_file_bytes(path, encode_bmp(image));
  LS_FAIL("write_image: '", path, "' has no known image extension (.png, .jpg, .jpeg, .bmp)");
}

Tensor load_image(const std::string& path, ColorMode mode, int height, int width,
                  Interpolation interp, bool crop_to_aspect_ratio) {
  Tensor img = read_image(path, mode);
  return resize_image(img, height, width, interp, crop_to_aspect_ratio);
}

}  // namespace lockstep::data
