// The dataset-map augmentation functions (lockstep/data/augment.h): exact values against
// hand-computed pixels, Keras formulas, determinism under a key, dtypes and errors.
#include "lockstep/data/augment.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include "lockstep/core/rng.h"
#include "test_util.h"

namespace ls = lockstep;
namespace data = lockstep::data;
using ls::Shape;
using ls::Tensor;

namespace {

// [n, h, w, c] with value 10*y + x (+ 100*i per image, + 1000*channel).
Tensor ramp(int64_t n, int64_t h, int64_t w, int64_t c) {
  std::vector<float> v;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x)
        for (int64_t ch = 0; ch < c; ++ch) v.push_back(float(100 * i + 10 * y + x + 1000 * ch));
  return Tensor::from_vector({n, h, w, c}, v);
}

float at(const Tensor& t, int64_t i, int64_t y, int64_t x, int64_t c = 0) {
  return t.to_vector()[size_t(((i * t.dim(1) + y) * t.dim(2) + x) * t.dim(3) + c)];
}

Tensor random_images(Shape s, uint64_t seed, float lo = 0.f, float hi = 255.f) {
  ls::Philox r(seed);
  std::vector<float> v(size_t(s.numel()));
  for (auto& e : v) e = r.uniform(lo, hi);
  return Tensor::from_vector(s, v);
}

using lockstep::test_util::error_of;

}  // namespace

TEST(Augment, FlipExactValues) {
  Tensor x = ramp(1, 2, 3, 1);  // rows [0 1 2], [10 11 12]
  EXPECT_EQ(data::flip(x, true, false).to_vector(), (std::vector<float>{2, 1, 0, 12, 11, 10}));
  EXPECT_EQ(data::flip(x, false, true).to_vector(), (std::vector<float>{10, 11, 12, 0, 1, 2}));
  EXPECT_EQ(data::flip(x, true, true).to_vector(), (std::vector<float>{12, 11, 10, 2, 1, 0}));
  // Channels move together.
  Tensor c = ramp(1, 1, 2, 3);
  EXPECT_EQ(data::flip(c, true, false).to_vector(),
            (std::vector<float>{1, 1001, 2001, 0, 1000, 2000}));
}

TEST(Augment, RandomFlipFlipsAboutHalfTheImagesAndOnlyAlongTheMode) {
  Tensor x = ramp(64, 3, 4, 2);
  Tensor y = data::random_flip(x, 42, "horizontal");
  Tensor h = data::flip(x, true, false);
  int flipped = 0;
  auto xv = x.to_vector(), yv = y.to_vector(), hv = h.to_vector();
  const size_t sz = 3 * 4 * 2;
  for (size_t i = 0; i < 64; ++i) {
    bool same = std::equal(yv.begin() + i * sz, yv.begin() + (i + 1) * sz, xv.begin() + i * sz);
    bool flip = std::equal(yv.begin() + i * sz, yv.begin() + (i + 1) * sz, hv.begin() + i * sz);
    EXPECT_TRUE(same || flip) << "image " << i;
    flipped += flip;
  }
  EXPECT_GT(flipped, 16);
  EXPECT_LT(flipped, 48);
}

TEST(Augment, RotationByQuarterTurnWithNearestIsExact) {
  // factor 0.25 of 2*pi = 90 degrees counter-clockwise: out[y][x] = in[x][W-1-y].
  Tensor x = ramp(2, 4, 4, 2);
  Tensor y = data::random_rotation(x, 7, {0.25, 0.25}, {.interpolation = "nearest"});
  for (int i = 0; i < 2; ++i)
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 4; ++c)
        for (int ch = 0; ch < 2; ++ch) EXPECT_EQ(at(y, i, r, c, ch), at(x, i, c, 3 - r, ch));
  // Bilinear lands on pixel centres too, and uint8 images stay uint8 with the same values.
  Tensor yb = data::random_rotation(x, 7, {0.25, 0.25});
  for (size_t k = 0; k < 32; ++k) EXPECT_NEAR(yb.to_vector()[k], y.to_vector()[k], 1e-3);
  Tensor u = Tensor::empty({4, 4, 1}, ls::DType::u8);
  for (int k = 0; k < 16; ++k) u.data<uint8_t>()[k] = uint8_t(k * 10);
  Tensor uy = data::random_rotation(u, 1, {-0.25, -0.25}, {.interpolation = "nearest"});
  ASSERT_EQ(uy.dtype(), ls::DType::u8);
  ASSERT_EQ(uy.shape(), Shape({4, 4, 1}));
  // -90 degrees (clockwise): out[y][x] = in[H-1-x][y].
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) EXPECT_EQ(uy.data<uint8_t>()[r * 4 + c], (3 - c) * 40 + r * 10);
}

