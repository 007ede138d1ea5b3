// IDX reader (gzip via zlib) and the Fashion-MNIST loader.
#include "lockstep/data/idx.h"

#include <zlib.h>

#include <cstdlib>
#include <filesystem>

namespace lockstep::data {

static std::vector<uint8_t> read_gz(const std::string& path) {
  LS_CHECK(std::filesystem::exists(path), "IDX file '", path,
           "' not found (install Debian's dataset-fashion-mnist or pass --data-dir)");
  gzFile f = gzopen(path.c_str(), "rb");
  LS_CHECK(f, "cannot open '", path, "'");
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  for (;;) {
    int n = gzread(f, buf, sizeof(buf));
    if (n < 0) {
      int err;
      std::string msg = gzerror(f, &err);
      gzclose(f);
      LS_FAIL("'", path, "' is corrupt (", msg, ")");
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  int rc = gzclose(f);
  LS_CHECK(rc == Z_OK, "'", path, "' is truncated or corrupt (gzip stream did not end cleanly)");
  return out;
}

Tensor read_idx(const std::string& path) {
  std::vector<uint8_t> bytes = read_gz(path);  // gz reader passes plain files through
  LS_CHECK(bytes.size() >= 4, "'", path, "' is too short to be an IDX file (", bytes.size(), " bytes)");
  LS_CHECK(bytes[0] == 0 && bytes[1] == 0, "'", path, "' is not an IDX file (bad magic)");
  LS_CHECK(bytes[2] == 0x08, "'", path, "': only unsigned-byte IDX data is supported (type 0x",
           std::hex, int(bytes[2]), ")");
  int rank = bytes[3];
  LS_CHECK(rank >= 1 && rank <= 4, "'", path, "': unsupported IDX rank ", rank);
  LS_CHECK(bytes.size() >= size_t(4 + 4 * rank), "'", path, "' is truncated (header)");
  std::vector<int64_t> dims;
  size_t count = 1;
  for (int i = 0; i < rank; ++i) {
    const uint8_t* p = &bytes[4 + 4 * i];
    int64_t d = (int64_t(p[0]) << 24) | (int64_t(p[1]) << 16) | (int64_t(p[2]) << 8) | p[3];
    dims.push_back(d);
    count *= size_t(d);
  }
  size_t header = 4 + 4 * rank;
  LS_CHECK(bytes.size() - header == count, "'", path, "' is truncated: expected ", count,
           " data bytes for shape ", Shape(dims).str(), ", found ", bytes.size() - header);
  Tensor t = Tensor::empty(Shape(dims), DType::u8);
  std::memcpy(t.raw(), bytes.data() + header, count);
  return t;
}

const std::vector<std::string>& FashionMnist::class_names() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress",
                                                 "Coat",        "Sandal",  "Shirt",    "Sneaker",
                                                 "Bag",         "Ankle boot"};
  return names;
}

std::string fashion_mnist_dir(const std::string& override_dir) {
  if (!override_dir.empty()) return override_dir;
  if (const char* env = std::getenv("LOCKSTEP_FASHION_MNIST_DIR"); env && *env) return env;
  return "/usr/share/datasets/fashion-mnist";
}

static Tensor images_to_f32(const Tensor& u8, const std::string& path) {
  LS_CHECK(u8.rank() == 3, "'", path, "': expected images of rank 3 (N, 28, 28), got ",
           u8.shape().str());
  Tensor x = Tensor::empty(Shape{u8.dim(0), u8.dim(1), u8.dim(2), 1});
  const uint8_t* s = u8.data<uint8_t>();
  float* d = x.data<float>();
  for (int64_t i = 0, n = u8.numel(); i < n; ++i) d[i] = float(s[i]) * (1.0f / 255.0f);
  return x;
}

static Tensor labels_to_i32(const Tensor& u8, const std::string& path, int64_t expected) {
  LS_CHECK(u8.rank() == 1 && u8.dim(0) == expected, "'", path, "': expected ", expected,
           " labels, got shape ", u8.shape().str());
  Tensor y = Tensor::empty(Shape{u8.dim(0)}, DType::i32);
  for (int64_t i = 0; i < u8.numel(); ++i) {
    int v = u8.data<uint8_t>()[i];
    LS_CHECK(v < 10, "'", path, "': label ", v, " at index ", i, " is not a class in [0, 10)");
    y.data<int32_t>()[i] = v;
  }
  return y;
}

FashionMnist load_fashion_mnist(const std::string& dir_arg) {
  std::string dir = fashion_mnist_dir(dir_arg);
  auto p = [&](const char* f) { return (std::filesystem::path(dir) / f).string(); };
  FashionMnist d;
  d.x_train = images_to_f32(read_idx(p("train-images-idx3-ubyte.gz")), p("train-images-idx3-ubyte.gz"));
  d.y_train = labels_to_i32(read_idx(p("train-labels-idx1-ubyte.gz")), p("train-labels-idx1-ubyte.gz"),
                            d.x_train.dim(0));
  d.x_test = images_to_f32(read_idx(p("t10k-images-idx3-ubyte.gz")), p("t10k-images-idx3-ubyte.gz"));
  d.y_test = labels_to_i32(read_idx(p("t10k-labels-idx1-ubyte.gz")), p("t10k-labels-idx1-ubyte.gz"),
                           d.x_test.dim(0));
  return d;
}

}  // namespace lockstep::data
