// Two workers in two network namespaces joined by a veth pair (192.0.2.1 and 192.0.2.2, the
// TEST-NET-1 range, only inside those namespaces): a real two-host Gloo all-reduce, and a
// partition (link down) that makes the waiting worker fail at its timeout naming the
// other. Skips with the reason when namespaces cannot be created (not root / no
// CAP_SYS_ADMIN). The namespaces are deleted at the end.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "distribute/collective_test_util.h"

namespace lt = lockstep::distribute::testing;

#ifdef LOCKSTEP_HAVE_GLOO
namespace {

class NetnsPair {
 public:
  NetnsPair() {
    const std::string id = std::to_string(::getpid());
    ns_[0] = "lscollA" + id;
    ns_[1] = "lscollB" + id;
    veth_[0] = "lsva" + id;
    veth_[1] = "lsvb" + id;
  }
  ~NetnsPair() { teardown(); }

  // Returns "" or the reason it could not be set up.
  std::string setup() {
    std::string out;
    if (lt::run_command("command -v ip", &out) != 0) return "the ip command (iproute2) is missing";
    if (lt::run_command("ip netns add " + ns_[0], &out) != 0) {
      return "cannot create a network namespace (needs root / CAP_SYS_ADMIN): " + out;
    }
    created_ = true;
    const std::string steps[] = {
        "ip netns add " + ns_[1],
        "ip link add " + veth_[0] + " type veth peer name " + veth_[1],
        "ip link set " + veth_[0] + " netns " + ns_[0],
        "ip link set " + veth_[1] + " netns " + ns_[1],
        "ip -n " + ns_[0] + " addr add 192.0.2.1/24 dev " + veth_[0],
        "ip -n " + ns_[1] + " addr add 192.0.2.2/24 dev " + veth_[1],
        "ip -n " + ns_[0] + " link set " + veth_[0] + " up",
        "ip -n " + ns_[1] + " link set " + veth_[1] + " up",
        "ip -n " + ns_[0] + " link set lo up",
        "ip -n " + ns_[1] + " link set lo up",
    };
    for (const auto& step : steps) {
      if (lt::run_command(step, &out) != 0) return "'" + step + "' failed: " + out;
    }
    return "";
  }

  void teardown() {
    if (!created_) return;
    lt::run_command("ip netns del " + ns_[0]);
    lt::run_command("ip netns del " + ns_[1]);  // takes the veth pair with it
    created_ = false;
  }

  const std::string& ns(int i) const { return ns_[i]; }
  const std::string& veth(int i) const { return veth_[i]; }

 private:
  std::string ns_[2], veth_[2];
  bool created_ = false;
};

// 192.0.2.x is not loopback: the workers prove they belong to the job with a shared token.
const std::string kToken = "netns-test-job-token-5d1f0a9b";

std::string tf_config(int index) {
  return R"('{"cluster":{"worker":["192.0.2.1:29500","192.0.2.2:29501"]},"task":{"type":"worker","index":)" +
         std::to_string(index) + "}}'";
}

}  // namespace

TEST(NetnsCollective, TwoWorkersInTwoNamespacesOverVeth) {
  NetnsPair pair;
  if (const std::string why = pair.setup(); !why.empty()) GTEST_SKIP() << why;
  const std::string worker = lt::collective_worker_path();
  if (worker.empty()) GTEST_SKIP() << "build/bin/collective_worker not built";
  // Both workers run at once (forked); each only sees its own 192.0.2.x address.
  auto results = lt::run_workers(2, [&](int rank, std::string& message) {
    return lt::run_command("timeout 30 ip netns exec " + pair.ns(rank) +
                               " env LOCKSTEP_JOB_TOKEN=" + kToken +
                               " TF_CONFIG=" + tf_config(rank) + " " + worker +
                               " --implementation ring --timeout-ms 10000",
                           &message);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[r].exit_code, 0) << results[r].message;
    EXPECT_NE(results[r].message.find("\"ok\": true"), std::string::npos) << results[r].message;
    EXPECT_NE(results[r].message.find("\"rank\": " + std::to_string(r)), std::string::npos);
    EXPECT_NE(results[r].message.find("\"cluster\": \"TF_CONFIG\""), std::string::npos);
  }
  pair.teardown();
}

