// Checkpoint files that are not what they seem: a path that is a directory, and a file whose
// CRC is valid but whose dimensions are absurd, give a lockstep::Error naming the file (not
// std::terminate or std::bad_alloc); a save removes the temporaries that killed saves to the
// same path left behind, and only those.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "lockstep/io/checkpoint.h"
#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
namespace fs = std::filesystem;

namespace {

std::string tmpdir(const std::string& name) {
  return test_util::temp_dir("ckpt_hard_" + name, /*fresh=*/true).string();
}

// Runs fn; returns the lockstep::Error's message, "" when nothing was thrown, and
// "NOT A lockstep::Error: ..." for any other exception.
template <typename F>
std::string any_error_of(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("NOT A lockstep::Error: ") + e.what();
  }
  return "";
}

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::vector<char>& b) {
  std::ofstream(path, std::ios::binary).write(b.data(), std::streamsize(b.size()));
}

// A valid one-tensor checkpoint ("w", f32 [2, 3]) whose dims and data size are then replaced
// (rank kept at 2, or changed), with the CRC recomputed so only the sizes are wrong.
std::string forged(const std::string& dir, const std::string& name, std::vector<int64_t> dims,
                   uint64_t data_bytes, int rank_byte = -1) {
  const std::string path = dir + "/" + name;
  io::CheckpointFile f;
  f.tensors.push_back({"w", Tensor::zeros({2, 3})});
  io::write_checkpoint_file(path, f);
  std::vector<char> b = read_bytes(path);
  uint64_t meta = 0;
  std::memcpy(&meta, b.data() + 8, 8);
  size_t pos = 8 + 8 + size_t(meta) + 8;  // magic, meta size, meta, tensor count
  pos += 4 + 1;                           // name size, name "w"
  pos += 1;                               // dtype
  const size_t rank_at = pos;
  pos += 1;
  const size_t tail_at = pos + 2 * 8 + 8 + 6 * 4;  // after dims, data size and data
  std::vector<char> out(b.begin(), b.begin() + long(rank_at));
  out.push_back(char(rank_byte >= 0 ? rank_byte : int(dims.size())));
  for (int64_t d : dims)
    out.insert(out.end(), reinterpret_cast<char*>(&d), reinterpret_cast<char*>(&d) + 8);
  out.insert(out.end(), reinterpret_cast<char*>(&data_bytes),
             reinterpret_cast<char*>(&data_bytes) + 8);
  out.insert(out.end(), b.begin() + long(tail_at) - 6 * 4, b.begin() + long(tail_at));  // the data
  const uint32_t crc =
      uint32_t(crc32(0L, reinterpret_cast<const Bytef*>(out.data()), uInt(out.size())));
  out.insert(out.end(), reinterpret_cast<const char*>(&crc),
             reinterpret_cast<const char*>(&crc) + 4);
  out.insert(out.end(), b.end() - 8, b.end());  // end marker
  write_bytes(path, out);
  return path;
}

}  // namespace

