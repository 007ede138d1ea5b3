// image_dataset_from_directory: labelling, class_names, label modes, splits, shuffle
// determinism, and bad input (clear errors naming the file, or skipped and counted); plus
// export_image_folder, which writes the folders these tests read.
#include "lockstep/data/image_folder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "lockstep/data/image.h"
#include "lockstep/tools/export.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::data;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  fs::path d = test_util::temp_dir("imgfolder") / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// 3 classes x 4 images of 8x6 pixels; image i is a flat grey of value 10 + 20 * i, so its
// value identifies it after decoding (JPEG keeps flat colours within a unit or two).
constexpr int kPerClass = 4, kClasses = 3;
float value_of(int i) { return 10.f + 20.f * float(i); }

fs::path make_folder(const std::string& name, const std::string& format = "mixed") {
  fs::path d = fresh_dir(name);
  const int n = kPerClass * kClasses;
  Tensor x = Tensor::empty({n, 8, 6}, DType::u8);
  std::vector<int32_t> y(n);
  for (int i = 0; i < n; ++i) {
    std::fill_n(x.data<uint8_t>() + i * 48, 48, uint8_t(value_of(i)));
    y[i] = i % kClasses;
  }
  tools::ExportImageFolderOptions o;
  o.format = format;
  tools::export_image_folder(x, Tensor::from_vector_i32({n}, y), {"cat", "dog", "bird/owl"},
                             d.string(), o);
  return d;
}

int image_id(const Tensor& img) {  // inverse of value_of, from the first pixel
  return int(std::lround((img.to_vector()[0] - 10.f) / 20.f));
}

ImageFolderOptions quiet(ImageFolderOptions o = {}) {
  o.verbose = false;
  o.image_size = {4, 3};
  return o;
}

std::vector<Element> all(const Dataset& ds) { return ds.collect(0); }

using lockstep::test_util::error_of;

}  // namespace

TEST(ImageExport, WritesClassFoldersOfMixedJpegAndPng) {
  fs::path d = make_folder("export");
  std::set<std::string> dirs;
  for (auto& e : fs::directory_iterator(d)) dirs.insert(e.path().filename().string());
  EXPECT_EQ(dirs, (std::set<std::string>{"bird_owl", "cat", "dog"}));
  int jpg = 0, png = 0;
  for (auto& e : fs::recursive_directory_iterator(d)) {
    if (e.path().extension() == ".jpg") ++jpg;
    if (e.path().extension() == ".png") ++png;
  }
  EXPECT_EQ(jpg, 6);
  EXPECT_EQ(png, 6);
  Tensor img = read_image((d / "dog" / "00004.png").string());
  EXPECT_EQ(img.shape(), (Shape{8, 6, 1}));
  EXPECT_EQ(img.data<uint8_t>()[0], uint8_t(value_of(4)));
  EXPECT_EQ(tools::safe_class_dir_name("T-shirt/top"), "T-shirt_top");
  EXPECT_EQ(tools::safe_class_dir_name("Ankle boot"), "Ankle_boot");
  EXPECT_EQ(tools::safe_class_dir_name(".."), "class..");
  // limit_per_class and size
  fs::path d2 = fresh_dir("export_limited");
  Tensor x = Tensor::zeros({6, 4, 4, 3}, DType::u8);
  tools::ExportImageFolderOptions o;
  o.limit_per_class = 1;
  o.size = 10;
  o.format = "png";
  auto res = tools::export_image_folder(x, Tensor::from_vector_i32({6}, {0, 1, 0, 1, 0, 1}),
                                        {"a", "b"}, d2.string(), o);
  EXPECT_EQ(res.files, 2);
  EXPECT_EQ(read_image((d2 / "b" / "00001.png").string()).shape(), (Shape{10, 10, 3}));
  EXPECT_NE(error_of([&] {
              tools::export_image_folder(x, Tensor::from_vector_i32({6}, {0, 1, 0, 1, 0, 7}),
                                         {"a", "b"}, d2.string(), o);
            }).find("label 7"),
            std::string::npos);
}

