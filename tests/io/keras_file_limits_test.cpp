// Weight and model files whose declared sizes are lies (issue 25, items 1, 4 and 6): a 5 KB
// .weights.h5 with a dataset of shape (2^31-1, 2^31+1), a 1 KB .keras declaring a (24576, 32768)
// dataset, a .keras whose config.json is 65 MiB of whitespace, and JSON nested 100k levels. Each
// is refused with an error naming the file, before the memory is allocated (the reader compares
// the dataset's bytes with the file's real size, and the zip member's declared size with a
// stated limit). Loading a .keras writes no temporary file beside it (inotify shows the folder
// untouched).
#include <gtest/gtest.h>
#include <sys/inotify.h>
#include <sys/stat.h>

#include <filesystem>

#include "core/internal/json_values.h"
#include "io/hostile_files_util.h"
#include "lockstep/io/keras_file.h"
#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::layers;
using test_util::error_of;
namespace fs = std::filesystem;

using lockstep::test_util::expect_has;

namespace {

std::string tmp(const std::string& file) {
  return (test_util::temp_dir("keras_limits") / file).string();
}

// An HDF5 weights file holding one f32 dataset "x" of shape (rows, cols) as written, then with
// its dims patched to (big_rows, big_cols) (the data stays rows * cols floats).
std::string lying_h5(int64_t rows, int64_t cols, uint64_t big_rows, uint64_t big_cols) {
  const std::string path = tmp("lying_source.weights.h5");
  io::write_h5_tensors(path, {{"x", Tensor::full(Shape{rows, cols}, 1.f)}});
  std::string bytes = test_util::read_text_file(path);
  EXPECT_GT(test_util::patch_u64_pair(bytes, uint64_t(rows), uint64_t(cols), big_rows, big_cols), 0)
      << "the dataspace's dims were not found in the HDF5 file";
  return bytes;
}

Model small_model() {
  KTensor in = Input({4}, "x");
  return Model(in, Dense(2, {.name = "out"})(in), "small");
}

}  // namespace

TEST(KerasFileLimits, WeightsDatasetLargerThanTheFileIsRefusedBeforeAllocating) {
  const std::string path = tmp("huge_dataset.weights.h5");
  test_util::write_binary(path, lying_h5(7, 11, (1ull << 31) - 1, (1ull << 31) + 1));
  ASSERT_LT(fs::file_size(path), 10000u);
  const std::string e =
      test_util::in_child([&] { return error_of([&] { io::read_h5_tensors(path); }); });
  expect_has(e, {path, "dataset 'x'", "(2147483647, 2147483649)", "the whole file is"});
}

TEST(KerasFileLimits, KerasDatasetLargerThanItsMemberIsRefusedBeforeAllocating) {
  const std::string h5 = lying_h5(13, 17, 24576, 32768);
  const std::string path = tmp("huge_dataset.keras");
  test_util::write_binary(
      path, test_util::make_zip(
                {{"config.json", "{}"}, {"metadata.json", "{}"}, {"model.weights.h5", h5}}));
  const std::string e =
      test_util::in_child([&] { return error_of([&] { io::read_keras_archive(path); }); });
  expect_has(e, {path, "model.weights.h5", "(24576, 32768)", "3221225472 bytes"});
}

TEST(KerasFileLimits, OversizedConfigJsonIsRefusedByItsDeclaredSize) {
  const std::string path = tmp("whitespace.keras");
  std::string config(65u << 20, ' ');
  config += "{}";
  test_util::write_binary(path, test_util::make_zip({{"config.json", config, /*deflate=*/true},
                                                     {"metadata.json", "{}"},
                                                     {"model.weights.h5", ""}}));
  ASSERT_LT(fs::file_size(path), 1u << 20);
  expect_has(error_of([&] { io::read_keras_archive(path); }),
             {path, "config.json", "68157442 bytes", "limit of 67108864"});
}

TEST(KerasFileLimits, ZipMemberClaimingMoreThanDeflateCanExpandIsRefused) {
  // A stored member whose directory claims 100 MB from 10 stored bytes cannot be consistent.
  std::string zip = test_util::make_zip(
      {{"config.json", "{}"}, {"metadata.json", "{}"}, {"model.weights.h5", "0123456789"}});
  const std::string path = tmp("ratio.keras");
  // Patch the uncompressed size (10 -> 100,000,000) in both headers of the last member.
  const std::string name = "model.weights.h5";
  for (size_t at = zip.find(name); at != std::string::npos; at = zip.find(name, at + 1)) {
    const size_t local = zip.rfind(std::string("PK\x03\x04", 4), at);
    const size_t central = zip.rfind(std::string("PK\x01\x02", 4), at);
    const size_t header = (central != std::string::npos && central > local) ? central : local;
    const size_t size_at = header + (header == central ? 24 : 22);
    const uint32_t big = 100000000;
    std::memcpy(zip.data() + size_at, &big, 4);
  }
  test_util::write_binary(path, zip);
  expect_has(error_of([&] { io::read_keras_archive(path); }),
             {path, "model.weights.h5", "claims 100000000 bytes", "more than deflate"});
}