TEST(Augment, ZoomInMatchesHandComputedPixels) {
  // height_factor -0.5: zoom 0.5 about the centre; in = 10*y + x is linear, so bilinear is exact:
  // the input point of output (y, x) is (0.5*y + 1, 0.5*x + 1) on a 5x5 image.
  Tensor x = ramp(1, 5, 5, 1);
  Tensor y = data::random_zoom(x, 3, {-0.5, -0.5});
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 5; ++c)
      EXPECT_NEAR(at(y, 0, r, c), 10 * (0.5f * r + 1) + (0.5f * c + 1), 1e-4) << r << "," << c;
  // Zoom out 2x with a constant fill: the centre keeps its value, the corner is fill.
  Tensor z = data::random_zoom(x, 3, {1.0, 1.0}, std::nullopt,
                               {.fill_mode = "constant", .fill_value = -1.f});
  EXPECT_NEAR(at(z, 0, 2, 2), 22, 1e-4);
  EXPECT_NEAR(at(z, 0, 0, 0), -1, 1e-4);
  EXPECT_NEAR(at(z, 0, 1, 1), 0, 1e-4);  // input point (0, 0)
  // A separate width factor: rows keep their scale.
  Tensor w = data::random_zoom(x, 3, {0.0, 0.0}, data::Factor{-0.5, -0.5});
  for (int c = 0; c < 5; ++c) EXPECT_NEAR(at(w, 0, 3, c), 30 + 0.5f * c + 1, 1e-4);
}

TEST(Augment, TranslationMatchesHandComputedPixels) {
  // height 0.2 of 5 = 1 pixel down, width -0.4 of 5 = 2 pixels left.
  Tensor x = ramp(1, 5, 5, 1);
  Tensor y = data::random_translation(x, 11, {0.2, 0.2}, {-0.4, -0.4},
                                      {.fill_mode = "constant", .interpolation = "nearest"});
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 5; ++c) {
      int sr = r - 1, sc = c + 2;
      float want = (sr >= 0 && sc < 5) ? float(10 * sr + sc) : 0.f;
      EXPECT_EQ(at(y, 0, r, c), want) << r << "," << c;
    }
  // reflect (Keras default): 2 pixels right maps x -> x - 2, reflected: [1, 0, 0, 1, 2].
  Tensor rf = data::random_translation(x, 11, 0.0, {0.4, 0.4}, {.interpolation = "nearest"});
  EXPECT_EQ(at(rf, 0, 0, 0), 1);
  EXPECT_EQ(at(rf, 0, 0, 1), 0);
  EXPECT_EQ(at(rf, 0, 0, 2), 0);
  EXPECT_EQ(at(rf, 0, 0, 3), 1);
  EXPECT_EQ(at(rf, 0, 3, 4), 32);
  // wrap: [3, 4, 0, 1, 2]; nearest: [0, 0, 0, 1, 2].
  Tensor wr = data::random_translation(x, 11, 0.0, {0.4, 0.4},
                                       {.fill_mode = "wrap", .interpolation = "nearest"});
  EXPECT_EQ(at(wr, 0, 1, 0), 13);
  EXPECT_EQ(at(wr, 0, 1, 1), 14);
  EXPECT_EQ(at(wr, 0, 1, 2), 10);
  Tensor nr = data::random_translation(x, 11, 0.0, {0.4, 0.4},
                                       {.fill_mode = "nearest", .interpolation = "nearest"});
  EXPECT_EQ(at(nr, 0, 1, 1), 10);
  EXPECT_EQ(at(nr, 0, 1, 4), 12);
}

