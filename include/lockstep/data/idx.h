// IDX files (MNIST / Fashion-MNIST format), plain or gzipped, and the Fashion-MNIST loader.
#pragma once
#include <string>
#include <vector>

#include "lockstep/core/tensor.h"

namespace lockstep::data {

// Reads an IDX file (".gz" is decompressed). Returns a uint8 tensor with the file's dims.
// Errors name the file and what is wrong (missing, truncated, bad magic, unsupported type).
Tensor read_idx(const std::string& path);

struct FashionMnist {
  Tensor x_train, y_train, x_test, y_test;  // x: f32 [N,28,28,1] in [0,1]; y: i32 [N]
  static const std::vector<std::string>& class_names();
};

// Directory resolution order: the argument, $LOCKSTEP_FASHION_MNIST_DIR, then
// /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist package).
std::string fashion_mnist_dir(const std::string& override_dir = "");
FashionMnist load_fashion_mnist(const std::string& dir = "");

}  // namespace lockstep::data
