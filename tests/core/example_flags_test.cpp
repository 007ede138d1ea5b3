// The examples' command lines: numbers that overflow, carry junk or make no sense are refused
// with a message naming the flag and exit status 2 (never wrapped to a valid-looking value,
// never an uncaught exception); `lockstep export-image-folder` names its bad flags too.
// Runs the example binaries next to the test binary; skips those not built.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <thread>

namespace {

std::string binary(const std::string& name) {
  const std::string path = std::string(LOCKSTEP_BINARY_DIR) + "/bin/" + name;
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? path : "";
}

struct RunResult {
  int status = -1;  // exit status, or 128 + signal
  std::string output;
};

RunResult run(const std::string& command) {
  RunResult r;
  FILE* p = ::popen((command + " 2>&1 </dev/null").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t k;
  while ((k = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, k);
  const int s = ::pclose(p);
  r.status = WIFEXITED(s) ? WEXITSTATUS(s) : 128 + WTERMSIG(s);
  return r;
}

// Runs `name args` (bounded to 60 s) and expects exit status 2 and `flag` in the message.
void expect_refused(const std::string& name, const std::string& args, const std::string& flag,
                    int status = 2) {
  const std::string bin = binary(name);
  if (bin.empty()) {
    std::printf("[  NOTE    ] %s not built; skipped '%s'\n", name.c_str(), args.c_str());
    return;
  }
  const RunResult r = run("timeout 60 " + bin + " " + args);
  EXPECT_EQ(r.status, status) << name << " " << args << "\n" << r.output;
  EXPECT_NE(r.output.find(flag), std::string::npos) << name << " " << args << "\n" << r.output;
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
}

// Data directories that do not exist: a flag that is accepted gets as far as loading data and
// fails there (status 1), so only a refused flag gives status 2.
const std::string kNoData = " --data-dir /nonexistent/lockstep-flags-test";

}  // namespace

TEST(ExampleFlags, FashionMnistRefusesNumbersThatDoNotFit) {
  if (binary("fashion_mnist").empty()) GTEST_SKIP() << "bin/fashion_mnist not built";
  expect_refused("fashion_mnist", "--batch-size 4294967297" + kNoData, "--batch-size");
  expect_refused("fashion_mnist", "--epochs 4294967297" + kNoData, "--epochs");
  expect_refused("fashion_mnist", "--batch-size 1e12" + kNoData, "--batch-size");
  expect_refused("fashion_mnist", "--batch-size 64x" + kNoData, "--batch-size");
  expect_refused("fashion_mnist", "--steps-per-execution 0" + kNoData, "--steps-per-execution");
  expect_refused("fashion_mnist", "--threads 100000" + kNoData, "--threads");
  expect_refused("fashion_mnist", "--seed -1" + kNoData, "--seed");
}

TEST(ExampleFlags, FlowersRefusesNumbersThatDoNotFit) {
  if (binary("flowers").empty()) GTEST_SKIP() << "bin/flowers not built";
  const std::string out = " --out-dir /tmp/lockstep-flags-test-flowers";
  expect_refused("flowers", "--batch-size 1e12" + kNoData + out, "--batch-size");
  expect_refused("flowers", "--batch-size 4294967297" + kNoData + out, "--batch-size");
  expect_refused("flowers", "--epochs 4294967297" + kNoData + out, "--epochs");
  expect_refused("flowers", "--validation-split nan" + kNoData + out, "--validation-split");
  expect_refused("flowers", "--image-size 2.5" + kNoData + out, "--image-size");
  expect_refused("flowers", "--threads 100000" + kNoData + out, "--threads");
  const RunResult r =
      binary("flowers").empty()
          ? RunResult{}
          : run("timeout 60 " + binary("flowers") + " --batch-size 1e12" + kNoData + out);
  EXPECT_EQ(r.output.find("-2147483648"), std::string::npos) << r.output;
}

TEST(ExampleFlags, DistributedTrainAndCollectiveWorkerRefuseNonNumbersWithoutAborting) {
  if (binary("distributed_train").empty() && binary("collective_worker").empty())
    GTEST_SKIP() << "bin/distributed_train and bin/collective_worker not built";
  expect_refused("distributed_train", "--strategy one_device --epochs abc", "--epochs");
  expect_refused("distributed_train", "--strategy one_device --batch 4294967297", "--batch");
  expect_refused("distributed_train", "--strategy one_device --timeout-ms 1e99", "--timeout-ms");
  expect_refused("collective_worker", "--timeout-ms abc", "--timeout-ms");
  expect_refused("collective_worker", "--count -1", "--count");
  expect_refused("collective_worker", "--repeat-seconds inf", "--repeat-seconds");
}

// The `lockstep` command exits 1 on any error it reports (flags included).
TEST(ExampleFlags, LockstepCliNamesItsBadFlags) {
  if (binary("lockstep").empty()) GTEST_SKIP() << "bin/lockstep not built";
  const std::string args =
      " --out /tmp/lockstep-flags-test-cli --images /nonexistent/i.gz "
      "--labels /nonexistent/l.gz";
  expect_refused("lockstep", "export-image-folder --size 4294967297" + args, "--size", 1);
  expect_refused("lockstep", "export-image-folder --quality 95.5" + args, "--quality", 1);
  expect_refused("lockstep", "export-image-folder --limit-per-class 1e3" + args,
                 "--limit-per-class", 1);
}
