// Picture grids (PNG) with text captions: a grid of training samples with their labels, and a
// grid of test images with the predicted and true classes.
//
//   viz::save_sample_grid(train, "samples.png", {.rows = 3, .cols = 3});
//   viz::save_prediction_grid(x_test, y_test, model.predict(x_test), class_names,
//                             "predictions.png", {.rows = 4, .cols = 4});
//
// Images are [N, H, W, C] (C = 1, 3 or 4; alpha is dropped) or [N, H, W] (grayscale), uint8
// or float32 in 0..255 (float images whose values all lie in 0..1 are taken as 0..1 and
// scaled). Small images are scaled up by an integer factor (nearest) so each cell is at least
// `min_cell` pixels on its longer side: 28x28 Fashion-MNIST becomes 140x140.
// Labels are class indices [N] (any integer dtype or float), one-hot/probability rows [N, C]
// (argmax), or binary [N, 1] (> 0.5). Captions print class_names[label] (or the index when
// class_names is empty) in a built-in 5x7 pixel font, wrapped to two lines.
#pragma once
#include <concepts>
#include <functional>
#include <string>
#include <vector>

#include "lockstep/core/tensor.h"
#include "lockstep/data/dataset.h"
#include "lockstep/data/image_folder.h"

namespace lockstep::viz {

/// The grid of a sample or prediction picture.
struct GridOptions {
  int rows = 3;        ///< images per column
  int cols = 3;        ///< images per row
  int min_cell = 128;  ///< scale images up (integer factor, nearest) to at least this many px
  int text_scale = 0;  ///< font pixel size; 0: 1 for cells < 200 px wide, else 2
  int padding = 6;     ///< between cells and around the grid
};

/// Renders to a uint8 [H, W, 3] image (what the save_ functions encode as PNG).
Tensor render_sample_grid(const Tensor& images, const Tensor& labels,
                          const std::vector<std::string>& class_names, GridOptions options = {});
/// Captions "pred (true)"; right predictions green, wrong ones red with a red frame. With
/// `predictions` as scores [N, C] (probabilities, or logits: softmax is applied when a row is
/// not a distribution) the caption also shows the predicted class's probability.
Tensor render_prediction_grid(const Tensor& images, const Tensor& true_labels,
                              const Tensor& predictions,
                              const std::vector<std::string>& class_names,
                              GridOptions options = {});

/// render_sample_grid, written as a PNG: images [N, H, W, C] (uint8, or float32 in 0..255) with
/// their labels (int32 [N] or one-hot) as captions.
void save_sample_grid(const Tensor& images, const Tensor& labels,
                      const std::vector<std::string>& class_names, const std::string& path,
                      GridOptions options = {});
/// render_prediction_grid, written as a PNG.
void save_prediction_grid(const Tensor& images, const Tensor& true_labels,
                          const Tensor& predictions, const std::vector<std::string>& class_names,
                          const std::string& path, GridOptions options = {});

/// Dataset overloads: take the first rows*cols elements of a dataset whose elements are
/// {images, labels} (batched or not), epoch 0.
///@{
void save_sample_grid(const data::Dataset& dataset, const std::vector<std::string>& class_names,
                      const std::string& path, GridOptions options = {});
/// With the class names the dataset carries (image_dataset_from_directory's).
void save_sample_grid(const data::ImageDataset& dataset, const std::string& path,
                      GridOptions options = {});
///@}
/// predict(images [B, H, W, C]) -> scores [B, C] or class indices [B], e.g.
/// [&](const Tensor& x) { return model.predict(x); }.
using PredictFn = std::function<Tensor(const Tensor&)>;
/// The first rows*cols elements of `dataset`, captioned with predict's classes.
void save_prediction_grid(const PredictFn& predict, const data::Dataset& dataset,
                          const std::vector<std::string>& class_names, const std::string& path,
                          GridOptions options = {});

/// With the class names an image_dataset_from_directory result carries.
void save_prediction_grid(const PredictFn& predict, const data::ImageDataset& dataset,
                          const std::string& path, GridOptions options = {});
/// The short form, save_prediction_grid(model, val, "predictions.png"), for anything
/// with predict(images) -> scores (a Model; a template so viz does not link against nn).
template <class M>
requires requires(M& m, const Tensor& x) {
  { m.predict(x) } -> std::convertible_to<Tensor>;
}
void save_prediction_grid(M& model, const data::ImageDataset& dataset, const std::string& path,
                          GridOptions options = {}) {
  save_prediction_grid([&model](const Tensor& x) -> Tensor { return model.predict(x); }, dataset,
                       path, options);
}

/// The first n elements of a {images, labels} dataset (batched or not) stacked as
/// {images [n, ...], labels [n, ...]}; fewer if the dataset is shorter.
std::pair<Tensor, Tensor> take_examples(const data::Dataset& dataset, int64_t n);

/// Draws text into a uint8 [H, W, 3] image at (x, y) (top-left) with the 5x7 font.
void draw_text(Tensor& canvas, int x, int y, const std::string& text, const uint8_t rgb[3],
               int scale = 1);
int text_width(const std::string& text, int scale = 1);  ///< pixels

}  // namespace lockstep::viz
