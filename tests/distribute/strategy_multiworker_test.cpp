// MultiWorkerMirroredStrategy across processes on loopback (Gloo): 2 workers x B/2 give the
// weights of 1 worker x B; killing a worker mid-epoch makes the other fail fast naming it;
// rerunning with BackupAndRestore finishes with the uninterrupted result. Workers are the
// examples/distributed_train binary, started with TF_CONFIG.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "lockstep/io/checkpoint.h"
#include "lockstep/lockstep.h"
#include "lockstep/trainers/preemption.h"

extern char** environ;
using namespace lockstep;
namespace fs = std::filesystem;

namespace {

std::string binary() { return std::string(LOCKSTEP_BINARY_DIR) + "/bin/distributed_train"; }

struct Proc {
  pid_t pid = -1;
  std::string log;
};

// Whether 127.0.0.1:port can be bound right now.
bool port_is_free(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// Two consecutive free ports (worker 0's store and worker 1), asked of the OS rather than
// derived from the pid: tests running side by side under ctest -j must not collide.
int free_port() {
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = 0;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
      port = ntohs(a.sin_port);
    if (fd >= 0) ::close(fd);
    if (port > 0 && port < 65535 && port_is_free(port) && port_is_free(port + 1)) return port;
  }
  static int next = 23000 + int(::getpid() % 2000) * 4;  // the old fallback
  return next += 2;
}

Proc spawn(std::vector<std::string> args, const std::string& tf_config, const std::string& log) {
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e)
    if (std::string(*e).rfind("TF_CONFIG=", 0) != 0) env_s.push_back(*e);
  if (!tf_config.empty()) env_s.push_back("TF_CONFIG=" + tf_config);
  env_s.push_back("OMP_NUM_THREADS=1");
  std::vector<char*> env, argv;
  for (auto& s : env_s) env.push_back(s.data());
  env.push_back(nullptr);
  args.insert(args.begin(), binary());
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  Proc p;
  p.log = log;
  EXPECT_EQ(posix_spawn(&p.pid, argv[0], &fa, nullptr, argv.data(), env.data()), 0);
  posix_spawn_file_actions_destroy(&fa);
  return p;
}