TEST(ImageFolder, InfersSortedClassesAndLabelsFromFolders) {
  fs::path d = make_folder("labels");
  ImageFolderOptions o = quiet();
  o.shuffle = false;
  testing::internal::CaptureStdout();
  o.verbose = true;
  ImageDataset ds = image_dataset_from_directory(d.string(), o);
  std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(out, "Found 12 files belonging to 3 classes.\n");
  EXPECT_EQ(ds.class_names(), (std::vector<std::string>{"bird_owl", "cat", "dog"}));
  ASSERT_EQ(ds.file_paths().size(), 12u);
  auto batches = all(ds);
  ASSERT_EQ(batches.size(), 1u);  // 12 files, batch_size 32
  const Tensor& x = batches[0].tensor(0);
  const Tensor& y = batches[0].tensor(1);
  EXPECT_EQ(x.shape(), (Shape{12, 4, 3, 3}));
  EXPECT_EQ(x.dtype(), DType::f32);
  EXPECT_EQ(y.dtype(), DType::i32);
  // Unshuffled: classes in sorted order, files sorted; image i went to class i % 3 whose
  // sorted position is {cat:1, dog:2, bird_owl:0}.
  const int sorted_pos[3] = {1, 2, 0};
  for (int k = 0; k < 12; ++k) {
    Tensor img = x.slice(k, k + 1).reshape({4, 3, 3});
    int id = image_id(img);
    EXPECT_EQ(y.data<int32_t>()[k], sorted_pos[id % 3]) << k;
    EXPECT_EQ(y.data<int32_t>()[k], k / 4);
    EXPECT_NEAR(img.to_vector()[0], value_of(id), 2.0);
  }
}

TEST(ImageFolder, ExplicitClassNamesFilterAndOrder) {
  fs::path d = make_folder("class_names");
  ImageFolderOptions o = quiet();
  o.shuffle = false;
  o.class_names = {"dog", "cat"};
  o.batch_size = 0;
  ImageDataset ds = image_dataset_from_directory(d.string(), o);
  EXPECT_EQ(ds.class_names(), (std::vector<std::string>{"dog", "cat"}));
  auto el = all(ds);
  ASSERT_EQ(el.size(), 8u);
  for (int k = 0; k < 8; ++k) {
    int id = image_id(el[k].tensor(0));
    EXPECT_EQ(el[k].tensor(1).item(), id % 3 == 1 ? 0.f : 1.f);  // dog = 0, cat = 1
    EXPECT_EQ(el[k].tensor(1).item(), k < 4 ? 0.f : 1.f);
  }
  o.class_names = {"dog", "horse"};
  std::string e = error_of([&] { image_dataset_from_directory(d.string(), o); });
  EXPECT_NE(e.find("\"horse\" is not a subfolder"), std::string::npos) << e;
}

TEST(ImageFolder, LabelModesAndColorModes) {
  fs::path d = make_folder("modes");
  ImageFolderOptions o = quiet();
  o.shuffle = false;
  o.label_mode = "categorical";
  o.color_mode = "grayscale";
  auto b = all(image_dataset_from_directory(d.string(), o))[0];
  EXPECT_EQ(b.tensor(0).shape(), (Shape{12, 4, 3, 1}));
  EXPECT_EQ(b.tensor(1).shape(), (Shape{12, 3}));
  EXPECT_EQ(b.tensor(1).to_vector()[0 * 3 + 0], 1.f);
  EXPECT_EQ(b.tensor(1).to_vector()[11 * 3 + 2], 1.f);
  EXPECT_EQ(b.tensor(1).to_vector()[11 * 3 + 0], 0.f);

  o.label_mode = "none";
  o.color_mode = "rgba";
  auto n = all(image_dataset_from_directory(d.string(), o))[0];
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(n.tensor(0).shape(), (Shape{12, 4, 3, 4}));
  EXPECT_EQ(n.tensor(0).to_vector()[3], 255.f);  // alpha added

  o.label_mode = "binary";
  o.color_mode = "rgb";
  std::string e = error_of([&] { image_dataset_from_directory(d.string(), o); });
  EXPECT_NE(e.find("exactly 2 classes"), std::string::npos) << e;
  o.class_names = {"cat", "dog"};
  auto bin = all(image_dataset_from_directory(d.string(), o))[0];
  EXPECT_EQ(bin.tensor(1).shape(), (Shape{8, 1}));
  EXPECT_EQ(bin.tensor(1).dtype(), DType::f32);
  EXPECT_EQ(bin.tensor(1).to_vector()[7], 1.f);

  // labels "none": a flat walk of the whole tree, no label component.
  ImageFolderOptions flat = quiet();
  flat.labels = "none";
  flat.shuffle = false;
  auto f = all(image_dataset_from_directory(d.string(), flat))[0];
  EXPECT_EQ(f.size(), 1u);
  EXPECT_EQ(f.tensor(0).dim(0), 12);
}

