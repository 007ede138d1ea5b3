// JPEGs the probe found mishandled (issue 39), from the fuzz corpus (written by
// tests/data/make_jpeg_cases.c): a CMYK JPEG read in grayscale (called corrupt: libjpeg
// converts CMYK to nothing else) and a legal progressive JPEG of 704 scans (refused before
// decoding: ~2,000 such scans took 46 s for one 8192x8192 image).
#include <gtest/gtest.h>

#include <algorithm>

#include "lockstep/data/image.h"
#include "test_util.h"

using namespace lockstep;

namespace {

std::string corpus(const std::string& file) {
  return std::string(LOCKSTEP_SOURCE_DIR) + "/tests/fuzz/corpus/image_jpeg/" + file;
}

}  // namespace

TEST(JpegLimits, ACmykJpegReadsInGrayscaleAsTheLumaOfItsRgb) {
  const Tensor rgb = data::read_image(corpus("cmyk_8x8.jpg"), data::ColorMode::rgb);
  ASSERT_EQ(rgb.shape().str(), Shape({8, 8, 3}).str());
  const Tensor gray = data::read_image(corpus("cmyk_8x8.jpg"), data::ColorMode::grayscale);
  ASSERT_EQ(gray.shape().str(), Shape({8, 8, 1}).str());
  // The same pixels as converting the RGB decode (convert_channels' luma).
  const Tensor want = data::convert_channels(rgb, 1, "cmyk_8x8.jpg");
  EXPECT_EQ(gray.to_vector(), want.to_vector());
  float lo = 255, hi = 0;  // not a blank image
  for (float v : gray.to_vector()) lo = std::min(lo, v), hi = std::max(hi, v);
  EXPECT_LT(lo, hi);
}

TEST(JpegLimits, AProgressiveJpegOfTooManyScansIsRefusedNamingTheFile) {
  const std::string file = corpus("progressive_704_scans.jpg");
  for (auto mode : {data::ColorMode::keep, data::ColorMode::grayscale}) {
    const std::string msg = test_util::error_of([&] { data::read_image(file, mode); });
    EXPECT_NE(msg.find("progressive_704_scans.jpg"), std::string::npos) << msg;
    EXPECT_NE(msg.find("704 scans"), std::string::npos) << msg;
    EXPECT_NE(msg.find("more than the 500"), std::string::npos) << msg;
  }
  // The other corpus JPEGs (one scan each) still decode.
  EXPECT_EQ(data::read_image(corpus("rgb_9x7.jpg")).dim(2), 3);
  EXPECT_EQ(data::read_image(corpus("gray_8x8.jpg")).dim(2), 1);
}