// Exit status, or -1 if it did not exit within `seconds` (then it is killed).
int wait_for(Proc& p, double seconds) {
  auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    int status = 0;
    pid_t r = waitpid(p.pid, &status, WNOHANG);
    if (r == p.pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds) {
      kill(p.pid, SIGKILL);
      waitpid(p.pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string tf_config(int port, int index) {
  return "{\"cluster\":{\"worker\":[\"127.0.0.1:" + std::to_string(port) +
         "\",\"127.0.0.1:" + std::to_string(port + 1) +
         "\"]},\"task\":{\"type\":\"worker\",\"index\":" + std::to_string(index) + "}}";
}

float max_diff(const io::CheckpointFile& a, const io::CheckpointFile& b) {
  float d = 0;
  EXPECT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < std::min(a.tensors.size(), b.tensors.size()); ++i) {
    auto va = a.tensors[i].value.to_vector(), vb = b.tensors[i].value.to_vector();
    for (size_t k = 0; k < va.size(); ++k) d = std::max(d, std::fabs(va[k] - vb[k]));
  }
  return d;
}

// The number after "key": in the last JSON line of a log (NaN when absent).
double json_number(const std::string& log, const std::string& key) {
  const std::string k = "\"" + key + "\": ";
  const size_t at = log.rfind(k);
  return at == std::string::npos ? std::nan("") : std::stod(log.substr(at + k.size()));
}

class MultiWorker : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef LOCKSTEP_HAVE_GLOO
    GTEST_SKIP() << "built without Gloo";
#endif
    if (!fs::exists(binary())) GTEST_SKIP() << binary() << " not built";
    dir_ = fs::temp_directory_path() / ("lockstep_mw_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Runs distributed_train once under `strategy` with `flags`, writing <name>.lsckpt and
  // <name>.log; fails the test unless it exits 0.
  void run_one(const std::string& strategy, const std::string& name,
               std::vector<std::string> flags = {}) {
    flags.insert(flags.begin(), {"--strategy", strategy, "--out", path(name + ".lsckpt")});
    Proc p = spawn(flags, "", path(name + ".log"));
    ASSERT_EQ(wait_for(p, 120), 0) << read_file(p.log);
  }
  // Runs two multi_worker processes on loopback (w0.*, w1.*); both must exit 0 within
  // `seconds`.
  void run_pair(std::vector<std::string> flags = {}, double seconds = 120) {
    const int port = free_port();
    std::vector<Proc> workers;
    for (int w = 0; w < 2; ++w) {
      const std::string name = w == 0 ? "w0" : "w1";
      std::vector<std::string> f = flags;
      f.insert(f.begin(), {"--strategy", "multi_worker", "--out", path(name + ".lsckpt")});
      workers.push_back(spawn(f, tf_config(port, w), path(name + ".log")));
    }
    for (auto& p : workers) ASSERT_EQ(wait_for(p, seconds), 0) << read_file(p.log);
  }
  // Two multi_worker processes on loopback, worker k with flags[k] (plus a 60 s collective
  // timeout, so that a hang shows as one); waits up to 150 s for each. Fills status (exit code,
  // 128 + signal, -1: still running) and log per worker; returns the seconds until both ended.
  double run_mismatched_pair(const std::vector<std::string> flags[2], int status[2],
                             std::string log[2]) {
    const int port = free_port();
    const auto start = std::chrono::steady_clock::now();
    std::vector<Proc> workers;
    for (int w = 0; w < 2; ++w) {
      std::vector<std::string> f = flags[w];
      f.insert(f.begin(), {"--strategy", "multi_worker", "--timeout-ms", "120000"});
      workers.push_back(spawn(f, tf_config(port, w), path("m" + std::to_string(w) + ".log")));
    }
    for (int w = 0; w < 2; ++w) status[w] = wait_for(workers[size_t(w)], 150);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (int w = 0; w < 2; ++w) log[w] = read_file(workers[size_t(w)].log);
    return seconds;
  }
  // Both workers fail (exit 1, no signal), each naming `expected`, before the 120 s collective
  // timeout could have ended them (the time is a hang guard, far above a busy machine's start-up).
  void expect_both_fail_naming(const std::vector<std::string> flags[2],
                               const std::string& expected) {
    int status[2];
    std::string log[2];
    const double seconds = run_mismatched_pair(flags, status, log);
    EXPECT_LT(seconds, 100.0) << log[0] << log[1];
    for (int w = 0; w < 2; ++w) {
      EXPECT_EQ(status[w], 1) << "worker " << w << ":\n" << log[w];
      EXPECT_NE(log[w].find(expected), std::string::npos) << "worker " << w << ":\n" << log[w];
    }
  }
  fs::path dir_;
};

}  // namespace

TEST_F(MultiWorker, TwoWorkersMatchOneWorker) {
  ASSERT_NO_FATAL_FAILURE(run_one("one_device", "single"));
  ASSERT_NO_FATAL_FAILURE(run_one("mirrored", "mirrored"));
  ASSERT_NO_FATAL_FAILURE(run_pair());
  auto ref = io::read_checkpoint_file(path("single.lsckpt"));
  EXPECT_LT(max_diff(ref, io::read_checkpoint_file(path("mirrored.lsckpt"))), 2e-5f);
  EXPECT_FALSE(fs::exists(path("w1.lsckpt")));  // only the chief writes
  EXPECT_LT(max_diff(ref, io::read_checkpoint_file(path("w0.lsckpt"))), 2e-5f);
  // The chief prints the JSON line (replicas, workers) with the single worker's loss.
  std::string log0 = read_file(path("w0.log")), log1 = read_file(path("w1.log")),
              logs = read_file(path("single.log"));
  EXPECT_NE(log0.find("\"replicas\": 2, \"workers\": 2"), std::string::npos) << log0;
  EXPECT_EQ(log1.find("\"replicas\""), std::string::npos) << log1;
  EXPECT_NEAR(json_number(log0, "loss"), json_number(logs, "loss"), 1e-5);
  // evaluate: each worker takes its rows of every batch; the sums over workers give the
  // single worker's value.
  EXPECT_NEAR(json_number(log0, "eval_loss"), json_number(logs, "eval_loss"), 1e-5);
  EXPECT_NEAR(json_number(log0, "eval_accuracy"), json_number(logs, "eval_accuracy"), 1e-6);
}

// XlaStrategy across workers (lockstep/distribute/xla_strategy.h): 2 worker processes, each
// with its own PJRT client of 1 or 2 CPU-plugin devices, the devices' gradient mean inside each
// worker's program and the workers' sum by Gloo between the step's two executables, match one
// replica on the xla backend with the same global batch (16 rows: 2 x 8, 2 x 2 x 4), 6 steps x
// 2 epochs. And the cpu backend's single replica, within the backends' difference.
// Skips the test without the xla build or the PJRT CPU plugin (and under the sanitizers: the
// plugin is not instrumented), as the XlaStrategy tests do.
#if !defined(LOCKSTEP_XLA) || defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define XLA_PLUGIN_OR_SKIP() \
  GTEST_SKIP() << "needs the xla build and the PJRT CPU plugin (not under the sanitizers)"
#else
#define XLA_PLUGIN_OR_SKIP()                                                                    \
  do {                                                                                          \
    Proc p = spawn({"--strategy", "one_device", "--xla-devices", "1", "--epochs", "1", "--out", \
                    path("probe.lsckpt")},                                                      \
                   "", path("probe.log"));                                                      \
    if (wait_for(p, 120) != 0 && read_file(p.log).find("PJRT") != std::string::npos)            \
      GTEST_SKIP() << "no PJRT CPU plugin (run scripts/setup_xla.sh): " << read_file(p.log);    \
  } while (0)
#endif

TEST_F(MultiWorker, XlaStrategyTwoWorkersMatchOneReplica) {
  XLA_PLUGIN_OR_SKIP();
  ASSERT_NO_FATAL_FAILURE(run_one("one_device", "single"));
  ASSERT_NO_FATAL_FAILURE(run_one("one_device", "xla", {"--xla-devices", "1"}));
  ASSERT_NO_FATAL_FAILURE(run_pair({"--xla-devices", "1"}));
  fs::rename(path("w0.lsckpt"), path("w0d1.lsckpt"));
  const std::string log_d1 = read_file(path("w0.log"));
  ASSERT_NO_FATAL_FAILURE(run_pair({"--xla-devices", "2"}));
  const std::string log_d2 = read_file(path("w0.log"));
  EXPECT_FALSE(fs::exists(path("w1.lsckpt")));  // only the chief writes
  auto xla = io::read_checkpoint_file(path("xla.lsckpt"));
  const float d1 = max_diff(xla, io::read_checkpoint_file(path("w0d1.lsckpt")));
  const float d2 = max_diff(xla, io::read_checkpoint_file(path("w0.lsckpt")));
  const float cpu = max_diff(xla, io::read_checkpoint_file(path("single.lsckpt")));
  std::printf(
      "[ xla workers ] 1 replica vs 2 workers x 1 device: max weight difference %g, "
      "x 2 devices: %g; xla vs cpu 1 replica: %g\n",
      double(d1), double(d2), double(cpu));
  // (measured: 7e-8 and 9e-8, the f32 rounding of the sums' different order; 1.5e-6 vs cpu)
  EXPECT_LT(d1, 1e-6f);
  EXPECT_LT(d2, 1e-6f);
  EXPECT_LT(cpu, 2e-5f);
  EXPECT_NE(log_d1.find("\"replicas\": 2, \"workers\": 2"), std::string::npos) << log_d1;
  EXPECT_NE(log_d2.find("\"replicas\": 4, \"workers\": 2"), std::string::npos) << log_d2;
  const std::string logx = read_file(path("xla.log"));
  EXPECT_NEAR(json_number(log_d2, "loss"), json_number(logx, "loss"), 1e-5);
  EXPECT_NEAR(json_number(log_d2, "eval_loss"), json_number(logx, "eval_loss"), 1e-5);
  EXPECT_NEAR(json_number(log_d2, "eval_accuracy"), json_number(logx, "eval_accuracy"), 1e-6);
}

// Synchronized BatchNormalization under XlaStrategy across workers: its in-program sum would
// cover one worker's devices only, so both workers fail at the compile, naming it.
TEST_F(MultiWorker, XlaStrategyAcrossWorkersRefusesSynchronizedBatchNorm) {
  XLA_PLUGIN_OR_SKIP();
  const std::vector<std::string> flags[2] = {{"--xla-devices", "2", "--sync-bn"},
                                             {"--xla-devices", "2", "--sync-bn"}};
  expect_both_fail_naming(flags,
                          "(synchronized BatchNormalization) in a step that all-reduces "
                          "its gradients across workers on the host");
}

// BatchNormalization(synchronized=true): two workers with B/2 each normalise with the
// statistics of the whole global batch, so they match one worker with B (plain BN).
TEST_F(MultiWorker, SynchronizedBatchNormMatchesOneWorker) {
  ASSERT_NO_FATAL_FAILURE(run_one("one_device", "single", {"--sync-bn"}));
  ASSERT_NO_FATAL_FAILURE(run_pair({"--sync-bn"}));
  auto ref = io::read_checkpoint_file(path("single.lsckpt"));
  EXPECT_LT(max_diff(ref, io::read_checkpoint_file(path("w0.lsckpt"))), 5e-5f);
}

// fit(Dataset) under MultiWorkerMirroredStrategy shards the dataset itself (as Keras): each
// worker steps on half of every global batch, and the weights match one worker's.
TEST_F(MultiWorker, FitDatasetIsShardedAcrossWorkers) {
  ASSERT_NO_FATAL_FAILURE(run_one("one_device", "single", {"--dataset"}));
  ASSERT_NO_FATAL_FAILURE(run_pair({"--dataset"}));
  // 96 samples x 2 epochs: all on one worker, half on each of two.
  EXPECT_NE(read_file(path("single.log")).find("worker 0 trained on 192 samples"),
            std::string::npos)
      << read_file(path("single.log"));
  EXPECT_NE(read_file(path("w0.log")).find("worker 0 trained on 96 samples"), std::string::npos)
      << read_file(path("w0.log"));
  EXPECT_NE(read_file(path("w1.log")).find("worker 1 trained on 96 samples"), std::string::npos)
      << read_file(path("w1.log"));
  auto ref = io::read_checkpoint_file(path("single.lsckpt"));
  EXPECT_LT(max_diff(ref, io::read_checkpoint_file(path("w0.lsckpt"))), 2e-5f);
  // evaluate(Dataset) shards too; the summed metrics equal one worker's.
  std::string log0 = read_file(path("w0.log")), logs = read_file(path("single.log"));
  EXPECT_NEAR(json_number(log0, "eval_loss"), json_number(logs, "eval_loss"), 1e-5);
  EXPECT_NEAR(json_number(log0, "eval_accuracy"), json_number(logs, "eval_accuracy"), 1e-6);
}

// A NaN sample on one worker: both workers stop on the same step (the bad-replica count rides
// on the gradient all-reduce), exit normally, and neither waits for the other.
TEST_F(MultiWorker, NanOnOneWorkerStopsBothOnTheSameStep) {
  ASSERT_NO_FATAL_FAILURE(run_pair({"--nan-sample", "40"}, 60));
  auto stop_line = [](const std::string& log) {
    const size_t at = log.find("loss became");
    return at == std::string::npos ? std::string() : log.substr(at, log.find('\n', at) - at);
  };
  const std::string s0 = stop_line(read_file(path("w0.log"))),
                    s1 = stop_line(read_file(path("w1.log")));
  EXPECT_NE(s0.find("on 1 of 2 replicas"), std::string::npos) << read_file(path("w0.log"));
  EXPECT_EQ(s0, s1);  // same epoch and step on both workers
}

// steps_per_execution: each worker stages its shares of 4 global batches and runs them inside
// its program, the gradient all-reduce still every step: the weights of 1 step per execution,
// bit for bit (arrays with a tail batch, and a Dataset), and a NaN stops both workers on the
// step where one step per execution stops.
TEST_F(MultiWorker, StepsPerExecutionMatchesOneStepPerExecution) {
  // Arrays: 100 samples in global batches of 16, 6 full steps and a tail of 4 an epoch. A
  // Dataset: 96 samples (a distributed Dataset needs whole global batches), 6 steps.
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{}, std::vector<std::string>{"--dataset"}}) {
    std::vector<std::string> flags{"--samples", extra.empty() ? "100" : "96"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    ASSERT_NO_FATAL_FAILURE(run_pair(flags));
    fs::rename(path("w0.lsckpt"), path("one.lsckpt"));
    flags.insert(flags.end(), {"--steps-per-execution", "4"});
    ASSERT_NO_FATAL_FAILURE(run_pair(flags));
    EXPECT_EQ(max_diff(io::read_checkpoint_file(path("one.lsckpt")),
                       io::read_checkpoint_file(path("w0.lsckpt"))),
              0.f)
        << (extra.empty() ? "arrays" : "dataset");
  }
  auto stop_line = [&](const std::string& name) {
    const std::string log = read_file(path(name));
    const size_t at = log.find("loss became");
    return at == std::string::npos ? std::string() : log.substr(at, log.find('\n', at) - at);
  };
  ASSERT_NO_FATAL_FAILURE(run_pair({"--nan-sample", "40"}, 60));
  const std::string one = stop_line("w0.log");
  ASSERT_NE(one.find("on 1 of 2 replicas"), std::string::npos) << read_file(path("w0.log"));
  ASSERT_NO_FATAL_FAILURE(run_pair({"--nan-sample", "40", "--steps-per-execution", "4"}, 60));
  EXPECT_EQ(stop_line("w0.log"), one);
  EXPECT_EQ(stop_line("w1.log"), one);
}