TEST(ImageFolder, ValidationSplitIsDisjointAndCovering) {
  fs::path d = make_folder("split");
  ImageFolderOptions o = quiet();
  o.validation_split = 0.25;
  o.seed = 123;
  o.subset = "training";
  testing::internal::CaptureStdout();
  o.verbose = true;
  ImageDataset train = image_dataset_from_directory(d.string(), o);
  std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("Using 9 files for training."), std::string::npos) << out;
  o.verbose = false;
  o.subset = "validation";
  ImageDataset val = image_dataset_from_directory(d.string(), o);
  EXPECT_EQ(train.file_paths().size(), 9u);
  EXPECT_EQ(val.file_paths().size(), 3u);
  std::set<std::string> a(train.file_paths().begin(), train.file_paths().end());
  std::set<std::string> b(val.file_paths().begin(), val.file_paths().end());
  for (const auto& f : b) EXPECT_FALSE(a.count(f)) << f;
  a.insert(b.begin(), b.end());
  EXPECT_EQ(a.size(), 12u);
  // The decoded validation images are exactly the validation files.
  std::multiset<int> ids_from_files, ids_from_data;
  for (const auto& f : val.file_paths())
    ids_from_files.insert(std::stoi(fs::path(f).stem().string()));
  for (const auto& e : all(val)) {
    const Tensor& x = e.tensor(0);
    for (int k = 0; k < x.dim(0); ++k)
      ids_from_data.insert(image_id(x.slice(k, k + 1).reshape({4, 3, 3})));
  }
  EXPECT_EQ(ids_from_files, ids_from_data);

  // subset "both" gives the same pair.
  o.subset = "both";
  auto [t2, v2] = image_dataset_from_directory(d.string(), o);
  EXPECT_EQ(t2.file_paths(), train.file_paths());
  EXPECT_EQ(v2.file_paths(), val.file_paths());
  EXPECT_EQ(v2.class_names(), train.class_names());

  // A split without a seed (and shuffle) or without subset is refused.
  ImageFolderOptions bad = quiet();
  bad.validation_split = 0.2;
  bad.subset = "training";
  EXPECT_NE(error_of([&] { image_dataset_from_directory(d.string(), bad); }).find("seed"),
            std::string::npos);
  bad.seed = 1;
  bad.subset = "";
  EXPECT_NE(error_of([&] { image_dataset_from_directory(d.string(), bad); }).find("subset"),
            std::string::npos);
}

TEST(ImageFolder, ShuffleIsDeterministicUnderASeed) {
  fs::path d = make_folder("shuffle");
  auto order = [&](uint64_t seed, int64_t epoch) {
    ImageFolderOptions o = quiet();
    o.seed = seed;
    o.batch_size = 5;
    std::vector<int> ids;
    for (const auto& b : image_dataset_from_directory(d.string(), o).collect(epoch))
      for (int k = 0; k < b.tensor(0).dim(0); ++k)
        ids.push_back(image_id(b.tensor(0).slice(k, k + 1).reshape({4, 3, 3})));
    return ids;
  };
  auto a = order(7, 0);
  EXPECT_EQ(a.size(), 12u);
  EXPECT_EQ(a, order(7, 0));
  EXPECT_NE(a, order(8, 0));
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 12; ++i) EXPECT_EQ(sorted[i], i);  // a permutation
}

TEST(ImageFolder, DirectoryErrorsAreClear) {
  std::string e = error_of([] { image_dataset_from_directory("/nonexistent/lockstep_photos"); });
  EXPECT_NE(e.find("'/nonexistent/lockstep_photos' does not exist"), std::string::npos) << e;

  fs::path d = make_folder("empty_class");
  fs::create_directories(d / "empty");
  e = error_of([&] { image_dataset_from_directory(d.string(), quiet()); });
  EXPECT_NE(e.find((d / "empty").string()), std::string::npos) << e;
  EXPECT_NE(e.find("contains no images"), std::string::npos) << e;

  fs::path none = fresh_dir("no_images");
  fs::create_directories(none / "a");
  std::ofstream(none / "a" / "readme.txt") << "x";
  e = error_of([&] { image_dataset_from_directory(none.string(), quiet()); });
  EXPECT_NE(e.find("contains no images"), std::string::npos) << e;
}

