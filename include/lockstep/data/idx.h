// IDX files (MNIST / Fashion-MNIST format), plain or gzipped, and the Fashion-MNIST loader.
#pragma once
#include <string>
#include <vector>

#include "lockstep/core/tensor.h"

namespace lockstep::data {

/// Reads an IDX file (".gz" is decompressed). Returns a uint8 tensor with the file's dims.
/// Errors name the file and what is wrong (missing, truncated, bad magic, unsupported type).
Tensor read_idx(const std::string& path);

/// Fashion-MNIST as arrays (keras.datasets.fashion_mnist.load_data(), scaled to [0, 1]).
struct FashionMnist {
  ///@{
  /// x: f32 [N, 28, 28, 1] in [0, 1]; y: i32 [N] in 0..9. 60,000 training, 10,000 test.
  Tensor x_train, y_train, x_test, y_test;
  ///@}
  /// The ten class names, "T-shirt/top" ... "Ankle boot", in label order.
  static const std::vector<std::string>& class_names();
};

/// Directory resolution order: the argument, $LOCKSTEP_FASHION_MNIST_DIR, then
/// /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist package).
std::string fashion_mnist_dir(const std::string& override_dir = "");
/// Reads the four gzipped IDX files from fashion_mnist_dir(dir); errors name the missing file.
FashionMnist load_fashion_mnist(const std::string& dir = "");

}  // namespace lockstep::data
