// IDX files built to hurt: a gzip bomb behind a small header is refused before the stream is
// inflated, a header whose dimensions overflow when multiplied is an error (and the export tool
// reports it instead of crashing), and a header that claims more than the file holds allocates
// nothing up front.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "lockstep/data/idx.h"
#include "lockstep/tools/export.h"
#include "test_util.h"

using namespace lockstep;
namespace fs = std::filesystem;

namespace {

std::string tmp_path(const std::string& name) {
  return (test_util::temp_dir("idx_hard") / name).string();
}

std::vector<uint8_t> idx_header(std::vector<uint32_t> dims) {
  std::vector<uint8_t> b = {0, 0, 8, uint8_t(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(d >> s));
  return b;
}

void write_plain(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

// A gzip file holding `head` followed by `zeros` zero bytes (written in chunks).
void write_gz(const std::string& path, const std::vector<uint8_t>& head, size_t zeros) {
  gzFile f = gzopen(path.c_str(), "wb9");
  gzwrite(f, head.data(), unsigned(head.size()));
  std::vector<uint8_t> chunk(1 << 20, 0);
  while (zeros > 0) {
    const size_t n = std::min(zeros, chunk.size());
    gzwrite(f, chunk.data(), unsigned(n));
    zeros -= n;
  }
  gzclose(f);
}

// Peak resident memory (VmHWM, KiB) since the last reset_peak_rss(); -1 when unknown.
long peak_rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}
long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}
bool reset_peak_rss() {  // Linux >= 4.0: writing 5 to clear_refs resets VmHWM to VmRSS
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return bool(f);
}

using test_util::error_of;

}  // namespace

TEST(IdxHardening, GzipBombIsRefusedBeforeTheStreamIsInflated) {
  // A header for 10 images of 28x28 (7840 bytes), then 128 MiB of zeros: ~130 KB on disk.
  const std::string p = tmp_path("bomb.gz");
  write_gz(p, idx_header({10, 28, 28}), size_t(128) << 20);
  ASSERT_LT(fs::file_size(p), size_t(1) << 20);
  const bool can_measure = reset_peak_rss();
  const long rss_before = rss_kib();
  const auto start = std::chrono::steady_clock::now();
  const std::string msg = error_of([&] { data::read_idx(p); });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(msg.find("bomb.gz"), std::string::npos) << msg;
  EXPECT_NE(msg.find("more data than its header"), std::string::npos) << msg;
  if (can_measure) {
    const long grown_mib = (peak_rss_kib() - rss_before) / 1024;
    EXPECT_LT(grown_mib, 16) << "inflated the whole stream (" << grown_mib << " MiB) before "
                             << "checking it against the header";
  }
  EXPECT_LT(seconds, 60.0);  // hang guard (inflating all 128 MiB is what the RSS check catches)
}

TEST(IdxHardening, DimensionsWhoseProductOverflowsAreAnError) {
  // 65536^4 = 2^64 wraps to 0, which matched an empty data section.
  const std::string p = tmp_path("overflow4.idx");
  write_plain(p, idx_header({65536, 65536, 65536, 65536}));
  std::string msg = error_of([&] { data::read_idx(p); });
  EXPECT_NE(msg.find("overflow4.idx"), std::string::npos) << msg;
  EXPECT_NE(msg.find("too large"), std::string::npos) << msg;
  // 2^22 * 2^21 * 2^21 = 2^64, gzipped.
  const std::string g = tmp_path("overflow3.gz");
  write_gz(g, idx_header({1u << 22, 1u << 21, 1u << 21}), 0);
  msg = error_of([&] { data::read_idx(g); });
  EXPECT_NE(msg.find("overflow3.gz"), std::string::npos) << msg;
  EXPECT_NE(msg.find("too large"), std::string::npos) << msg;
}

