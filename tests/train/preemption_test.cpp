// Graceful preemption (lockstep/trainers/preemption.h, issue 25): a real SIGTERM to a training
// process mid-epoch stops it after the running step with its BackupAndRestore backup written
// and exit status 75; running it again resumes and ends with the uninterrupted run's weights,
// byte for byte (op determinism). The process is examples/distributed_train, which waits after
// a given step until a signal arrives (no timing decides where it stops). The examples
// fashion_mnist and flowers install the same handler: signalled mid-epoch they exit 75 with
// their --backup-dir written, and the same command again resumes there and finishes.
#include "lockstep/trainers/preemption.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "lockstep/io/checkpoint.h"
#include "test_util.h"

extern char** environ;
using namespace lockstep;
namespace fs = std::filesystem;

namespace {

std::string binary(const std::string& name = "distributed_train") {
  return std::string(LOCKSTEP_BINARY_DIR) + "/bin/" + name;
}

bool fashion_mnist_installed() {
  const char* env = std::getenv("LOCKSTEP_FASHION_MNIST_DIR");
  const fs::path dir = env && *env ? env : "/usr/share/datasets/fashion-mnist";
  return fs::exists(dir / "train-images-idx3-ubyte.gz");
}

std::string read_text(const fs::path& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Starts `bin` (distributed_train) with `args`, stdout and stderr into `log`, one compute thread
// (the byte-for-byte comparison needs the same thread count in every run).
pid_t start(std::vector<std::string> args, const fs::path& log, const std::string& bin = binary()) {
  std::vector<std::string> env_s{"OMP_NUM_THREADS=1"};
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "OMP_NUM_THREADS=", 16) != 0) env_s.push_back(*e);
  std::vector<char*> env, argv;
  for (auto& s : env_s) env.push_back(s.data());
  env.push_back(nullptr);
  args.insert(args.begin(), bin);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), env.data()), 0);
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

// Exit status (128 + signal when killed by one), or -1 when it ran past the deadline (killed).
int finish(pid_t pid, double seconds = 120) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (std::chrono::steady_clock::now() - t0 > std::chrono::duration<double>(seconds)) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Waits (generous deadline) until `log` contains `text`; false if the process ended first.
bool wait_for_line(pid_t pid, const fs::path& log, const std::string& text) {
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120)) {
    if (read_text(log).find(text) != std::string::npos) return true;
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

class Preemption : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(binary())) GTEST_SKIP() << binary() << " not built";
    dir_ = test_util::temp_dir("preemption", true);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // A run signalled after step `step` (counted over the run): its exit status and log.
  std::pair<int, std::string> signalled_run(std::vector<std::string> args, int step, int signal,
                                            const std::string& bin = binary()) {
    args.insert(args.end(), {"--wait-for-signal-at", std::to_string(step)});
    const fs::path log = dir_ / "signalled.log";
    const pid_t pid = start(args, log, bin);
    const std::string waiting = "waiting for a signal after step " + std::to_string(step);
    if (!wait_for_line(pid, log, waiting)) {
      ADD_FAILURE() << "never reached step " << step << ":\n" << read_text(log);
      finish(pid, 1);
      return {-1, read_text(log)};
    }
    kill(pid, signal);
    const int rc = finish(pid);
    return {rc, read_text(log)};
  }
  fs::path dir_;
};

}  // namespace

