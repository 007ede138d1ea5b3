// Picture grids: the PNG decodes back at the expected size, captions draw pixels, wrong
// predictions get a red frame and right ones green captions.
#include "lockstep/viz/grid.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "lockstep/data/dataset.h"
#include "lockstep/data/image.h"
#include "lockstep/data/image_folder.h"
#include "test_util.h"

using namespace lockstep;
namespace fs = std::filesystem;

namespace {

std::string tmp_path(const std::string& name) {
  return (test_util::temp_dir("grid") / name).string();
}

Tensor gray_images(int n, int h, int w) {
  Tensor t = Tensor::empty({n, h, w, 1}, DType::u8);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] = uint8_t(40 + (i % 50));
  return t;
}

const uint8_t* px(const Tensor& img, int x, int y) {
  return img.data<uint8_t>() + (int64_t(y) * img.dim(1) + x) * 3;
}

// Non-white pixels in a rectangle.
int ink(const Tensor& img, int x0, int y0, int x1, int y1) {
  int n = 0;
  for (int y = y0; y < y1; ++y)
    for (int x = x0; x < x1; ++x) {
      const uint8_t* p = px(img, x, y);
      if (p[0] != 255 || p[1] != 255 || p[2] != 255) ++n;
    }
  return n;
}

}  // namespace

TEST(Grid, SampleGridSizeScalingAndCaptions) {
  const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Ankle boot"};
  Tensor x = gray_images(4, 28, 28);
  Tensor y = Tensor::from_vector_i32({4}, {0, 1, 2, 1});
  auto path = tmp_path("samples.png");
  viz::save_sample_grid(x, y, names, path, {.rows = 2, .cols = 2});
  Tensor img = data::read_image(path);
  // 28 px scaled x5 = 140; cell 140 + 2*3 frame wide, + 2 caption lines of 9 px + 4 tall.
  const int cell_w = 146, cell_h = 146 + 22, pad = 6;
  EXPECT_EQ(img.shape(), (Shape{pad + 2 * (cell_h + pad), pad + 2 * (cell_w + pad), 3}));
  // Image pixels are the scaled-up source (nearest): source (0,0) covers 5x5 output pixels.
  EXPECT_EQ(px(img, pad + 3, pad + 3)[0], 40);
  EXPECT_EQ(px(img, pad + 3 + 4, pad + 3 + 4)[0], 40);
  EXPECT_EQ(px(img, pad + 3 + 5, pad + 3)[0], 41);
  // Caption area under each image has ink; the frame area of a sample grid stays white.
  for (int c = 0; c < 2; ++c) {
    int x0 = pad + c * (cell_w + pad), y0 = pad + 146;
    EXPECT_GT(ink(img, x0, y0, x0 + cell_w, y0 + 22), 20) << c;
  }
  EXPECT_EQ(ink(img, pad, pad, pad + 3, pad + 3), 0);
}

TEST(Grid, PredictionGridMarksWrongOnesRed) {
  Tensor x = gray_images(3, 20, 20);
  Tensor t = Tensor::from_vector_i32({3}, {0, 1, 2});
  // Scores (logits): predicts 0, 2, 2 -> the second one is wrong.
  Tensor p = Tensor::from_vector({3, 3}, {5, 0, 0, 0, 1, 3, 0, 0, 4});
  Tensor img = viz::render_prediction_grid(x, t, p, {"a", "b", "c"}, {.rows = 1, .cols = 3});
  const int k = 7;  // ceil(128 / 20)
  const int cell_w = 20 * k + 6, pad = 6;
  // Wrong (second): red frame; right (first): no frame.
  const uint8_t* frame = px(img, pad + (cell_w + pad) + 1, pad + 1);
  EXPECT_EQ(frame[0], 210);
  EXPECT_EQ(frame[1], 0);
  const uint8_t* no_frame = px(img, pad + 1, pad + 1);
  EXPECT_EQ(no_frame[0], 255);
  // Caption colours: green ink under the first, red under the second.
  auto count_color = [&](int cell, int r, int g) {
    int n = 0, x0 = pad + cell * (cell_w + pad), y0 = pad + 20 * k + 6;
    for (int yy = y0; yy < y0 + 22; ++yy)
      for (int xx = x0; xx < x0 + cell_w; ++xx)
        if (px(img, xx, yy)[0] == r && px(img, xx, yy)[1] == g) ++n;
    return n;
  };
  EXPECT_GT(count_color(0, 0, 130), 10);
  EXPECT_EQ(count_color(0, 210, 0), 0);
  EXPECT_GT(count_color(1, 210, 0), 10);
}