TEST(KerasFileLimits, DeeplyNestedJsonIsAnErrorNotAStackOverflow) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string e =
      test_util::in_child([&] { return error_of([&] { model_from_json(deep); }); });
  expect_has(e, {"model JSON", "nested more than 1000 levels"});
  // In a .keras file's config.json: the error names the file and the member.
  const std::string path = tmp("deep.keras");
  test_util::write_binary(
      path, test_util::make_zip(
                {{"config.json", deep, true}, {"metadata.json", "{}"}, {"model.weights.h5", ""}}));
  const std::string k = test_util::in_child([&] { return error_of([&] { load_model(path); }); });
  expect_has(k, {path, "config.json", "nested more than 1000 levels"});
  // Within the limit still parses: brackets inside strings do not count.
  EXPECT_EQ(parse_json(R"({"a": "[[[[[[", "b": [[[1]]]})", "t", 4)["b"][0][0][0], 1);
  expect_has(error_of([] { parse_json("[[[[[1]]]]]", "tiny", 4); }),
             {"tiny", "nested more than 4"});
}

// A 368 KB .keras whose 63 MB config.json is empty objects (under the 64 MiB member cap) took
// 2.1 GB to parse: nlohmann spends about 100 bytes on each 3-byte `{},`. The values are counted
// before parsing; past kMaxJsonValues the file is refused, naming it, with nothing built.
TEST(KerasFileLimits, JsonOfMillionsOfEmptyObjectsIsRefusedBeforeParsing) {
  std::string spam = "{\"class_name\": \"Sequential\", \"x\": [";
  spam.reserve(size_t(kMaxJsonValues) * 3 + 64);
  for (int64_t i = 0; i < kMaxJsonValues; ++i) spam += "{},";
  spam += "{}]}";
  const std::string path = tmp("empty_objects.keras");
  test_util::write_binary(
      path, test_util::make_zip(
                {{"config.json", spam, true}, {"metadata.json", "{}"}, {"model.weights.h5", ""}}));
  spam = std::string();
  expect_has(error_of([&] { load_model(path); }),
             {path, "config.json", "more than " + std::to_string(kMaxJsonValues) + " values",
              "damaged or crafted"});
  // What is counted: objects, arrays, strings (keys too) and literals, none inside strings.
  const std::string seven = R"({"a": [1, true, null, "x,[{1"]})";
  EXPECT_EQ(json_values(seven, 100), 7);
  EXPECT_EQ(parse_json_within(seven, "t", kMaxJsonDepth, 7)["a"][1], true);
  expect_has(error_of([&] { parse_json_within(seven, "tiny", kMaxJsonDepth, 6); }),
             {"tiny", "more than 6 values"});
  EXPECT_EQ(json_values(R"([-1.5e+3, 2 , {"k" : false}])", 100), 6);
}

TEST(KerasFileLimits, LoadingAKerasFileWritesNothingBesideIt) {
  const fs::path dir = test_util::temp_dir("keras_limits_ro", /*fresh=*/true);
  const std::string path = (dir / "m.keras").string();
  small_model().save(path);
  const int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_GE(::inotify_add_watch(fd, dir.c_str(), IN_CREATE | IN_MOVED_TO | IN_MODIFY), 0);
  Model m = load_model(path);
  EXPECT_EQ(m.count_params(), 10);
  alignas(inotify_event) char buf[4096];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  std::string created;
  for (ssize_t at = 0; at < n;) {
    const auto* ev = reinterpret_cast<const inotify_event*>(buf + at);
    if (ev->len) created += std::string(ev->name) + " ";
    at += ssize_t(sizeof(inotify_event) + ev->len);
  }
  ::close(fd);
  EXPECT_LE(n, 0) << "loading wrote beside the model: " << created;
  int files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 1);
}

TEST(KerasFileLimits, ModelFilesThatAreNotRegularFilesAreRefusedWithoutWaiting) {
  const fs::path dir = test_util::temp_dir("keras_limits_fifo", /*fresh=*/true);
  for (const std::string name : {"m.keras", "w.weights.h5", "c.lsckpt", "model.json"}) {
    const std::string fifo = (dir / name).string();
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    const std::string e = test_util::in_child(
        [&] {
          return error_of([&] {
            if (name == "m.keras") load_model(fifo);
            if (name == "w.weights.h5") io::read_h5_tensors(fifo);
            if (name == "c.lsckpt") io::read_checkpoint_file(fifo);
            if (name == "model.json") read_regular_file(fifo, 1 << 20, "model JSON");
          });
        },
        10);
    expect_has(e, {fifo});
    EXPECT_EQ(e.find("hung"), std::string::npos) << e;
  }
  expect_has(error_of([] { read_regular_file("/dev/zero", 1 << 20, "image file"); }),
             {"'/dev/zero'", "character device"});
}

// A damaged .weights.h5 (found by keras_weights_fuzz) whose groups link back into themselves:
// HDF5's H5Ovisit recursed through it for minutes. The reader's own walk enters each group once
// and bounds depth and link count, so it ends, with the file's datasets or an error naming it.
TEST(KerasFileLimits, WeightsFileWhoseGroupsLinkIntoThemselvesIsWalkedOnce) {
  const fs::path file = fs::path(LOCKSTEP_SOURCE_DIR) /
                        "tests/fuzz/regressions/keras_weights/group_cycle_walk_timeout.h5";
  ASSERT_TRUE(fs::exists(file)) << file;
  const std::string err = error_of([&] {
    const auto tensors = io::read_h5_tensors(file.string());
    for (auto& t : tensors) EXPECT_FALSE(t.name.empty());
  });
  if (!err.empty()) EXPECT_NE(err.find(file.string()), std::string::npos) << err;
}

// Weights files that crash libhdf5 1.10.8 itself (found by keras_weights_fuzz): a group's
// symbol-table message gives its local heap (and B-tree) at 0xffffffffffffffff, HDF5's
// "undefined address". libhdf5 reads the heap there; the range check of its metadata
// accumulator wraps around and it copies from NULL (SIGSEGV in H5F__accum_read). Lockstep
// parses HDF5 files in a separate process (io/h5_util.h: read_isolated), so each reader (Keras 3
// .weights.h5, Keras 2 legacy .h5, the .keras file's embedded weights) reports the file as
// damaged, naming it, and the test process goes on.
namespace {

// `bytes` (an HDF5 file Lockstep wrote: superblock v0, symbol-table groups) with the root
// group's symbol-table message pointing at the undefined address. The superblock's copy of the
// root's B-tree and heap addresses (its scratch-pad, at 80 and 88) finds the message.
std::string with_undefined_root_heap(std::string bytes) {
  EXPECT_EQ(bytes.compare(0, 8, "\x89HDF\r\n\x1a\n"), 0);
  EXPECT_EQ(bytes[8], 0) << "superblock version 0 expected";
  const std::string stab = bytes.substr(80, 16);  // B-tree address, local heap address
  const size_t at = bytes.find(stab, 96);
  EXPECT_NE(at, std::string::npos) << "the root group's symbol-table message was not found";
  if (at != std::string::npos) bytes.replace(at, 16, std::string(16, '\xff'));
  return bytes;
}

void expect_damaged(const std::string& e, const std::string& path) {
  expect_has(e, {path, "is damaged", "the HDF5 library crashed reading it (SIGSEGV",
                 "save or download it again"});
}

}  // namespace

TEST(KerasFileLimits, WeightsFilesThatCrashLibhdf5AreReportedAsDamaged) {
  // The fuzzer's inputs, as committed.
  const fs::path dir = fs::path(LOCKSTEP_SOURCE_DIR) / "tests/fuzz/regressions/keras_weights";
  int found = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string file = entry.path().string();
    if (entry.path().filename().string().rfind("hdf5_crash_", 0) != 0) continue;
    ++found;
    expect_damaged(error_of([&] { io::read_h5_tensors(file); }), file);
    Model m = small_model();
    expect_damaged(error_of([&] { m.load_weights(file); }), file);
  }
  EXPECT_GE(found, 1) << "no hdf5_crash_* inputs in " << dir;

  // Keras 3's .weights.h5 layout, Lockstep-written and patched the same way.
  const std::string weights = tmp("crash.weights.h5");
  io::write_h5_tensors(weights, {{"layers/dense/vars/0", Tensor::full(Shape{4, 2}, 1.f)}});
  test_util::write_binary(weights, with_undefined_root_heap(test_util::read_text_file(weights)));
  expect_damaged(error_of([&] { io::read_h5_tensors(weights); }), weights);

  // Keras 2's legacy layout: read_legacy_h5 looks its layer groups up through the root's heap.
  const std::string legacy = tmp("crash_legacy.h5");
  io::write_legacy_h5(
      legacy,
      {{{"dense", {{"dense/kernel:0", Tensor::full(Shape{4, 2}, 1.f)}}}}, "2.15.0", "tensorflow"});
  const std::string good_legacy = test_util::read_text_file(legacy);
  ASSERT_EQ(io::read_legacy_h5(legacy).layers.size(), 1u);
  test_util::write_binary(legacy, with_undefined_root_heap(good_legacy));
  expect_damaged(error_of([&] { io::read_legacy_h5(legacy); }), legacy);

  // A .keras file whose model.weights.h5 is such a file: the error names the archive.
  const std::string keras = tmp("crash.keras");
  test_util::write_binary(
      keras, test_util::make_zip({{"config.json", "{}"},
                                  {"metadata.json", "{}"},
                                  {"model.weights.h5", test_util::read_text_file(weights)}}));
  const std::string e = error_of([&] { io::read_keras_archive(keras); });
  expect_has(e, {keras, "model.weights.h5", "is damaged", "the HDF5 library crashed reading it"});
}

// Reading in a child process gives the same tensors as before, and the readers' own errors
// come back in their words.
TEST(KerasFileLimits, WeightsReadInAChildProcessComeBackWhole) {
  const std::string path = tmp("whole.weights.h5");
  Tensor a = Tensor::full(Shape{3, 5}, 2.5f);
  Tensor b = Tensor::zeros(Shape{7}, DType::i32);
  for (int i = 0; i < 7; ++i) b.data<int32_t>()[i] = 9;
  io::write_h5_tensors(path, {{"g/a", a}, {"g/h/b", b}, {"scalar", Tensor::full(Shape{}, 1.f)}});
  const auto tensors = io::read_h5_tensors(path);
  ASSERT_EQ(tensors.size(), 3u);
  EXPECT_EQ(tensors[0].name, "g/a");
  EXPECT_EQ(tensors[0].value.shape(), (Shape{3, 5}));
  EXPECT_EQ(tensors[0].value.data<float>()[14], 2.5f);
  EXPECT_EQ(tensors[1].name, "g/h/b");
  EXPECT_EQ(tensors[1].value.dtype(), DType::i32);
  EXPECT_EQ(tensors[1].value.data<int32_t>()[6], 9);
  EXPECT_EQ(tensors[2].name, "scalar");
  EXPECT_EQ(tensors[2].value.rank(), 0);
  const std::string not_h5 = tmp("not.weights.h5");
  test_util::write_binary(not_h5, "plain text, not HDF5");
  expect_has(error_of([&] { io::read_h5_tensors(not_h5); }), {not_h5, "is not an HDF5 file"});
}

// Issue 25 item 10: nlohmann's raw message named no file. A plain syntax error (a missing
// comma on line 3) in a model JSON says which JSON and where (nlohmann's line and column); in a
// .keras file, the file and its member.
TEST(KerasFileLimits, JsonSyntaxErrorsNameTheFileAndTheLine) {
  const std::string bad =
      "{\"class_name\": \"Sequential\",\n \"config\": {\"name\": \"s\",\n"
      "  \"layers\": [] \"trainable\": true}}";
  expect_has(error_of([&] { model_from_json(bad); }),
             {"model JSON", "not valid JSON", "line 3, column"});
  const std::string path = tmp("syntax.keras");
  test_util::write_binary(
      path, test_util::make_zip(
                {{"config.json", bad, true}, {"metadata.json", "{}"}, {"model.weights.h5", ""}}));
  expect_has(error_of([&] { load_model(path); }),
             {path, "config.json", "not valid JSON", "line 3, column"});
  test_util::write_binary(path, test_util::make_zip({{"config.json", small_model().to_json()},
                                                     {"metadata.json", "{\"keras_version\": }"},
                                                     {"model.weights.h5", ""}}));
  expect_has(error_of([&] { load_model(path); }),
             {path, "metadata.json", "not valid JSON", "line 1, column"});
}

// Issue 25 item 1: Conv2D filters 2^62 in a .keras file's config.json (not only a model JSON)
// is the checked-size error naming the file and the layer, not a crash.
TEST(KerasFileLimits, HugeConv2DFiltersInAKerasFileAreAnError) {
  const std::string config = R"({"class_name": "Sequential", "config": {"name": "s", "layers": [
    {"class_name": "InputLayer", "config": {"batch_shape": [null, 8, 8, 3], "name": "in"}},
    {"class_name": "Conv2D", "config": {"name": "c", "filters": 4611686018427387904,
     "kernel_size": [3, 3]}}]}})";
  // A real weights file (the archive's members are all read before the model is built).
  const std::string weights = tmp("conv.weights.h5");
  KTensor in = Input({8, 8, 3}, "in");
  Model(in, Conv2D(4, 3, {.name = "c"})(in), "s").save_weights(weights);
  const std::string path = tmp("huge_conv.keras");
  test_util::write_binary(
      path, test_util::make_zip({{"config.json", config, true},
                                 {"metadata.json", "{}"},
                                 {"model.weights.h5", test_util::read_text_file(weights)}}));
  const std::string e = test_util::in_child([&] { return error_of([&] { load_model(path); }); });
  expect_has(e, {path, "config.json", "Conv2D 'c'", "weight 'kernel'"});
}