TEST(Augment, AffineTransformFollowsTheProjectiveConvention) {
  // [a0 a1 a2 b0 b1 b2 c0 c1] = shift the input point by (+1.5, -0.25): bilinear of a linear
  // ramp is exact inside the image.
  Tensor x = ramp(1, 4, 6, 1);
  Tensor y = data::affine_transform(x, {1, 0, 1.5f, 0, 1, 0.25f, 0, 0}, {.fill_mode = "nearest"});
  EXPECT_NEAR(at(y, 0, 1, 2), 10 * 1.25f + 3.5f, 1e-4);
  EXPECT_NEAR(at(y, 0, 2, 0), 10 * 2.25f + 1.5f, 1e-4);
  EXPECT_NEAR(at(y, 0, 2, 5), 10 * 2.25f + 5, 1e-4);  // clamped to the last column
}

TEST(Augment, ContrastFollowsTheKerasFormula) {
  // Two channels, four pixels: channel means 2.5 and 25.
  Tensor x = Tensor::from_vector({1, 2, 2, 2}, {1, 10, 2, 20, 3, 30, 4, 40});
  Tensor y = data::adjust_contrast(x, 2.f, {0.f, 255.f});
  EXPECT_EQ(y.to_vector(), (std::vector<float>{0, 0, 1.5f, 15, 3.5f, 35, 5.5f, 55}));
  // Clipped to value_range: channel 0 -> -0.5 is clipped at 0, 55 at 50.
  Tensor c = data::adjust_contrast(x, 2.f, {0.f, 50.f});
  EXPECT_EQ(c.to_vector()[7], 50.f);
  // random_contrast: one factor per image in [1 - 0.3, 1 + 0.6], the same for all channels.
  Tensor imgs = random_images({16, 3, 4, 3}, 5, 80, 170);  // never clipped
  Tensor r = data::random_contrast(imgs, 9, {0.3, 0.6});
  auto xv = imgs.to_vector(), rv = r.to_vector();
  std::vector<float> factors;
  for (int i = 0; i < 16; ++i) {
    double f = -1;
    for (int ch = 0; ch < 3; ++ch) {
      double m = 0;
      for (int p = 0; p < 12; ++p) m += xv[size_t((i * 12 + p) * 3 + ch)];
      m /= 12;
      // The factor recovered from each pixel is the same within the image.
      for (int p = 0; p < 12; ++p) {
        size_t k = size_t((i * 12 + p) * 3 + ch);
        if (std::fabs(xv[k] - m) < 5) continue;  // too close to the mean to recover f
        double fk = (rv[k] - m) / (xv[k] - m);
        if (f < 0) f = fk;
        EXPECT_NEAR(fk, f, 1e-3) << i;
      }
    }
    EXPECT_GE(f, 0.7 - 1e-4);
    EXPECT_LE(f, 1.6 + 1e-4);
    factors.push_back(float(f));
  }
  EXPECT_NE(factors[0], factors[1]);
}

TEST(Augment, BrightnessAddsFactorTimesRangeAndClips) {
  Tensor x = Tensor::from_vector({1, 1, 3, 1}, {0.f, 100.f, 250.f});
  EXPECT_EQ(data::adjust_brightness(x, 10.f).to_vector(), (std::vector<float>{10, 110, 255}));
  EXPECT_EQ(data::adjust_brightness(x, -0.5f, {0.f, 1.f}).to_vector(),
            (std::vector<float>{0, 1, 1}));
  // factor (0.1, 0.2) on [0, 255]: delta in [25.5, 51] per image.
  Tensor imgs = random_images({8, 2, 2, 3}, 3, 0, 100);
  Tensor r = data::random_brightness(imgs, 4, {0.1, 0.2});
  auto xv = imgs.to_vector(), rv = r.to_vector();
  for (int i = 0; i < 8; ++i) {
    float d = rv[size_t(i * 12)] - xv[size_t(i * 12)];
    EXPECT_GE(d, 25.5f - 1e-3f);
    EXPECT_LE(d, 51.f + 1e-3f);
    for (int k = 0; k < 12; ++k)
      EXPECT_NEAR(rv[size_t(i * 12 + k)] - xv[size_t(i * 12 + k)], d, 1e-3);
  }
  // value_range [0, 1] with factor 1: everything can saturate at 1 but never exceed it.
  Tensor u = data::random_brightness(random_images({4, 2, 2, 1}, 8, 0, 1), 2, 1.0, {0.f, 1.f});
  for (float v : u.to_vector()) EXPECT_TRUE(v >= 0.f && v <= 1.f);
}