// Found by tests/fuzz/idx_fuzz (tests/fuzz/regressions/idx/): a zero dimension makes the size
// 0, which passed the check, while the other dimensions' product overflowed the tensor's strides
// (signed overflow in Shape::contiguous_strides). Before the fix this read "succeeded".
TEST(IdxHardening, ZeroDimensionBesideOverflowingOnesIsAnError) {
  const std::string p = tmp_path("zero_dim.idx");
  write_plain(p, idx_header({0, 1u << 30, 1u << 30, 1u << 30}));
  const std::string msg = error_of([&] { data::read_idx(p); });
  EXPECT_NE(msg.find("too large"), std::string::npos) << msg;
  // A zero dimension beside sane ones is still an empty tensor.
  write_plain(p, idx_header({0, 28, 28}));
  EXPECT_EQ(data::read_idx(p).numel(), 0);
}

TEST(IdxHardening, HeaderClaimingMoreThanTheFileHoldsIsTruncatedWithoutAllocatingIt) {
  if (lockstep::test_util::kSanitizerBuild)
    GTEST_SKIP() << "measures RSS; runs in the release suite";
  // 1e12 bytes claimed by a 14-byte file (plain) and by a tiny gzip stream.
  for (const bool gz : {false, true}) {
    const std::string p = tmp_path(gz ? "claims.gz" : "claims.idx");
    auto bytes = idx_header({1000000, 1000, 1000});
    bytes.insert(bytes.end(), {1, 2});
    if (gz)
      write_gz(p, bytes, 0);
    else
      write_plain(p, bytes);
    const bool can_measure = reset_peak_rss();
    const long before = rss_kib();
    const std::string msg = error_of([&] { data::read_idx(p); });
    EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
    if (can_measure) {
      EXPECT_LT((peak_rss_kib() - before) / 1024, 8)
          << p << ": grew " << (peak_rss_kib() - before) << " KiB";
    }
  }
}

// The export tool used to reach a SIGSEGV on the overflowing header; it runs in a child so a
// crash fails this test instead of the test binary.
TEST(IdxHardening, ExportOfAnOverflowingHeaderIsAnErrorNotACrash) {
  const std::string images = tmp_path("ovf-images.gz");
  const std::string labels = tmp_path("ovf-labels.gz");
  write_gz(images, idx_header({1u << 22, 1u << 21, 1u << 21}), 0);
  write_gz(labels, idx_header({1u << 22}), size_t(1) << 22);
  const std::string out = tmp_path("ovf-out");
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 0;
    try {
      tools::export_idx_image_folder(images, labels, {}, out, {.limit_per_class = 1});
      code = 3;  // no error at all
    } catch (const Error& e) {
      code = std::string(e.what()).find("ovf-images.gz") != std::string::npos ? 0 : 4;
    } catch (...) {
      code = 5;
    }
    ::_exit(code);
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "export crashed with signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "3: no error, 4: error does not name the file, 5: not a lockstep::Error";
}

// The same through the command line (skipped when bin/lockstep is not built).
TEST(IdxHardening, LockstepExportImageFolderReportsAnOverflowingHeader) {
  const std::string bin = std::string(LOCKSTEP_BINARY_DIR) + "/bin/lockstep";
  if (!fs::exists(bin)) GTEST_SKIP() << bin << " not built";
  const std::string images = tmp_path("cli-ovf-images.gz");
  const std::string labels = tmp_path("cli-ovf-labels.gz");
  write_gz(images, idx_header({1u << 22, 1u << 21, 1u << 21}), 0);
  write_gz(labels, idx_header({1u << 22}), size_t(1) << 22);
  const std::string cmd = "timeout 60 " + bin + " export-image-folder --images " + images +
                          " --labels " + labels + " --out " + tmp_path("cli-ovf-out") +
                          " --limit-per-class 1 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_TRUE(p);
  std::string out;
  char buf[4096];
  size_t k;
  while ((k = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, k);
  const int status = ::pclose(p);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status) << "\n" << out;
  EXPECT_EQ(WEXITSTATUS(status), 1) << out;
  EXPECT_NE(out.find("cli-ovf-images.gz"), std::string::npos) << out;
}
