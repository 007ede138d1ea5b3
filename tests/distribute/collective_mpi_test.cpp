// OpenMPI backend: two ranks launched by mpirun run the collective_worker example (real
// all-reduce, bucket, broadcast, all-gather checks). Skips with the reason when mpirun or the
// example is missing.
#include <gtest/gtest.h>

#include <chrono>

#include "distribute/collective_test_util.h"

namespace lt = lockstep::distribute::testing;

namespace {
void run_under_mpirun(const std::string& worker_flags, const std::string& backend) {
  if (lt::run_command("command -v mpirun") != 0) GTEST_SKIP() << "mpirun not found in PATH";
  const std::string worker = lt::collective_worker_path();
  if (worker.empty()) {
    GTEST_SKIP() << "build/bin/collective_worker not built (cmake --build <dir> --target "
                    "collective_worker)";
  }
  std::string output;
  const int rc = lt::run_command("timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 " +
                                     worker + " --count 300001 " + worker_flags,
                                 &output);
  EXPECT_EQ(rc, 0) << output;
  EXPECT_EQ(lt::count_occurrences(output, "\"ok\": true"), 2) << output;
  EXPECT_EQ(lt::count_occurrences(output, "\"backend\": \"" + backend + "\""), 2) << output;
  EXPECT_EQ(lt::count_occurrences(output, "\"cluster\": \"MPI\""), 2) << output;
}
}  // namespace

#ifdef LOCKSTEP_HAVE_MPI
TEST(MpiCollective, TwoRanksUnderMpirunUseMpiAllreduce) { run_under_mpirun("", "mpi"); }

// A hung rank (alive, stuck between steps) under mpirun: the other rank's collective times out
// after CommunicationOptions.timeout, it says which collective and exits, and mpirun ends the
// job: a non-zero exit well before the outer 60 s guard, never a hang.
TEST(MpiCollective, HungRankEndsTheJobWithinTheTimeout) {
  if (lt::run_command("command -v mpirun") != 0) GTEST_SKIP() << "mpirun not found in PATH";
  const std::string train = std::string(LOCKSTEP_BINARY_DIR) + "/bin/distributed_train";
  if (lt::run_command("test -x " + train) != 0) GTEST_SKIP() << train << " not built";
  const std::string common = " --strategy multi_worker --timeout-ms 2000 --samples 64";
  std::string output;
  const auto t0 = std::chrono::steady_clock::now();
  const int rc =
      lt::run_command("timeout 60 mpirun --allow-run-as-root --oversubscribe -np 1 " + train +
                          common + " : -np 1 " + train + common + " --step-delay-ms 50000",
                      &output);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(rc, 0) << output;
  EXPECT_NE(rc, 124) << "mpirun hung until the 60 s guard\n" << output;
  EXPECT_LT(seconds, 40.0) << output;
  EXPECT_NE(output.find("did not complete within 2.0 s"), std::string::npos) << output;
  EXPECT_NE(output.find("on worker 0"), std::string::npos) << output;
  EXPECT_NE(output.find("worker 1 (the only peer) is hung or lost"), std::string::npos) << output;
}
#else
TEST(MpiCollective, TwoRanksUnderMpirunUseMpiAllreduce) {
  GTEST_SKIP() << "Lockstep was built without OpenMPI (install libopenmpi-dev, reconfigure)";
}
TEST(MpiCollective, HungRankEndsTheJobWithinTheTimeout) {
  GTEST_SKIP() << "Lockstep was built without OpenMPI (install libopenmpi-dev, reconfigure)";
}
#endif

#ifdef LOCKSTEP_HAVE_GLOO
// The MPI environment as a cluster resolver for Gloo: rank/size from mpirun, rendezvous on
// 127.0.0.1 since both ranks share this host.
TEST(MpiCollective, MpirunEnvironmentDrivesGlooToo) {
  run_under_mpirun("--implementation ring", "gloo_ring");
}
#else
TEST(MpiCollective, MpirunEnvironmentDrivesGlooToo) {
  GTEST_SKIP() << "Lockstep was built without Gloo (install libgloo-dev, reconfigure)";
}
#endif
