// IDX reader: real values round-trip, and missing/truncated/corrupt files name the file.
#include "lockstep/data/idx.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "test_util.h"

using namespace lockstep;
namespace fs = std::filesystem;

static std::string tmp_path(const std::string& name) {
  return (test_util::temp_dir("idx") / name).string();
}

static std::vector<uint8_t> idx_bytes(std::vector<uint32_t> dims, std::vector<uint8_t> data) {
  std::vector<uint8_t> b = {0, 0, 8, uint8_t(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(d >> s));
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

static void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), unsigned(bytes.size()));
  gzclose(f);
}

TEST(Idx, ReadsGzippedAndPlain) {
  std::vector<uint8_t> data = {1, 2, 3, 4, 5, 6};
  auto gz = tmp_path("a.gz");
  write_gz(gz, idx_bytes({2, 3}, data));
  Tensor t = data::read_idx(gz);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.to_vector(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  auto plain = tmp_path("a.idx");
  auto b = idx_bytes({3}, {7, 8, 9});
  std::ofstream(plain, std::ios::binary).write(reinterpret_cast<char*>(b.data()), b.size());
  EXPECT_EQ(data::read_idx(plain).to_vector(), (std::vector<float>{7, 8, 9}));
}

using lockstep::test_util::error_of;

TEST(Idx, MissingFileNamesIt) {
  auto msg = error_of([] { data::read_idx("/nonexistent/train-images-idx3-ubyte.gz"); });
  EXPECT_NE(msg.find("/nonexistent/train-images-idx3-ubyte.gz"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not found"), std::string::npos) << msg;
}

TEST(Idx, TruncatedDataNamesFile) {
  auto p = tmp_path("trunc.gz");
  auto b = idx_bytes({10, 28, 28}, std::vector<uint8_t>(500, 1));
  write_gz(p, b);
  auto msg = error_of([&] { data::read_idx(p); });
  EXPECT_NE(msg.find("trunc.gz"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST(Idx, TruncatedGzipStreamNamesFile) {
  auto p = tmp_path("cut.gz");
  write_gz(p, idx_bytes({100, 28, 28}, std::vector<uint8_t>(78400, 3)));
  fs::resize_file(p, fs::file_size(p) / 2);
  auto msg = error_of([&] { data::read_idx(p); });
  EXPECT_NE(msg.find("cut.gz"), std::string::npos) << msg;
}

TEST(Idx, BadMagic) {
  auto p = tmp_path("bad.gz");
  write_gz(p, {1, 2, 3, 4, 5, 6, 7, 8});
  auto msg = error_of([&] { data::read_idx(p); });
  EXPECT_NE(msg.find("not an IDX file"), std::string::npos) << msg;
}

TEST(FashionMnist, LoadsDebianPackageWhenInstalled) {
  std::string dir = data::fashion_mnist_dir();
  if (!fs::exists(dir + "/t10k-labels-idx1-ubyte.gz"))
    GTEST_SKIP() << "dataset not installed at " << dir;
  auto d = data::load_fashion_mnist(dir);
  EXPECT_EQ(d.x_train.shape(), (Shape{60000, 28, 28, 1}));
  EXPECT_EQ(d.y_test.shape(), (Shape{10000}));
  auto y = d.y_test.to_vector();
  std::vector<int> counts(10);
  for (float v : y) counts[int(v)]++;
  for (int c : counts) EXPECT_EQ(c, 1000);  // Fashion-MNIST's test set is balanced
  float mx = 0;
  for (float v : d.x_train.slice(0, 10).to_vector()) mx = std::max(mx, v);
  EXPECT_LE(mx, 1.0f);
  EXPECT_GT(mx, 0.9f);
}

TEST(FashionMnist, MissingDirectoryIsAClearError) {
  auto msg = error_of([] { data::load_fashion_mnist("/no/such/dir"); });
  EXPECT_NE(msg.find("/no/such/dir/train-images-idx3-ubyte.gz"), std::string::npos) << msg;
}