TEST(Augment, CropsAreWindowsOfTheInput) {
  Tensor x = ramp(6, 6, 7, 1);
  Tensor c = data::center_crop(x, 3, 4);
  ASSERT_EQ(c.shape(), Shape({6, 3, 4, 1}));
  EXPECT_EQ(at(c, 2, 0, 0), 200 + 10 * 1 + 1);  // top (6-3)/2 = 1, left (7-4)/2 = 1
  Tensor r = data::random_crop(x, 5, 3, 4);
  ASSERT_EQ(r.shape(), Shape({6, 3, 4, 1}));
  std::set<float> corners;
  for (int i = 0; i < 6; ++i) {
    float v = at(r, i, 0, 0) - 100 * i;
    int top = int(v) / 10, left = int(v) % 10;
    EXPECT_LE(top, 3);
    EXPECT_LE(left, 3);
    for (int y = 0; y < 3; ++y)
      for (int xx = 0; xx < 4; ++xx)
        EXPECT_EQ(at(r, i, y, xx), 100 * i + 10 * (top + y) + left + xx);
    corners.insert(v);
  }
  EXPECT_GT(corners.size(), 1u);  // offsets are drawn per image
  // Smaller images are resized (Keras): the output has the target size.
  EXPECT_EQ(data::random_crop(ramp(1, 2, 2, 1), 1, 4, 4).shape(), Shape({1, 4, 4, 1}));
}

TEST(Augment, SameKeySameResultOtherKeyOrCounterDiffers) {
  Tensor x = random_images({4, 8, 8, 3}, 1);
  auto rot = [&](data::RandomKey k) { return data::random_rotation(x, k, 0.2).to_vector(); };
  EXPECT_EQ(rot(5), rot(5));
  EXPECT_NE(rot(5), rot(6));
  EXPECT_NE(rot({5, 0}), rot({5, 1}));
  EXPECT_EQ(data::random_contrast(x, 3, 0.5).to_vector(),
            data::random_contrast(x, 3, 0.5).to_vector());
  // One key drives different transformations independently (salted per kind).
  EXPECT_NE(data::random_zoom(x, 9, 0.3).to_vector(), data::random_rotation(x, 9, 0.3).to_vector());
}

TEST(Augment, SingleImagesStayHwcAndUint8StaysUint8) {
  Tensor u = Tensor::empty({5, 6, 3}, ls::DType::u8);
  for (int64_t k = 0; k < u.numel(); ++k) u.data<uint8_t>()[k] = uint8_t(k % 251);
  for (Tensor y : {data::random_flip(u, 1), data::random_rotation(u, 1, 0.1),
                   data::random_contrast(u, 1, 0.5), data::random_brightness(u, 1, 0.5)}) {
    EXPECT_EQ(y.dtype(), ls::DType::u8);
    EXPECT_EQ(y.shape(), Shape({5, 6, 3}));
  }
  EXPECT_EQ(data::center_crop(u, 3, 4).shape(), Shape({3, 4, 3}));
  // The flip of a single image equals the flip of it as a batch of one.
  Tensor f = data::flip(u, true, false);
  EXPECT_EQ(f.data<uint8_t>()[0], u.data<uint8_t>()[5 * 3]);
}

TEST(Augment, BadArgumentsNameTheFunctionAndArgument) {
  Tensor x = random_images({1, 4, 4, 1}, 2);
  EXPECT_NE(error_of([&] { data::random_flip(x, 1, "diagonal"); }).find("horizontal_and_vertical"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              data::random_rotation(x, 1, 0.1, {.fill_mode = "mirror"});
            }).find("fill_mode"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              data::random_zoom(x, 1, {-1.5, 0.2});
            }).find("random_zoom: height_factor"),
            std::string::npos);
  EXPECT_NE(error_of([&] { data::random_brightness(x, 1, 1.5); }).find("[-1, 1]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { data::random_contrast(x, 1, -0.1); }).find("random_contrast: factor"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              data::random_flip(Tensor::zeros({4, 4}), 1);
            }).find("HWC"),
            std::string::npos);
  EXPECT_NE(error_of([&] { data::crop(x, 2, 2, 3, 3); }).find("does not fit"), std::string::npos);
}
