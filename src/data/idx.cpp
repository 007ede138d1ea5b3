// IDX reader (gzip via zlib) and the Fashion-MNIST loader.
#include "lockstep/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "lockstep/core/env.h"
#include "lockstep/core/file_io.h"

namespace lockstep::data {

namespace {

// A gzip (or, passed through, plain) file read in pieces, so the header is checked before the
// data is inflated and no more is inflated than the header promises.
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {
    f_ = gzopen(path.c_str(), "rb");
    LS_CHECK(f_, "cannot open '", path, "'");
  }
  ~GzReader() {
    if (f_) gzclose(f_);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to n bytes (fewer only at the end of the data).
  size_t read(void* dst, size_t n) {
    size_t got = 0;
    while (got < n) {
      const unsigned step = unsigned(std::min<size_t>(n - got, size_t(1) << 20));
      const int k = gzread(f_, static_cast<uint8_t*>(dst) + got, step);
      if (k < 0) {
        int err = 0;
        const std::string msg = gzerror(f_, &err);
        LS_FAIL("'", path_, "' is corrupt (", msg, ")");
      }
      if (k == 0) break;
      got += size_t(k);
    }
    return got;
  }
  bool plain() { return gzdirect(f_) == 1; }
  // Closes after the whole stream was read; a stream that did not end cleanly is an error.
  void finish() {
    const int rc = gzclose(f_);
    f_ = nullptr;
    LS_CHECK(rc == Z_OK, "'", path_, "' is truncated or corrupt (gzip stream did not end cleanly)");
  }

 private:
  std::string path_;
  gzFile f_ = nullptr;
};

}  // namespace

Tensor read_idx(const std::string& path) {
  std::error_code ec;
  LS_CHECK(std::filesystem::exists(path, ec), "IDX file '", path,
           "' not found (install Debian's dataset-fashion-mnist or pass --data-dir)");
  LS_CHECK(!std::filesystem::is_directory(path, ec), "IDX file '", path, "' is a directory");
  check_regular_file(path, "IDX file");  // a FIFO would hang the open
  GzReader in(path);                     // gz reader passes plain files through
  uint8_t magic[4] = {0, 0, 0, 0};
  const size_t got = in.read(magic, 4);
  LS_CHECK(got == 4, "'", path, "' is too short to be an IDX file (", got, " bytes)");
  LS_CHECK(magic[0] == 0 && magic[1] == 0, "'", path, "' is not an IDX file (bad magic)");
  LS_CHECK(magic[2] == 0x08, "'", path, "': only unsigned-byte IDX data is supported (type 0x",
           std::hex, int(magic[2]), ")");
  const int rank = magic[3];
  LS_CHECK(rank >= 1 && rank <= 4, "'", path, "': unsupported IDX rank ", rank);
  uint8_t dim_bytes[16];
  LS_CHECK(in.read(dim_bytes, size_t(4 * rank)) == size_t(4 * rank), "'", path,
           "' is truncated (header)");
  std::vector<int64_t> dims;
  for (int i = 0; i < rank; ++i) {
    const uint8_t* p = &dim_bytes[4 * i];
    dims.push_back(
        int64_t((uint64_t(p[0]) << 24) | (uint64_t(p[1]) << 16) | (uint64_t(p[2]) << 8) | p[3]));
  }
  const Shape shape(dims);
  // Checked before anything is allocated (core's checked_bytes: the non-zero dims' product,
  // which a tensor's strides reach even when a zero dim makes the count 0, must fit too).
  uint64_t count = 0;
  try {
    count = checked_bytes(shape, 1, "IDX data");
  } catch (const Error&) {
    LS_FAIL("'", path, "': the header's shape ", shape.str(),
            " is too large (its size overflows 64 bits; the header is corrupt)");
  }
  const uint64_t header = 4 + 4 * uint64_t(rank);
  // A plain file's size is known: compare before reading anything.
  if (in.plain()) {
    const uint64_t size = std::filesystem::file_size(path, ec);
    if (!ec && size < header + count) {
      LS_FAIL("'", path, "' is truncated: expected ", count, " data bytes for shape ", shape.str(),
              ", found ", size - header);
    }
    if (!ec && size > header + count) {
      LS_FAIL("'", path, "' holds more data than its header says (shape ", shape.str(), " needs ",
              count, " bytes; the file has ", size - header, ")");
    }
  }
  // Memory follows what the stream actually holds, never what the header claims.
  std::vector<uint8_t> data;
  while (data.size() < count) {
    const size_t have = data.size();
    // Grow geometrically from 1 MiB: a header that claims more than the stream holds costs at
    // most twice what the stream really delivered (a fixed 16 MiB first step did not).
    const uint64_t grow = std::max<uint64_t>(uint64_t(1) << 20, have);
    const size_t step =
        size_t(std::min<uint64_t>(count - have, std::min<uint64_t>(grow, uint64_t(64) << 20)));
    data.resize(have + step);
    const size_t n = in.read(data.data() + have, step);
    if (n < step) {
      LS_FAIL("'", path, "' is truncated: expected ", count, " data bytes for shape ", shape.str(),
              ", found ", have + n);
    }
  }
  uint8_t extra = 0;
  LS_CHECK(in.read(&extra, 1) == 0, "'", path, "' holds more data than its header says (shape ",
           shape.str(), " needs ", count, " bytes)");
  in.finish();
  Tensor t = Tensor::empty(shape, DType::u8);
  if (count > 0) std::memcpy(t.raw(), data.data(), size_t(count));
  return t;
}

const std::vector<std::string>& FashionMnist::class_names() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser",   "Pullover", "Dress",
                                                 "Coat",        "Sandal",    "Shirt",    "Sneaker",
                                                 "Bag",         "Ankle boot"};
  return names;
}

std::string fashion_mnist_dir(const std::string& override_dir) {
  if (!override_dir.empty()) return override_dir;
  return env::text(env::fashion_mnist_dir).value_or(env::decl(env::fashion_mnist_dir.sw).fallback);
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
  d.x_train =
      images_to_f32(read_idx(p("train-images-idx3-ubyte.gz")), p("train-images-idx3-ubyte.gz"));
  d.y_train = labels_to_i32(read_idx(p("train-labels-idx1-ubyte.gz")),
                            p("train-labels-idx1-ubyte.gz"), d.x_train.dim(0));
  d.x_test =
      images_to_f32(read_idx(p("t10k-images-idx3-ubyte.gz")), p("t10k-images-idx3-ubyte.gz"));
  d.y_test = labels_to_i32(read_idx(p("t10k-labels-idx1-ubyte.gz")), p("t10k-labels-idx1-ubyte.gz"),
                           d.x_test.dim(0));
  return d;
}

}  // namespace lockstep::data
