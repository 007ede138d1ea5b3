// Resize against hand-computed tf.image.resize values (bilinear/nearest/area, half-pixel
// centres) and Keras's crop_to_aspect_ratio window.
#include <gtest/gtest.h>

#include "lockstep/data/image.h"

using namespace lockstep;
using namespace lockstep::data;

namespace {

Tensor u8_image(int h, int w, int c, const std::vector<int>& v) {
  Tensor t = Tensor::empty({h, w, c}, DType::u8);
  for (size_t i = 0; i < v.size(); ++i) t.data<uint8_t>()[i] = uint8_t(v[i]);
  return t;
}

void expect_near(const Tensor& t, const std::vector<float>& want, float tol = 1e-4f) {
  std::vector<float> got = t.to_vector();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}

}  // namespace

TEST(ImageResize, BilinearUpscaleHalfPixelCenters) {
  // src x positions for 2 -> 4: -0.25 (clamped), 0.25, 0.75, 1.25 (clamped)
  Tensor src = u8_image(2, 2, 1, {0, 10, 20, 30});
  Tensor out = resize_image(src, 4, 4, Interpolation::bilinear);
  EXPECT_EQ(out.shape(), (Shape{4, 4, 1}));
  EXPECT_EQ(out.dtype(), DType::f32);
  expect_near(out, {0, 2.5, 7.5, 10,     //
                    5, 7.5, 12.5, 15,    //
                    15, 17.5, 22.5, 25,  //
                    20, 22.5, 27.5, 30});
}

TEST(ImageResize, BilinearDownscaleReproducesLinearRamp) {
  std::vector<int> v;
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x) v.push_back(y * 4 + x);
  // 4 -> 2 samples at 0.5 and 2.5 on both axes.
  expect_near(resize_image(u8_image(4, 4, 1, v), 2, 2), {2.5, 4.5, 10.5, 12.5});
  // 4 -> 3 (scale 4/3): x = 1/6, 3/2, 17/6
  expect_near(resize_image(u8_image(1, 4, 1, {0, 4, 8, 12}), 1, 3),
              {4.f / 6 * 1, 6.f, 4.f * 17 / 6}, 1e-3f);
}

TEST(ImageResize, BilinearKeepsChannelsSeparateAndFloatInputMatches) {
  Tensor src = u8_image(1, 2, 3, {0, 100, 200, 40, 60, 80});
  // 2 -> 4 along x: weights as in the upscale test
  expect_near(resize_image(src, 1, 4), {0, 100, 200, 10, 90, 170, 30, 70, 110, 40, 60, 80});
  Tensor f = Tensor::from_vector({1, 2, 3}, {0, 100, 200, 40, 60, 80});
  expect_near(resize_image(f, 1, 4), resize_image(src, 1, 4).to_vector());
}

TEST(ImageResize, NearestHalfPixel) {
  // 4 -> 2: floor((x + 0.5) * 2) = 1, 3
  expect_near(resize_image(u8_image(1, 4, 1, {10, 20, 30, 40}), 1, 2, Interpolation::nearest),
              {20, 40});
  // 2 -> 4: floor((x + 0.5) / 2) = 0, 0, 1, 1
  expect_near(resize_image(u8_image(1, 2, 1, {10, 20}), 1, 4, Interpolation::nearest),
              {10, 10, 20, 20});
  // 3 -> 2: floor(0.75) = 0, floor(2.25) = 2
  expect_near(resize_image(u8_image(1, 3, 1, {10, 20, 30}), 1, 2, Interpolation::nearest),
              {10, 30});
}

TEST(ImageResize, AreaIsExactBoxAverage) {
  // 4x4 -> 2x2: mean of each 2x2 block
  std::vector<int> v;
  for (int i = 0; i < 16; ++i) v.push_back(i * 3);
  expect_near(resize_image(u8_image(4, 4, 1, v), 2, 2, Interpolation::area),
              {(0 + 3 + 12 + 15) / 4.f, (6 + 9 + 18 + 21) / 4.f, (24 + 27 + 36 + 39) / 4.f,
               (30 + 33 + 42 + 45) / 4.f});
  // 3 -> 2: [0, 1.5) = (v0 + 0.5 v1) / 1.5, [1.5, 3) = (0.5 v1 + v2) / 1.5
  expect_near(resize_image(u8_image(1, 3, 1, {0, 3, 6}), 1, 2, Interpolation::area), {1, 5});
  // Upscale 2 -> 4 is a replication.
  expect_near(resize_image(u8_image(1, 2, 1, {10, 20}), 1, 4, Interpolation::area),
              {10, 10, 20, 20});
}

TEST(ImageResize, CropToAspectRatioTakesTheCentralWindow) {
  CropBox b = aspect_crop_box(4, 8, 2, 2);
  EXPECT_EQ(b.y, 0);
  EXPECT_EQ(b.x, 2);
  EXPECT_EQ(b.height, 4);
  EXPECT_EQ(b.width, 4);
  CropBox t = aspect_crop_box(300, 200, 180, 180);  // tall: crop rows
  EXPECT_EQ(t.height, 200);
  EXPECT_EQ(t.width, 200);
  EXPECT_EQ(t.y, 50);
  EXPECT_EQ(t.x, 0);
  // 4x8 image, columns 2..5 are the window: resizing it to 2x2 averages 2x2 blocks there.
  std::vector<int> v;
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 8; ++x) v.push_back(x * 10 + y);
  Tensor out = resize_image(u8_image(4, 8, 1, v), 2, 2, Interpolation::area, true);
  expect_near(out, {25.5f, 45.5f, 27.5f, 47.5f});
  // Without the crop the whole width is squeezed.
  Tensor squeezed = resize_image(u8_image(4, 8, 1, v), 2, 2, Interpolation::area, false);
  expect_near(squeezed, {15.5f, 55.5f, 17.5f, 57.5f});
}

TEST(ImageResize, KernelHonoursRowStrideAndRejectsBadSizes) {
  // A 2x2 window at column 1 of a 2x4 image.
  std::vector<uint8_t> src = {0, 10, 20, 0, 0, 30, 40, 0};
  std::vector<float> dst(4);
  resize_u8_to_f32(src.data() + 1, 2, 2, 1, 4, dst.data(), 2, 2, Interpolation::bilinear);
  EXPECT_EQ(dst, (std::vector<float>{10, 20, 30, 40}));
  EXPECT_THROW(resize_image(u8_image(2, 2, 1, {0, 0, 0, 0}), 0, 3), Error);
  EXPECT_THROW(parse_interpolation("bicubic"), Error);
}
