// Decoded-image size cap: a small file whose header announces a huge image (16384 x 16384
// RGBA: 1 GiB decoded) is refused from its header, with a message naming the file, the size and
// the setting that raises the cap — for PNG, JPEG and BMP alike.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "lockstep/data/image.h"
#include "test_util.h"

using namespace lockstep;
using test_util::error_of;

namespace {

void put32be(std::vector<uint8_t>& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(v >> s));
}

void png_chunk(std::vector<uint8_t>& b, const char* type, const std::vector<uint8_t>& data) {
  put32be(b, uint32_t(data.size()));
  const size_t start = b.size();
  b.insert(b.end(), type, type + 4);
  b.insert(b.end(), data.begin(), data.end());
  put32be(b, uint32_t(crc32(0L, b.data() + start, uInt(b.size() - start))));
}

// A PNG whose IHDR says width x height RGBA; the pixel data is a short (incomplete) stream.
std::vector<uint8_t> png_header_only(uint32_t width, uint32_t height) {
  std::vector<uint8_t> b = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<uint8_t> ihdr;
  put32be(ihdr, width);
  put32be(ihdr, height);
  ihdr.insert(ihdr.end(), {8, 6, 0, 0, 0});  // 8-bit RGBA, deflate, no filter, no interlace
  png_chunk(b, "IHDR", ihdr);
  std::vector<uint8_t> zeros(4096, 0), z(8192);
  uLongf zn = z.size();
  compress2(z.data(), &zn, zeros.data(), zeros.size(), 9);
  z.resize(zn);
  png_chunk(b, "IDAT", z);
  png_chunk(b, "IEND", {});
  return b;
}

}  // namespace

TEST(ImageCap, PngThatDecodesTo16384SquaredRgbaIsRefusedFromItsHeader) {
  const auto png = png_header_only(16384, 16384);
  const std::string msg = error_of([&] { data::decode_image(png, "bomb.png"); });
  EXPECT_NE(msg.find("bomb.png"), std::string::npos) << msg;
  EXPECT_NE(msg.find("16384x16384"), std::string::npos) << msg;
  EXPECT_NE(msg.find("LOCKSTEP_MAX_IMAGE_PIXELS"), std::string::npos) << msg;
}

TEST(ImageCap, JpegAndBmpHeadersBeyondTheCapAreRefused) {
  Tensor small = Tensor::zeros({16, 16, 3}, DType::u8);
  // JPEG: patch the frame header (SOF0: FF C0, length, precision, height, width).
  std::vector<uint8_t> jpg = data::encode_jpeg(small);
  size_t sof = 0;
  for (size_t i = 0; i + 9 < jpg.size(); ++i)
    if (jpg[i] == 0xFF && jpg[i + 1] == 0xC0) sof = i;
  ASSERT_GT(sof, 0u);
  jpg[sof + 5] = 16000 >> 8, jpg[sof + 6] = 16000 & 0xFF;  // height
  jpg[sof + 7] = 16000 >> 8, jpg[sof + 8] = 16000 & 0xFF;  // width
  std::string msg = error_of([&] { data::decode_image(jpg, "bomb.jpg"); });
  EXPECT_NE(msg.find("bomb.jpg"), std::string::npos) << msg;
  EXPECT_NE(msg.find("LOCKSTEP_MAX_IMAGE_PIXELS"), std::string::npos) << msg;
  // BMP: width and height at offsets 18 and 22 (little-endian).
  std::vector<uint8_t> bmp = data::encode_bmp(Tensor::zeros({4, 4, 4}, DType::u8));
  for (int k = 0; k < 4; ++k)
    bmp[18 + k] = uint8_t(16384u >> (8 * k)), bmp[22 + k] = uint8_t(16384u >> (8 * k));
  msg = error_of([&] { data::decode_image(bmp, "bomb.bmp"); });
  EXPECT_NE(msg.find("bomb.bmp"), std::string::npos) << msg;
  EXPECT_NE(msg.find("LOCKSTEP_MAX_IMAGE_PIXELS"), std::string::npos) << msg;
}

TEST(ImageCap, TheCapIsConfigurable) {
  EXPECT_EQ(data::kDefaultMaxImagePixels, int64_t(1) << 26);
  const auto png40 = data::encode_png(Tensor::zeros({40, 40, 3}, DType::u8));
  data::set_max_image_pixels(40 * 40);
  EXPECT_EQ(data::decode_image(png40, "ok.png").shape(), (Shape{40, 40, 3}));
  data::set_max_image_pixels(40 * 40 - 1);
  const std::string msg = error_of([&] { data::decode_image(png40, "just-over.png"); });
  EXPECT_NE(msg.find("just-over.png"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1599"), std::string::npos) << msg;
  EXPECT_NE(error_of([] { data::set_max_image_pixels(-1); }), "");
  data::set_max_image_pixels(0);
  EXPECT_EQ(data::decode_image(png40, "ok.png").shape(), (Shape{40, 40, 3}));
}

TEST(ImageCap, TheEnvironmentVariableSetsTheCapUntilTheProgramDoes) {
  const auto png40 = data::encode_png(Tensor::zeros({40, 40, 3}, DType::u8));
  data::set_max_image_pixels(0);
  ::setenv("LOCKSTEP_MAX_IMAGE_PIXELS", "1000", 1);
  EXPECT_EQ(data::max_image_pixels(), 1000);
  std::string msg = error_of([&] { data::decode_image(png40, "env.png"); });
  EXPECT_NE(msg.find("LOCKSTEP_MAX_IMAGE_PIXELS"), std::string::npos) << msg;
  ::setenv("LOCKSTEP_MAX_IMAGE_PIXELS", "lots", 1);
  msg = error_of([&] { data::decode_image(png40, "env.png"); });
  EXPECT_NE(msg.find("LOCKSTEP_MAX_IMAGE_PIXELS"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'lots'"), std::string::npos) << msg;
  data::set_max_image_pixels(5000);  // the program's setting wins
  EXPECT_EQ(data::decode_image(png40, "env.png").shape(), (Shape{40, 40, 3}));
  data::set_max_image_pixels(0);
  ::unsetenv("LOCKSTEP_MAX_IMAGE_PIXELS");
  EXPECT_EQ(data::max_image_pixels(), data::kDefaultMaxImagePixels);
}
