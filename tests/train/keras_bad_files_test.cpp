// Bad .keras / .weights.h5 files (issue 9's list): a truncated zip, a config.json naming a layer
// class Lockstep does not know (or an option it refuses), weights of the wrong shape, an HDF5
// file that is not in Keras's layout. Each error names the file and the part of it that is
// wrong (the zip, config.json and the layer, model.weights.h5 and the dataset path).
// (tests/train/keras_saving_test.cpp covers the plain .weights.h5 cases too.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "lockstep/io/keras_file.h"
#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::layers;
namespace fs = std::filesystem;

namespace {

std::string tmp(const std::string& file) {
  return (test_util::temp_dir("keras_bad_files", false) / file).string();
}

Model small_model() {
  KTensor in = Input({4}, "x");
  KTensor h = Dense(3, {.activation = "relu", .name = "hidden"})(in);
  return Model(in, Dense(2, {.name = "out"})(h), "small");
}

// The archive of small_model(), saved and read back, to corrupt one part of.
io::KerasArchive saved_archive(const std::string& path) {
  small_model().save(path);
  return io::read_keras_archive(path);
}

void expect_has(const std::string& e, const std::vector<std::string>& parts) {
  for (const auto& p : parts) EXPECT_NE(e.find(p), std::string::npos) << "'" << p << "' in: " << e;
}

}  // namespace

TEST(KerasBadFiles, TruncatedZipNamesTheFileAndTheZip) {
  const std::string path = tmp("truncated.keras");
  small_model().save(path);
  fs::resize_file(path, fs::file_size(path) / 2);
  expect_has(test_util::error_of([&] { load_model(path); }), {path, "zip"});
  // Not a zip at all.
  const std::string text = tmp("text.keras");
  std::ofstream(text) << "not a zip";
  expect_has(test_util::error_of([&] { load_model(text); }),
             {text, "not a .keras file", "not a readable zip"});
}

TEST(KerasBadFiles, UnknownLayerInConfigJsonNamesTheFileTheLayerAndTheClass) {
  const std::string path = tmp("unknown_layer.keras");
  io::KerasArchive a = saved_archive(path);
  for (auto& l : a.config["config"]["layers"])
    if (l["config"]["name"] == "hidden") l["class_name"] = "Conv3D";
  io::write_keras_archive(path, a);
  expect_has(test_util::error_of([&] { load_model(path); }),
             {path, "config.json", "layer 'hidden'", "unknown layer class 'Conv3D'"});
}

TEST(KerasBadFiles, UnsupportedOptionInConfigJsonNamesTheFileTheLayerAndTheKey) {
  const std::string path = tmp("bad_option.keras");
  io::KerasArchive a = saved_archive(path);
  for (auto& l : a.config["config"]["layers"])
    if (l["config"]["name"] == "hidden")
      l["config"]["kernel_constraint"] = {{"class_name", "NonNeg"}, {"config", json::object()}};
  io::write_keras_archive(path, a);
  expect_has(test_util::error_of([&] { load_model(path); }),
             {path, "config.json", "Dense 'hidden'", "config key 'kernel_constraint'"});
}

TEST(KerasBadFiles, WeightsOfTheWrongShapeNameTheFileAndTheDataset) {
  const std::string path = tmp("wrong_shape.keras");
  io::KerasArchive a = saved_archive(path);
  bool replaced = false;
  for (auto& t : a.weights)
    if (t.name == "layers/dense/vars/0") {  // "hidden": (4, 3) -> (4, 5)
      t.value = Tensor::zeros(Shape{4, 5});
      replaced = true;
    }
  ASSERT_TRUE(replaced);
  io::write_keras_archive(path, a);
  expect_has(test_util::error_of([&] { load_model(path); }),
             {path, "model.weights.h5", "layers/dense/vars/0", "Dense 'hidden'", "(4, 3)"});
}

TEST(KerasBadFiles, HdfFileNotInKerasLayoutNamesTheFileAndTheMissingGroup) {
  // Valid HDF5, but Keras 2's legacy h5 layout rather than Keras 3's layers/<name>/vars/<i>.
  const std::string h5 = tmp("legacy.weights.h5");
  io::write_h5_tensors(h5, {{"model_weights/hidden/hidden/kernel:0", Tensor::zeros(Shape{4, 3})},
                            {"model_weights/hidden/hidden/bias:0", Tensor::zeros(Shape{3})}});
  Model m = small_model();
  expect_has(test_util::error_of([&] { m.load_weights(h5); }),
             {h5, "Dense 'hidden'", "layers/dense/vars", "holds 0"});
  // The same inside a .keras file: the part is model.weights.h5.
  const std::string path = tmp("legacy_layout.keras");
  io::KerasArchive a = saved_archive(path);
  a.weights = io::read_h5_tensors(h5);
  io::write_keras_archive(path, a);
  expect_has(test_util::error_of([&] { load_model(path); }),
             {path, "model.weights.h5", "layers/dense/vars"});
  // model.weights.h5 that is not HDF5 at all.
  const std::string txt = tmp("text.weights.h5");
  std::ofstream(txt) << "hello";
  expect_has(test_util::error_of([&] { m.load_weights(txt); }), {txt, "not an HDF5 file"});
}