TEST_F(MultiWorker, KilledWorkerIsNamedAndBackupResumes) {
  int port = free_port();
  std::string backup = path("backup");
  std::vector<std::string> args = {"--strategy",   "multi_worker", "--epochs",        "3",
                                   "--backup-dir", backup,         "--step-delay-ms", "60",
                                   "--timeout-ms", "5000"};
  auto with_out = [&](std::vector<std::string> a, const std::string& out) {
    a.push_back("--out");
    a.push_back(out);
    return a;
  };
  Proc w0 = spawn(with_out(args, path("r0.lsckpt")), tf_config(port, 0), path("k0.log"));
  Proc w1 = spawn(with_out(args, path("r1.lsckpt")), tf_config(port, 1), path("k1.log"));
  // Wait until a backup exists (training is under way), then kill worker 1.
  for (int i = 0; i < 600 && !fs::exists(backup + "/checkpoint.lsckpt"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(fs::exists(backup + "/checkpoint.lsckpt")) << read_file(w0.log);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  kill(w1.pid, SIGKILL);
  wait_for(w1, 10);
  auto t0 = std::chrono::steady_clock::now();
  int rc = wait_for(w0, 90);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string log0 = read_file(w0.log);
  EXPECT_NE(rc, 0) << log0;
  EXPECT_NE(rc, -1) << "the surviving worker hung: " << log0;
  EXPECT_LT(took, 90.0);  // hang guard; the outcome is the error naming worker 1
  std::printf("surviving worker said: %s", log0.c_str());
  EXPECT_TRUE(log0.find("worker 1") != std::string::npos ||
              log0.find("rank 1") != std::string::npos ||
              log0.find(std::to_string(port + 1)) != std::string::npos)
      << "the error should name the lost worker: " << log0;
  ASSERT_TRUE(fs::exists(backup + "/checkpoint.lsckpt"));

  // Rerun: resumes from the backup and ends where an uninterrupted run ends.
  port = free_port();
  Proc r0 = spawn(with_out(args, path("r0.lsckpt")), tf_config(port, 0), path("r0.log"));
  Proc r1 = spawn(with_out(args, path("r1.lsckpt")), tf_config(port, 1), path("r1.log"));
  ASSERT_EQ(wait_for(r0, 120), 0) << read_file(path("r0.log"));
  ASSERT_EQ(wait_for(r1, 120), 0) << read_file(path("r1.log"));
  EXPECT_NE(read_file(path("r0.log")).find("resuming"), std::string::npos);
  Proc ref = spawn({"--strategy", "one_device", "--epochs", "3", "--out", path("ref.lsckpt")}, "",
                   path("ref.log"));
  ASSERT_EQ(wait_for(ref, 120), 0) << read_file(path("ref.log"));
  EXPECT_LT(max_diff(io::read_checkpoint_file(path("ref.lsckpt")),
                     io::read_checkpoint_file(path("r0.lsckpt"))),
            2e-5f);
  EXPECT_FALSE(fs::exists(backup + "/checkpoint.lsckpt"));
}

// Graceful preemption across workers (lockstep/trainers/preemption.h): SIGTERM to worker 0 alone,
// mid-epoch; the workers agree after every step, so both stop after the same step with exit
// status 75 (worker 1 says another worker was signalled), the chief writes the backup, and the
// rerun ends with the uninterrupted pair's weights.
TEST_F(MultiWorker, SigtermToOneWorkerStopsBothAfterTheSameStepAndTheRerunResumes) {
  ASSERT_NO_FATAL_FAILURE(run_pair({"--deterministic"}));
  fs::rename(path("w0.lsckpt"), path("uninterrupted.lsckpt"));
  const std::string backup = path("backup");
  std::vector<std::string> args = {"--strategy",   "multi_worker", "--deterministic",
                                   "--backup-dir", backup,         "--backup-freq",
                                   "epoch",        "--out",        path("w0.lsckpt")};
  int port = free_port();
  std::vector<std::string> signalled = args;
  signalled.insert(signalled.end(), {"--wait-for-signal-at", "8"});  // epoch 2, step 2
  Proc w0 = spawn(signalled, tf_config(port, 0), path("p0.log"));
  Proc w1 = spawn(args, tf_config(port, 1), path("p1.log"));
  bool waiting = false;
  for (int i = 0; i < 6000 && !waiting; ++i) {  // a generous deadline, polled
    waiting = read_file(w0.log).find("waiting for a signal after step 8") != std::string::npos;
    if (!waiting) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(waiting) << read_file(w0.log) << read_file(w1.log);
  kill(w0.pid, SIGTERM);
  const int rc0 = wait_for(w0, 60), rc1 = wait_for(w1, 60);
  const std::string log0 = read_file(w0.log), log1 = read_file(w1.log);
  EXPECT_EQ(rc0, kPreemptedExitCode) << log0;
  EXPECT_EQ(rc1, kPreemptedExitCode) << log1;
  EXPECT_NE(log0.find("stopped by SIGTERM after step 2 of epoch 2"), std::string::npos) << log0;
  EXPECT_NE(log1.find("stopped by a preemption signal to another worker after step 2 of epoch 2"),
            std::string::npos)
      << log1;
  ASSERT_TRUE(fs::exists(backup + "/checkpoint.lsckpt"));
  port = free_port();
  Proc r0 = spawn(args, tf_config(port, 0), path("q0.log"));
  Proc r1 = spawn(args, tf_config(port, 1), path("q1.log"));
  ASSERT_EQ(wait_for(r0, 120), 0) << read_file(path("q0.log"));
  ASSERT_EQ(wait_for(r1, 120), 0) << read_file(path("q1.log"));
  EXPECT_NE(read_file(path("q0.log")).find("at epoch 2, step 2"), std::string::npos)
      << read_file(path("q0.log"));
  EXPECT_EQ(max_diff(io::read_checkpoint_file(path("uninterrupted.lsckpt")),
                     io::read_checkpoint_file(path("w0.lsckpt"))),
            0.f);
}

// Workers that disagree (issue 12): a different model crashed one worker in Gloo (SIGABRT), a
// different global batch trained "successfully", a different replica count left one worker
// waiting for the whole timeout. Now every worker fails within seconds, naming the field.
TEST_F(MultiWorker, DifferentModelsFailEveryWorkerNamingTheField) {
  const std::vector<std::string> flags[2] = {{"--units", "16"}, {"--units", "32"}};
  expect_both_fail_naming(flags, "units: worker 0 has 16, worker 1 has 32");
}

TEST_F(MultiWorker, DifferentBatchSizesFailEveryWorkerNamingTheField) {
  // 96 samples: two batches per epoch either way, so the step-count check cannot catch it.
  const std::vector<std::string> flags[2] = {{"--batch", "64"}, {"--batch", "66"}};
  expect_both_fail_naming(
      flags, "workers disagree on global_batch_size: worker 0 has 64, worker 1 has 66");
}

// 96 and 95 samples in batches of 16: six steps an epoch on both, so the step count agreed,
// and worker 1 trained on 94 samples where worker 0 trained on 96 (issue 25).
TEST_F(MultiWorker, DifferentSampleCountsFailEveryWorkerNamingBothCounts) {
  const std::vector<std::string> flags[2] = {{"--samples", "96"}, {"--samples", "95"}};
  expect_both_fail_naming(flags, "workers disagree on samples: worker 0 has 96, worker 1 has 95");
}

TEST_F(MultiWorker, DifferentReplicaCountsFailEveryWorkerNamingTheField) {
  const std::vector<std::string> flags[2] = {{"--replicas-per-worker", "2", "--batch", "6"},
                                             {"--replicas-per-worker", "1", "--batch", "6"}};
  expect_both_fail_naming(
      flags, "workers disagree on replicas_per_worker: worker 0 has 2, worker 1 has 1");
}

// Op determinism (lockstep/core/config.h), with a RandomFlip and a Dropout in the model: two
// workers x 1 replica end with the bytes of two in-process replicas (the random ops follow the
// example's global row, each replica sums the same rows, and a 2-way all-reduce does not depend
// on its order); one replica x B agrees to rounding only (the batch sums round differently).
TEST_F(MultiWorker, DeterministicTwoWorkersMatchTwoReplicasByteForByte) {
  // One thread per replica everywhere (a mirrored replica gets one of the process's threads;
  // results are bit-identical for a fixed thread count per replica, not across thread counts).
  struct OneThread {  // the workers inherit this process's environment
    std::optional<std::string> saved;
    OneThread() {
      if (const char* v = std::getenv("OMP_NUM_THREADS")) saved = v;
      ::setenv("OMP_NUM_THREADS", "1", 1);
    }
    ~OneThread() {
      if (saved)
        ::setenv("OMP_NUM_THREADS", saved->c_str(), 1);
      else
        ::unsetenv("OMP_NUM_THREADS");
    }
  } one_thread;
  ASSERT_NO_FATAL_FAILURE(run_one("one_device", "single", {"--deterministic"}));
  ASSERT_NO_FATAL_FAILURE(run_one("mirrored", "mirrored", {"--deterministic"}));
  ASSERT_NO_FATAL_FAILURE(run_pair({"--deterministic"}));
  auto mirrored = io::read_checkpoint_file(path("mirrored.lsckpt"));
  auto workers = io::read_checkpoint_file(path("w0.lsckpt"));
  ASSERT_EQ(mirrored.tensors.size(), workers.tensors.size());
  std::printf("[ determinism ] mirrored vs 2 workers: max difference %g\n",
              double(max_diff(mirrored, workers)));
  for (size_t i = 0; i < mirrored.tensors.size(); ++i) {
    const Tensor &a = mirrored.tensors[i].value, &b = workers.tensors[i].value;
    ASSERT_EQ(a.nbytes(), b.nbytes());
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << mirrored.tensors[i].name;
  }
  EXPECT_LT(max_diff(io::read_checkpoint_file(path("single.lsckpt")), mirrored), 2e-5f);
}

// StrategyOptions::all_reduce_dtype = bf16 (gradients cross workers as bf16, summed in f32): the
// option takes effect (the weights differ from the f32 all-reduce's), and two workers train to
// the same loss (1.07285 and 1.07315 here). The weights drift further than one rounding: Adam's
// first steps move by lr * sign(g), and a gradient whose two halves nearly cancel can change sign
// when they are rounded to bf16 before the sum (0.0225 here, against the 0.12 a weight can move in
// 12 steps).
// A large gradient bucket (a hidden Dense layer of 65,536 units) with bf16 gradients over Gloo:
// it used to stall (gloo's unbound-buffer collectives crawl once a classic algorithm has run on
// the context, and fit runs one every step); two workers now finish like the f32 all-reduce.
TEST_F(MultiWorker, Bf16GradientAllReduceWithALargeBucket) {
  ASSERT_NO_FATAL_FAILURE(run_pair(
      {"--all-reduce-dtype", "bfloat16", "--units", "65536", "--timeout-ms", "20000"}, 60));
}

TEST_F(MultiWorker, Bf16GradientAllReduceTrainsLikeTheF32One) {
  ASSERT_NO_FATAL_FAILURE(run_pair());
  fs::rename(path("w0.lsckpt"), path("f32.lsckpt"));
  const double f32_loss = json_number(read_file(path("w0.log")), "loss");
  ASSERT_NO_FATAL_FAILURE(run_pair({"--all-reduce-dtype", "bfloat16"}));
  const double bf16_loss = json_number(read_file(path("w0.log")), "loss");
  const float d = max_diff(io::read_checkpoint_file(path("f32.lsckpt")),
                           io::read_checkpoint_file(path("w0.lsckpt")));
  EXPECT_GT(d, 0.f);
  EXPECT_LT(d, 0.06f);
  EXPECT_NEAR(bf16_loss, f32_loss, 5e-3 * f32_loss) << "f32 " << f32_loss << ", bf16 " << bf16_loss;
}

TEST_F(MultiWorker, DifferentAllReduceDtypesFailEveryWorkerNamingTheField) {
  const std::vector<std::string> flags[2] = {{"--all-reduce-dtype", "bfloat16"}, {}};
  expect_both_fail_naming(flags,
                          "workers disagree on all_reduce_dtype: worker 0 has \"bfloat16\", "
                          "worker 1 has \"float32\"");
}

// Op determinism with gradient shards (LOCKSTEP_DETERMINISTIC_SHARDS, lockstep/core/config.h):
// the global batch is cut into S fixed shards summed in one fixed order, so 1 replica x B, 2
// in-process replicas x B/2 and 2 workers x B/2 end with the same bytes (one thread per shard
// everywhere), for S = 2 (a shard per replica) and S = 4 (2 per replica, 4 on one).
TEST_F(MultiWorker, DeterministicShardsMakeOneReplicaMatchTwoWorkersByteForByte) {
  struct Env {  // the workers inherit this process's environment
    std::string name;
    std::optional<std::string> saved;
    Env(std::string n, const std::string& value) : name(std::move(n)) {
      if (const char* v = std::getenv(name.c_str())) saved = v;
      ::setenv(name.c_str(), value.c_str(), 1);
    }
    ~Env() {
      if (saved)
        ::setenv(name.c_str(), saved->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
  };
  Env one_thread("OMP_NUM_THREADS", "1");
  for (const std::string shards : {"2", "4"}) {
    SCOPED_TRACE("shards " + shards);
    Env env("LOCKSTEP_DETERMINISTIC_SHARDS", shards);
    const std::vector<std::string> flags{"--deterministic", "--samples", "90"};  // a 10-row tail
    ASSERT_NO_FATAL_FAILURE(run_one("one_device", "single", flags));
    ASSERT_NO_FATAL_FAILURE(run_one("mirrored", "mirrored", flags));
    ASSERT_NO_FATAL_FAILURE(run_pair(flags));
    auto single = io::read_checkpoint_file(path("single.lsckpt"));
    for (const std::string other : {"mirrored", "w0"}) {
      auto run = io::read_checkpoint_file(path(other + ".lsckpt"));
      ASSERT_EQ(single.tensors.size(), run.tensors.size());
      std::printf("[ determinism ] S=%s, 1 replica vs %s: max difference %g\n", shards.c_str(),
                  other.c_str(), double(max_diff(single, run)));
      for (size_t i = 0; i < single.tensors.size(); ++i) {
        const Tensor &a = single.tensors[i].value, &b = run.tensors[i].value;
        ASSERT_EQ(a.nbytes(), b.nbytes());
        EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0)
            << other << ": " << single.tensors[i].name;
      }
    }
  }
}