TEST(NetnsCollective, PartitionedWorkerIsNamedWithinTimeout) {
  NetnsPair pair;
  if (const std::string why = pair.setup(); !why.empty()) GTEST_SKIP() << why;
  const std::string worker = lt::collective_worker_path();
  if (worker.empty()) GTEST_SKIP() << "build/bin/collective_worker not built";
  // Worker 1 cannot be reached at all (its link is down before it starts): worker 0 must fail
  // at connect() within its 1.5 s timeout, naming worker 1 and its address.
  std::string out;
  ASSERT_EQ(lt::run_command("ip -n " + pair.ns(1) + " link set " + pair.veth(1) + " down", &out), 0)
      << out;
  const auto start = std::chrono::steady_clock::now();
  std::string output;
  const int rc = lt::run_command(
      "timeout 90 ip netns exec " + pair.ns(0) + " env LOCKSTEP_JOB_TOKEN=" + kToken +
          " TF_CONFIG=" + tf_config(0) + " " + worker + " --timeout-ms 1500",
      &output);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(rc, 1) << output;
  EXPECT_NE(output.find("worker 1 (192.0.2.2:29501) never arrived"), std::string::npos) << output;
  EXPECT_NE(output.find("rendezvous store at 192.0.2.1:29500"), std::string::npos) << output;
  EXPECT_LT(seconds, 90.0);  // hang guard; the outcome is the message
  pair.teardown();
}
TEST(NetnsCollective, LinkCutMidAllreduceIsNamedWithinTimeout) {
  NetnsPair pair;
  if (const std::string why = pair.setup(); !why.empty()) GTEST_SKIP() << why;
  const std::string worker = lt::collective_worker_path();
  if (worker.empty()) GTEST_SKIP() << "build/bin/collective_worker not built";
  // Both workers all-reduce in a loop; once both are past connect() (worker 1's link has carried
  // several all-reduces' bytes), worker 1's link goes down (a partition: both processes stay
  // alive). Each must fail with its 5 s timeout naming the other. Waiting for the traffic, not a
  // fixed second, keeps a slow start-up on a busy machine from being cut at connect().
  auto results = lt::run_workers(3, [&](int rank, std::string& message) {
    if (rank == 2) {  // the network cutter
      const std::string rx = "ip netns exec " + pair.ns(1) + " cat /sys/class/net/" + pair.veth(1) +
                             "/statistics/rx_bytes";
      for (int i = 0; i < 600; ++i) {  // 60 s at most
        std::string bytes;
        if (lt::run_command(rx, &bytes) == 0 && std::atoll(bytes.c_str()) > (8 << 20)) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      return lt::run_command("ip -n " + pair.ns(1) + " link set " + pair.veth(1) + " down",
                             &message);
    }
    return lt::run_command("timeout 110 ip netns exec " + pair.ns(rank) +
                               " env LOCKSTEP_JOB_TOKEN=" + kToken +
                               " TF_CONFIG=" + tf_config(rank) + " " + worker +
                               " --count 100000 --timeout-ms 5000 --repeat-seconds 100",
                           &message);
  });
  EXPECT_EQ(results[2].exit_code, 0) << results[2].message;
  EXPECT_EQ(results[0].exit_code, 1) << results[0].message;
  EXPECT_EQ(results[1].exit_code, 1) << results[1].message;
  EXPECT_NE(results[0].message.find("worker 1 (192.0.2.2:29501) did not answer within 5 s"),
            std::string::npos)
      << results[0].message;
  EXPECT_NE(results[1].message.find("worker 0 (192.0.2.1:29500)"), std::string::npos)
      << results[1].message;
  // Hang guards only (the workers would all-reduce for 100 s if the cut went unnoticed).
  EXPECT_LT(results[0].seconds, 95.0) << results[0].message;
  EXPECT_LT(results[1].seconds, 95.0) << results[1].message;
  std::printf("worker 0: %sworker 1: %s", results[0].message.c_str(), results[1].message.c_str());
  pair.teardown();
}
#else
TEST(NetnsCollective, TwoWorkersInTwoNamespacesOverVeth) {
  GTEST_SKIP() << "Lockstep was built without Gloo (install libgloo-dev, reconfigure)";
}
TEST(NetnsCollective, PartitionedWorkerIsNamedWithinTimeout) {
  GTEST_SKIP() << "Lockstep was built without Gloo (install libgloo-dev, reconfigure)";
}
TEST(NetnsCollective, LinkCutMidAllreduceIsNamedWithinTimeout) {
  GTEST_SKIP() << "Lockstep was built without Gloo (install libgloo-dev, reconfigure)";
}
#endif
