// The `lockstep predict` command: classify image files with a saved model.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "model_files.h"

namespace lockstep::cli {

inline const char* kPredictUsage =
    "usage: lockstep predict MODEL.keras IMAGE_OR_DIR [--top-k K] [--batch-size N]\n"
    "\n"
    "Classifies an image (JPEG, PNG, BMP) or every image under a folder (recursively, sorted)\n"
    "with a .keras model: each image is decoded and resized (bilinear) to the model's input\n"
    "height, width and channels, as image_dataset_from_directory does for training, and one line\n"
    "per image lists the K most likely classes with their probabilities (a softmax is applied\n"
    "when the model outputs logits). Class names come from the file's metadata (`lockstep train`\n"
    "stores them); otherwise classes are numbered.\n"
    "\n"
    "options:\n"
    "  --top-k K        classes listed per image (default 3, at most the number of classes)\n"
    "  --batch-size N   images per predict call (default 32)\n";

inline std::vector<std::string> image_files(const std::string& path) {
  namespace fs = std::filesystem;
  LS_CHECK(fs::exists(path), "predict: '", path, "' does not exist");
  if (!fs::is_directory(path)) return {path};
  std::vector<std::string> files;
  for (auto& e : fs::recursive_directory_iterator(path)) {
    if (!e.is_regular_file()) continue;
    std::string ext = e.path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    if (ext == ".jpg" || ext == ".jpeg" || ext == ".png" || ext == ".bmp")
      files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  LS_CHECK(!files.empty(), "predict: no images (.jpg .jpeg .png .bmp) under '", path, "'");
  return files;
}

// Rows that are already probabilities (>= 0, summing to 1) stay; logits get a softmax.
inline std::vector<float> probabilities(const float* row, int64_t n) {
  std::vector<float> p(row, row + n);
  double sum = 0;
  bool nonnegative = true;
  for (float v : p) sum += v, nonnegative &= v >= 0;
  if (nonnegative && std::abs(sum - 1.0) < 1e-3) return p;
  const float top = *std::max_element(p.begin(), p.end());
  double z = 0;
  for (float& v : p) v = std::exp(v - top), z += v;
  for (float& v : p) v = float(v / z);
  return p;
}

inline std::vector<std::string> class_names_for(const std::string& model_path, int64_t classes) {
  json meta = load_model_metadata(model_path);
  std::vector<std::string> names;
  if (meta.contains("class_names") && meta["class_names"].is_array())
    names = meta["class_names"].get<std::vector<std::string>>();
  if (int64_t(names.size()) != classes) {
    if (!names.empty())
      std::fprintf(stderr,
                   "predict: warning: the file names %zu classes but the model outputs "
                   "%lld; numbering them instead\n",
                   names.size(), (long long)classes);
    names.clear();
    for (int64_t c = 0; c < classes; ++c) names.push_back(std::to_string(c));
  }
  return names;
}

inline void print_top_k(const std::string& file, const std::vector<float>& p,
                        const std::vector<std::string>& names, int64_t k) {
  std::vector<int64_t> order(p.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
  std::printf("%s:", tools::printable(file).c_str());  // control characters escaped
  for (int64_t i = 0; i < k; ++i)
    std::printf("%s %s %.4f", i ? "," : "", tools::printable(names[size_t(order[i])]).c_str(),
                p[size_t(order[i])]);
  std::printf("\n");
}

// A NaN or inf output has no ranking: refuse instead of printing one (NaN weights, or a model
// whose arithmetic overflows).
inline void check_finite(const Tensor& y, const std::vector<std::string>& files, size_t start,
                         const std::string& model_path) {
  const int64_t classes = y.shape()[1];
  for (int64_t i = 0; i < y.shape()[0]; ++i)
    for (int64_t c = 0; c < classes; ++c)
      LS_CHECK(std::isfinite(y.data<float>()[i * classes + c]), "predict: model '",
               tools::printable(model_path), "' outputs ", y.data<float>()[i * classes + c],
               " (not a finite number) for '", tools::printable(files[start + size_t(i)]),
               "', so it has no ranking; its weights may hold NaN or inf (train it again, or ",
               "load an earlier checkpoint)");
}

inline int run_predict(const std::vector<std::string>& argv) {
  CommandSpec spec{"predict", kPredictUsage, {"--top-k", "--batch-size"}, {}, 2, 2};
  Args a = parse_args(spec, argv);
  if (a.help) return std::fputs(kPredictUsage, stdout), 0;
  const std::string model_path = a.positional[0];
  LS_CHECK(ends_with(model_path, ".keras"), "predict: '", model_path, "' is not a .keras file");
  const int64_t batch = a.integer("--batch-size", 32, 1, 1 << 16);
  const int64_t top_k = a.integer("--top-k", 3, 1, 1 << 20);
  Model m = load_model(model_path, /*compile=*/false);
  const Shape in = m.inputs()[0].shape();
  LS_CHECK(in.rank() == 4 && in[3] >= 1 && in[3] <= 4 && in[1] > 0 && in[2] > 0, "predict: '",
           model_path, "' takes input ", in.str(), "; predict needs images [batch, height, ",
           "width, 1|3|4 channels]");
  const auto mode = in[3] == 1   ? data::ColorMode::grayscale
                    : in[3] == 3 ? data::ColorMode::rgb
                                 : data::ColorMode::rgba;
  const auto files = image_files(a.positional[1]);
  std::vector<std::string> names;
  int64_t k = 0;
  for (size_t start = 0; start < files.size(); start += size_t(batch)) {
    const size_t n = std::min(files.size() - start, size_t(batch));
    Tensor x = Tensor::zeros(Shape{int64_t(n), in[1], in[2], in[3]});
    const int64_t per_image = in[1] * in[2] * in[3];
    for (size_t i = 0; i < n; ++i) {
      Tensor img = data::load_image(files[start + i], mode, int(in[1]), int(in[2]));
      std::copy(img.data<float>(), img.data<float>() + per_image,
                x.data<float>() + int64_t(i) * per_image);
    }
    Tensor y = m.predict(x, int(batch));
    LS_CHECK(y.shape().rank() == 2, "predict: the model's output ", y.shape().str(),
             " is not [batch, classes]");
    const int64_t classes = y.shape()[1];
    if (names.empty()) {
      names = class_names_for(model_path, classes);
      k = std::min(top_k, classes);
    }
    check_finite(y, files, start, model_path);
    for (size_t i = 0; i < n; ++i)
      print_top_k(files[start + i], probabilities(y.data<float>() + int64_t(i) * classes, classes),
                  names, k);
  }
  return 0;
}

}  // namespace lockstep::cli