TEST(ImageFolder, BadFilesRaiseNamingTheFileOrAreSkippedAndCounted) {
  fs::path d = make_folder("bad_files");
  const fs::path text = d / "cat" / "zz_notes.jpg";
  std::ofstream(text) << "not really a jpeg\n";
  auto jpg = encode_jpeg(Tensor::full({16, 16, 3}, 100.f), 90);
  const fs::path trunc = d / "dog" / "zz_cut.jpg";
  write_file_bytes(trunc.string(), std::vector<uint8_t>(jpg.begin(), jpg.begin() + jpg.size() / 2));
  const fs::path cpng = d / "dog" / "zz_corrupt.png";
  auto png = encode_png(Tensor::full({16, 16, 3}, 100.f));
  png[png.size() / 2] ^= 0x55;
  write_file_bytes(cpng.string(), png);

  ImageFolderOptions o = quiet();
  o.shuffle = false;
  o.batch_size = 0;
  ImageDataset ds = image_dataset_from_directory(d.string(), o);
  Iterator it = ds.iterator(0);
  std::string e;
  int ok = 0;
  for (;;) {
    try {
      auto el = it.next();
      if (!el) break;
      ++ok;
    } catch (const Error& err) {
      e += err.what();
      e += "\n";
    }
  }
  EXPECT_NE(e.find(text.string()), std::string::npos) << e;
  EXPECT_NE(e.find("not a JPEG, PNG or BMP"), std::string::npos) << e;
  EXPECT_NE(e.find(trunc.string()), std::string::npos) << e;
  EXPECT_NE(e.find(cpng.string()), std::string::npos) << e;
  EXPECT_EQ(ok, 12);

  o.on_error = "skip";
  o.batch_size = 4;
  ImageDataset skipping = image_dataset_from_directory(d.string(), o);
  int64_t n = 0;
  testing::internal::CaptureStderr();
  {
    Iterator it3 = skipping.iterator(0);
    while (auto b = it3.next()) n += b->tensor(0).dim(0);
    EXPECT_EQ(it3.errors_skipped(), 3) << e;
  }
  std::string warn = testing::internal::GetCapturedStderr();
  EXPECT_EQ(n, 12);
  EXPECT_FALSE(warn.empty());
}

TEST(ImageFolder, WrongChannelCountIsAnErrorWhenConversionIsOff) {
  fs::path d = make_folder("channels", "png");  // grayscale PNGs
  ImageFolderOptions o = quiet();
  o.shuffle = false;
  o.convert_channels = false;
  std::string e = error_of([&] { all(image_dataset_from_directory(d.string(), o)); });
  EXPECT_NE(e.find("has 1 channel(s) but color_mode \"rgb\" needs 3"), std::string::npos) << e;
  EXPECT_NE(e.find(".png'"), std::string::npos) << e;
  o.color_mode = "grayscale";
  EXPECT_EQ(all(image_dataset_from_directory(d.string(), o))[0].tensor(0).dim(3), 1);
}

TEST(ImageFolder, CropToAspectRatioAndInterpolation) {
  fs::path d = fresh_dir("aspect");
  fs::create_directories(d / "a");
  // 4x8 image: left half 0, right half 200; centre-cropped to 4x4 then resized to 2x2 the
  // window is columns 2..5: left output column 0, right 200.
  Tensor img = Tensor::zeros({4, 8, 3}, DType::u8);
  for (int y = 0; y < 4; ++y)
    for (int x = 4; x < 8; ++x)
      for (int c = 0; c < 3; ++c) img.data<uint8_t>()[(y * 8 + x) * 3 + c] = 200;
  write_image((d / "a" / "wide.png").string(), img);
  ImageFolderOptions o = quiet();
  o.image_size = {2, 2};
  o.crop_to_aspect_ratio = true;
  o.interpolation = "area";
  Tensor x = all(image_dataset_from_directory(d.string(), o))[0].tensor(0);
  std::vector<float> v = x.to_vector();
  EXPECT_EQ(v[0], 0.f);
  EXPECT_EQ(v[3], 200.f);
  o.crop_to_aspect_ratio = false;
  v = all(image_dataset_from_directory(d.string(), o))[0].tensor(0).to_vector();
  EXPECT_EQ(v[0], 0.f);
  EXPECT_EQ(v[3], 200.f);
  o.interpolation = "cubic";
  EXPECT_NE(error_of([&] { image_dataset_from_directory(d.string(), o); }).find("interpolation"),
            std::string::npos);
}