TEST_F(Preemption, SigtermMidEpochWritesTheBackupAndTheRerunEndsWithTheSameBytes) {
  // 96 samples in batches of 16: 6 steps an epoch, 2 epochs; a RandomFlip and a Dropout.
  const std::vector<std::string> common{"--strategy", "one_device", "--deterministic", "--epochs",
                                        "2"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = common;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  ASSERT_EQ(finish(start(with({"--out", path("ref.lsckpt")}), dir_ / "ref.log")), 0)
      << read_text(dir_ / "ref.log");

  // Backups only at epoch ends: the one mid-epoch 2 is the preemption's. Step 9 is epoch 2's 3rd.
  const std::vector<std::string> run =
      with({"--backup-dir", path("backup"), "--backup-freq", "epoch", "--out", path("run.lsckpt")});
  auto [rc, log] = signalled_run(run, 9, SIGTERM);
  ASSERT_EQ(rc, kPreemptedExitCode) << log;
  EXPECT_NE(log.find("fit: stopped by SIGTERM after step 3 of epoch 2; BackupAndRestore wrote " +
                     path("backup") +
                     "/checkpoint.lsckpt (epoch 2, step 3): run the same "
                     "command again to resume (exit status 75)"),
            std::string::npos)
      << log;
  ASSERT_TRUE(fs::exists(path("backup/checkpoint.lsckpt")));
  EXPECT_FALSE(fs::exists(path("run.lsckpt")));  // the final weights are not written

  ASSERT_EQ(finish(start(run, dir_ / "resumed.log")), 0) << read_text(dir_ / "resumed.log");
  EXPECT_NE(read_text(dir_ / "resumed.log").find("at epoch 2, step 3"), std::string::npos)
      << read_text(dir_ / "resumed.log");
  EXPECT_FALSE(fs::exists(path("backup/checkpoint.lsckpt")));  // deleted when fit completes
  const io::CheckpointFile ref = io::read_checkpoint_file(path("ref.lsckpt"));
  const io::CheckpointFile resumed = io::read_checkpoint_file(path("run.lsckpt"));
  ASSERT_EQ(ref.tensors.size(), resumed.tensors.size());
  for (size_t i = 0; i < ref.tensors.size(); ++i) {
    const Tensor &a = ref.tensors[i].value, &b = resumed.tensors[i].value;
    ASSERT_EQ(a.nbytes(), b.nbytes()) << ref.tensors[i].name;
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << ref.tensors[i].name;
  }
}

// SIGINT (Ctrl-C) too; without a BackupAndRestore the message says nothing was saved.
TEST_F(Preemption, SigintWithoutABackupSaysNothingWasSaved) {
  auto [rc, log] = signalled_run({"--strategy", "one_device", "--epochs", "1"}, 2, SIGINT);
  ASSERT_EQ(rc, kPreemptedExitCode) << log;
  EXPECT_NE(log.find("fit: stopped by SIGINT after step 2 of epoch 1; nothing was saved (add a "
                     "BackupAndRestore callback"),
            std::string::npos)
      << log;
}

// The examples install the handler too (issue 25): fashion_mnist on its first 192 training
// images in batches of 32 (6 steps an epoch), SIGTERM after step 8 (epoch 2's 2nd): exit 75,
// the backup written; the same command again resumes at that step and finishes.
TEST_F(Preemption, FashionMnistExampleExits75OnSigtermAndTheRerunResumes) {
  const std::string bin = binary("fashion_mnist");
  if (!fs::exists(bin)) GTEST_SKIP() << bin << " not built";
  if (!fashion_mnist_installed()) GTEST_SKIP() << "Fashion-MNIST not installed";
  const std::vector<std::string> run{
      "--train-samples", "192",         "--test-samples", "64", "--batch-size", "32",
      "--epochs",        "2",           "--threads",      "1",  "--out-dir",    path("out"),
      "--backup-dir",    path("backup")};
  auto [rc, log] = signalled_run(run, 8, SIGTERM, bin);
  ASSERT_EQ(rc, kPreemptedExitCode) << log;
  EXPECT_NE(log.find("fashion_mnist: fit: stopped by SIGTERM after step 2 of epoch 2; "
                     "BackupAndRestore wrote " +
                     path("backup") + "/checkpoint.lsckpt (epoch 2, step 2)"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("\"test_accuracy\""), std::string::npos) << log;  // stopped before the end
  ASSERT_TRUE(fs::exists(path("backup/checkpoint.lsckpt")));

  ASSERT_EQ(finish(start(run, dir_ / "resumed.log", bin)), 0) << read_text(dir_ / "resumed.log");
  const std::string resumed = read_text(dir_ / "resumed.log");
  EXPECT_NE(resumed.find("BackupAndRestore: resuming from " + path("backup") +
                         "/checkpoint.lsckpt at epoch 2, step 2"),
            std::string::npos)
      << resumed;
  EXPECT_NE(resumed.find("\"epochs\": 2"), std::string::npos) << resumed;
  EXPECT_FALSE(fs::exists(path("backup/checkpoint.lsckpt")));  // deleted when fit completes
}

// flowers on an exported image folder (12 images a class, 96 for training in batches of 16:
// 6 steps an epoch): SIGTERM after step 8 exits 75 with the training phase's backup written;
// the rerun resumes there (the tf.data-style pipeline rebuilt at that position) and finishes.
TEST_F(Preemption, FlowersExampleExits75OnSigtermAndTheRerunResumes) {
  const std::string bin = binary("flowers");
  if (!fs::exists(bin)) GTEST_SKIP() << bin << " not built";
  if (!fashion_mnist_installed()) GTEST_SKIP() << "Fashion-MNIST not installed";
  const std::vector<std::string> run{"--per-class",  "12",          "--image-size", "16",
                                     "--batch-size", "16",          "--epochs",     "2",
                                     "--threads",    "1",           "--out-dir",    path("out"),
                                     "--backup-dir", path("backup")};
  auto [rc, log] = signalled_run(run, 8, SIGTERM, bin);
  ASSERT_EQ(rc, kPreemptedExitCode) << log;
  EXPECT_NE(log.find("flowers: fit: stopped by SIGTERM after step 2 of epoch 2; "
                     "BackupAndRestore wrote " +
                     path("backup") + "/train/checkpoint.lsckpt (epoch 2, step 2)"),
            std::string::npos)
      << log;
  ASSERT_TRUE(fs::exists(path("backup/train/checkpoint.lsckpt")));

  ASSERT_EQ(finish(start(run, dir_ / "resumed.log", bin)), 0) << read_text(dir_ / "resumed.log");
  const std::string resumed = read_text(dir_ / "resumed.log");
  EXPECT_NE(resumed.find("BackupAndRestore: resuming from " + path("backup") +
                         "/train/checkpoint.lsckpt at epoch 2, step 2"),
            std::string::npos)
      << resumed;
  EXPECT_NE(resumed.find("\"epochs\": 2,"), std::string::npos) << resumed;
  EXPECT_FALSE(fs::exists(path("backup/train/checkpoint.lsckpt")));
}