TEST(Grid, FloatImagesAndDatasetOverload) {
  // f32 0..255 images, batched dataset of {images, labels}: the first rows*cols elements.
  Tensor x = Tensor::full({10, 8, 8, 3}, 128.f);
  Tensor y = Tensor::from_vector_i32({10}, {0, 1, 0, 1, 0, 1, 0, 1, 0, 1});
  auto ds = data::Dataset::from_tensor_slices({data::Component(x), data::Component(y)}).batch(4);
  auto [ex, ey] = viz::take_examples(ds, 6);
  EXPECT_EQ(ex.shape(), (Shape{6, 8, 8, 3}));
  EXPECT_EQ(ey.shape(), (Shape{6}));
  auto path = tmp_path("ds.png");
  viz::save_sample_grid(ds, {"even", "odd"}, path, {.rows = 2, .cols = 3});
  Tensor img = data::read_image(path);
  EXPECT_EQ(img.dim(1), 6 + 3 * (128 + 6 + 6));
  EXPECT_EQ(px(img, 6 + 3, 6 + 3)[0], 128);
  // Fewer images than cells: the grid shrinks to the rows needed.
  Tensor small = viz::render_sample_grid(x.slice(0, 2), y.slice(0, 2), {}, {.rows = 3, .cols = 3});
  EXPECT_EQ(small.dim(0), 6 + 1 * (128 + 6 + 22 + 6));
  EXPECT_THROW(viz::render_sample_grid(Tensor::zeros({2, 4, 4, 2}), y, {}), Error);
}

TEST(Grid, DrawTextUsesTheBitmapFont) {
  Tensor canvas = Tensor::empty({9, 12, 3}, DType::u8);
  std::fill_n(canvas.data<uint8_t>(), canvas.numel(), uint8_t(255));
  const uint8_t black[3] = {0, 0, 0};
  viz::draw_text(canvas, 0, 0, "T", black);
  // 'T': top row full (5 px), then the middle column.
  for (int x = 0; x < 5; ++x) EXPECT_EQ(px(canvas, x, 0)[0], 0) << x;
  EXPECT_EQ(px(canvas, 2, 6)[0], 0);
  EXPECT_EQ(px(canvas, 0, 6)[0], 255);
  EXPECT_EQ(viz::text_width("ab", 2), 22);
}

namespace {
struct ConstantModel {  // anything with predict(images) -> scores
  Tensor predict(const Tensor& x) {
    Tensor p = Tensor::zeros({x.dim(0), 2});
    for (int64_t i = 0; i < x.dim(0); ++i) p.data<float>()[i * 2 + 1] = 1.f;
    return p;
  }
};
}  // namespace

TEST(Grid, PredictionGridFromAModelAndAnImageFolder) {
  fs::path d = fs::path(tmp_path("folder"));
  fs::remove_all(d);
  for (const char* c : {"left", "right"}) {
    fs::create_directories(d / c);
    for (int i = 0; i < 3; ++i)
      data::write_image((d / c / (std::to_string(i) + ".png")).string(),
                        Tensor::full({10, 10, 3}, 50.f * i));
  }
  auto ds = data::image_dataset_from_directory(
      d.string(), {.seed = 1, .image_size = {16, 16}, .batch_size = 4, .verbose = false});
  ConstantModel model;
  auto path = tmp_path("model_pred.png");
  viz::save_prediction_grid(model, ds, path, {.rows = 2, .cols = 3});
  Tensor img = data::read_image(path);
  EXPECT_EQ(img.dim(1), 6 + 3 * (128 + 6 + 6));
  EXPECT_EQ(img.dim(0), 6 + 2 * (128 + 6 + 22 + 6));
}