TEST(CheckpointHardening, LoadingADirectoryIsAnErrorNamingIt) {
  const std::string dir = tmpdir("isdir");
  const std::string target = dir + "/weights.lsckpt";
  fs::create_directories(target);
  std::string msg = any_error_of([&] { io::read_checkpoint_file(target); });
  EXPECT_NE(msg.find(target), std::string::npos) << msg;
  EXPECT_NE(msg.find("directory"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("NOT A lockstep::Error"), std::string::npos) << msg;

  set_random_seed(1);
  reset_layer_names();
  Model m = Sequential({layers::Input({3}), layers::Dense(2)});
  msg = any_error_of([&] { m.load_weights(target); });
  EXPECT_NE(msg.find(target), std::string::npos) << msg;
  EXPECT_EQ(msg.find("NOT A lockstep::Error"), std::string::npos) << msg;
}

TEST(CheckpointHardening, ValidChecksumWithAbsurdDimensionsIsAnErrorNamingTheFile) {
  const std::string dir = tmpdir("absurd");
  struct Case {
    std::string name;
    std::vector<int64_t> dims;
    uint64_t bytes;
    int rank_byte = -1;
  };
  const std::vector<Case> cases = {
      // 2^20 x 2^20 floats = 4 TiB, with a matching data size field.
      {"huge.lsckpt", {int64_t(1) << 20, int64_t(1) << 20}, uint64_t(1) << 42},
      // 2^40 x 2^40 overflows 64 bits.
      {"overflow.lsckpt", {int64_t(1) << 40, int64_t(1) << 40}, 24},
      // a negative dimension
      {"negative.lsckpt", {-2, -3}, 24},
      // plausible total, but claims more data than the file holds
      {"claims.lsckpt", {1 << 20, 3}, uint64_t(12) << 20},
      // rank 200
      {"rank.lsckpt", {2, 3}, 24, 200},
  };
  for (const Case& c : cases) {
    const std::string path = forged(dir, c.name, c.dims, c.bytes, c.rank_byte);
    const std::string msg = any_error_of([&] { io::read_checkpoint_file(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << c.name << ": " << msg;
    EXPECT_EQ(msg.find("NOT A lockstep::Error"), std::string::npos) << c.name << ": " << msg;
  }
  // The forgery itself is sound: the same bytes with the real sizes load.
  const std::string ok = forged(dir, "ok.lsckpt", {2, 3}, 24);
  EXPECT_EQ(any_error_of([&] { io::read_checkpoint_file(ok); }), "");
}

TEST(CheckpointHardening, SaveRemovesTemporariesOfDeadProcessesOnly) {
  const std::string dir = tmpdir("stale");
  const std::string target = dir + "/w.lsckpt";
  // A process that died mid-save: its PID is gone.
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ASSERT_GT(dead, 0);
  ::waitpid(dead, nullptr, 0);
  // A process still alive (saving right now, as far as anyone can tell).
  const pid_t alive = ::fork();
  if (alive == 0) {
    ::pause();
    ::_exit(0);
  }
  ASSERT_GT(alive, 0);
  const std::string stale = target + ".tmp-" + std::to_string(dead);
  const std::string busy = target + ".tmp-" + std::to_string(alive);
  const std::string other = dir + "/other.lsckpt.tmp-" + std::to_string(dead);
  const std::string unrelated = target + ".tmp-notapid";
  for (const auto& p : {stale, busy, other, unrelated})
    write_bytes(p, std::vector<char>(4096, 'x'));

  io::CheckpointFile f;
  f.tensors.push_back({"w", Tensor::full({4}, 1.f)});
  io::write_checkpoint_file(target, f);

  EXPECT_FALSE(fs::exists(stale)) << "the dead save's temporary is still there";
  EXPECT_TRUE(fs::exists(busy)) << "removed the temporary of a live process";
  EXPECT_TRUE(fs::exists(other)) << "removed another checkpoint's temporary";
  EXPECT_TRUE(fs::exists(unrelated));
  EXPECT_EQ(io::read_checkpoint_file(target).tensors.at(0).value.to_vector(),
            (std::vector<float>{1, 1, 1, 1}));
  ::kill(alive, SIGKILL);
  ::waitpid(alive, nullptr, 0);
}

// The real thing: a saving process killed mid-write (SIGKILL) leaves its temporary; the next
// save to the path removes it and the target stays loadable throughout.
TEST(CheckpointHardening, SaveAfterAKilledSaveLeavesNoDebris) {
  const std::string dir = tmpdir("killed");
  const std::string target = dir + "/w.lsckpt";
  io::CheckpointFile small;
  small.tensors.push_back({"w", Tensor::full({4}, 1.f)});
  io::write_checkpoint_file(target, small);
  const pid_t pid = ::fork();
  if (pid == 0) {
    io::CheckpointFile big;
    big.tensors.push_back({"w", Tensor::zeros({64 << 20})});  // 256 MiB: a slow write
    for (;;) io::write_checkpoint_file(target, big);
  }
  ASSERT_GT(pid, 0);
  const std::string tmp = target + ".tmp-" + std::to_string(pid);
  for (int i = 0; i < 2000 && !fs::exists(tmp); ++i) ::usleep(5000);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  if (!fs::exists(tmp)) GTEST_SKIP() << "the child never got to write its temporary";
  EXPECT_NO_THROW(io::read_checkpoint_file(target));  // still loadable
  io::write_checkpoint_file(target, small);
  EXPECT_FALSE(fs::exists(tmp)) << "the killed save's temporary is still there";
  int files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 1);
}
