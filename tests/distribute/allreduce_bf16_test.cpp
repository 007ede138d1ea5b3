// Communicator::allreduce_sum_bf16 (StrategyOptions::all_reduce_dtype = bf16): every rank gets
// bitwise bf16(f32 sum in rank order of the bf16-rounded contributions), on the in-process,
// Gloo (forked workers over loopback) and MPI (mpirun) backends; with two Gloo workers it stays
// within bf16 rounding of the f32 all-reduce and sends half the bytes, counted by the kernel
// (TCP_INFO's tcpi_bytes_sent over the worker's sockets).
#include <gtest/gtest.h>
#include <linux/tcp.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <span>
#include <thread>

#include "distribute/collective_test_util.h"
#include "lockstep/core/dtype.h"
#include "lockstep/distribute/collective.h"
#include "lockstep/distribute/strategy.h"

namespace ld = lockstep::distribute;
using ld::testing::run_workers;
using lockstep::bf16_to_f32;
using lockstep::f32_to_bf16;

namespace {

// Rank r's gradient value i: pseudo-random (splitmix64), of both signs and magnitudes from
// 2^-5 to 2^5, not representable in bf16.
float grad(int rank, size_t i) {
  uint64_t z = uint64_t(rank) * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const float u = float(z >> 40) / float(1 << 24) * 2.f - 1.f;
  return std::ldexp(u, int(i % 11) - 5);
}

// What every rank must hold: the f32 sum in rank order of the bf16-rounded values, rounded.
float want_bf16(int n, size_t i) {
  float s = 0;
  for (int r = 0; r < n; ++r) s += bf16_to_f32(f32_to_bf16(grad(r, i)));
  return bf16_to_f32(f32_to_bf16(s));
}

// Fills a bucket of three buffers (sizes not divisible by 2 or 3) with rank's values.
struct Bucket {
  std::vector<std::vector<float>> parts{std::vector<float>(1001), std::vector<float>(7),
                                        std::vector<float>(20000)};
  explicit Bucket(int rank) {
    size_t i = 0;
    for (auto& p : parts)
      for (float& v : p) v = grad(rank, i++);
  }
  std::vector<ld::FloatBuffer> buffers() {
    std::vector<ld::FloatBuffer> b;
    for (auto& p : parts) b.push_back({p.data(), p.size()});
    return b;
  }
  // "" when every value is bitwise want_bf16(n, i).
  std::string check(int n) const {
    size_t i = 0;
    for (const auto& p : parts)
      for (float v : p) {
        const float w = want_bf16(n, i);
        if (std::memcmp(&v, &w, 4) != 0)
          return "value " + std::to_string(i) + ": got " + std::to_string(v) + ", want " +
                 std::to_string(w);
        ++i;
      }
    return "";
  }
};

ld::ClusterResolver loopback_cluster(int n, int rank, int port0) {
  std::vector<std::string> workers;
  for (int r = 0; r < n; ++r) workers.push_back("127.0.0.1:" + std::to_string(port0 + r));
  return ld::ClusterResolver::make(ld::ClusterResolver::Kind::kTfConfig, n, rank, workers[0],
                                   workers, "127.0.0.1");
}

// Bytes this process's TCP sockets have sent so far (the kernel's count, headers excluded);
// -1 when the kernel does not report it.
int64_t tcp_bytes_sent() {
  int64_t total = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    const int fd = std::atoi(e.path().filename().c_str());
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    struct tcp_info info {};
    socklen_t len = sizeof info;
    if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) continue;
    if (len < offsetof(struct tcp_info, tcpi_bytes_sent) + sizeof(info.tcpi_bytes_sent)) return -1;
    total += int64_t(info.tcpi_bytes_sent);
  }
  return total;
}

TEST(AllreduceBf16, StrategyRejectsAnotherDtypeNamingTheOption) {
  ld::StrategyOptions o;
  o.all_reduce_dtype = lockstep::DType::i32;
  try {
    ld::MirroredStrategy({"cpu:0"}, o);
    FAIL() << "no error";
  } catch (const lockstep::Error& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce_dtype is int32"), std::string::npos)
        << e.what();
  }
}

TEST(AllreduceBf16, InProcessReplicasSumBf16ValuesInF32) {
  constexpr int n = 3;
  auto comms = ld::make_in_process_communicators(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      Bucket b(r);
      auto buffers = b.buffers();
      comms[size_t(r)]->allreduce_sum_bf16(buffers);
      errors[size_t(r)] = b.check(n);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[size_t(r)], "") << "replica " << r;
}

#ifdef LOCKSTEP_HAVE_GLOO
// Three workers tell f32 accumulation from bf16 accumulation (which would round twice).
TEST(AllreduceBf16, GlooThreeWorkersGetTheF32SumOfBf16Values) {
  const int port = ld::testing::free_port();
  auto results = run_workers(3, [&](int rank, std::string& message) {
    auto comm = ld::connect(loopback_cluster(3, rank, port));
    for (int step = 0; step < 2; ++step) {  // the second reuses the staging buffers
      Bucket b(rank);
      auto buffers = b.buffers();
      comm->allreduce_sum_bf16(buffers);
      message = b.check(3);
      if (!message.empty()) return 1;
    }
    comm->close();
    return 0;
  });
  ASSERT_EQ(results.size(), 3u);
  for (int r = 0; r < 3; ++r)
    EXPECT_EQ(results[size_t(r)].exit_code, 0) << "worker " << r << ": " << results[r].message;
}

// Two workers, 4 Mi floats (16 MiB in f32): the bf16 all-reduce is within bf16 rounding of the
// f32 one, and the kernel counts half the bytes sent.
// Back to back, as training issues them: several buckets of an odd size, no barrier between.
TEST(AllreduceBf16, GlooTwoWorkersBackToBack) {
  const int port = ld::testing::free_port();
  auto results = run_workers(
      2,
      [&](int rank, std::string& message) {
        auto comm = ld::connect(loopback_cluster(2, rank, port), {});
        comm->allgather_bytes("fingerprint", 11);
        std::vector<float> w(1000, float(rank));
        comm->broadcast(w.data(), w.size(), 0);
        for (size_t count : {size_t(1199882), size_t(10), size_t(9000000), size_t(77)}) {
          double d[2] = {1, 2};
          comm->allreduce_sum(d, 2);
          std::vector<float> v(count);
          for (size_t i = 0; i < count; ++i) v[i] = grad(rank, i);
          ld::FloatBuffer buffer{v.data(), count};
          comm->allreduce_sum_bf16(std::span<const ld::FloatBuffer>(&buffer, 1));
          for (size_t i = 0; i < count; i += 9973)
            if (v[i] != want_bf16(2, i)) {
              message = "count " + std::to_string(count) + " element " + std::to_string(i);
              return 1;
            }
        }
        comm->close();
        return 0;
      },
      std::chrono::seconds(30));
  ASSERT_EQ(results.size(), 2u);
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(results[size_t(r)].exit_code, 0) << "worker " << r << ": " << results[r].message;
}

TEST(AllreduceBf16, GlooTwoWorkersHalveTheBytesWithinBf16Rounding) {
  const int port = ld::testing::free_port();
  constexpr size_t count = size_t(4) << 20;
  auto results = run_workers(
      2,
      [&](int rank, std::string& message) {
        ld::CommunicationOptions o;
        o.implementation = ld::CollectiveImplementation::kRing;
        auto comm = ld::connect(loopback_cluster(2, rank, port), o);
        std::vector<float> f32(count), b16(count);
        // The counter is the whole machine's: other tests running beside this one (ctest -j)
        // add bytes. Noise only adds, so each all-reduce runs 3 times and the least counts.
        int64_t t0 = 0, t1 = INT64_MAX, t2 = INT64_MAX;
        for (int round = 0; round < 3; ++round) {
          for (size_t i = 0; i < count; ++i) f32[i] = b16[i] = grad(rank, i);
          comm->barrier();
          const int64_t a = tcp_bytes_sent();
          comm->allreduce_sum(f32.data(), count);
          comm->barrier();
          const int64_t b = tcp_bytes_sent();
          ld::FloatBuffer buffer{b16.data(), count};
          comm->allreduce_sum_bf16(std::span<const ld::FloatBuffer>(&buffer, 1));
          comm->barrier();
          const int64_t c = tcp_bytes_sent();
          if (a < 0) t0 = -1;
          t1 = std::min(t1, b - a);
          t2 = std::min(t2, c - b);
        }
        double worst = 0;
        for (size_t i = 0; i < count; ++i) {
          // Three roundings to bf16 (two contributions and the sum), 2^-8 relative each.
          const double bound = std::ldexp(1.0, -8) *
                               (std::fabs(grad(0, i)) + std::fabs(grad(1, i)) + std::fabs(f32[i]));
          worst = std::max(worst, std::fabs(double(b16[i]) - f32[i]) / bound);
        }
        message = "f32 " + std::to_string(t1) + " bytes, bf16 " + std::to_string(t2) +
                  " bytes, worst error / bf16 bound " + std::to_string(worst);
        if (worst > 1.0) return 1;
        if (t0 < 0) return 0;  // the kernel does not count (reported in the message)
        // A float crosses once each way in either algorithm: 4 bytes vs 2 per float, plus
        // the barrier and framing (a few KiB).
        const double f32_bytes = double(t1), bf16_bytes = double(t2);
        if (f32_bytes < 4.0 * count || f32_bytes > 4.2 * count) return 2;
        if (bf16_bytes < 2.0 * count || bf16_bytes > 2.1 * count) return 3;
        comm->close();
        return 0;
      },
      std::chrono::seconds(60));
  ASSERT_EQ(results.size(), 2u);
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(results[size_t(r)].exit_code, 0) << "worker " << r << ": " << results[r].message;
  std::printf("worker 0: %s\n", results[0].message.c_str());
}
#else
// Built without Gloo: the same tests, skipped with the reason, so that the skip shows.
TEST(AllreduceBf16, GlooThreeWorkersGetTheF32SumOfBf16Values) {
  GTEST_SKIP() << "Lockstep was built without Gloo (install libgloo-dev, reconfigure)";
}
TEST(AllreduceBf16, GlooTwoWorkersBackToBack) {
  GTEST_SKIP() << "Lockstep was built without Gloo (install libgloo-dev, reconfigure)";
}
TEST(AllreduceBf16, GlooTwoWorkersHalveTheBytesWithinBf16Rounding) {
  GTEST_SKIP() << "Lockstep was built without Gloo (install libgloo-dev, reconfigure)";
}
#endif

#ifdef LOCKSTEP_HAVE_MPI
// Runs this test binary's MpiWorker test on two ranks under mpirun.
TEST(AllreduceBf16, MpiTwoRanksUnderMpirun) {
  if (ld::testing::run_command("command -v mpirun") != 0) GTEST_SKIP() << "mpirun not in PATH";
  std::string output;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const int rc = ld::testing::run_command(
      "env -u GTEST_TOTAL_SHARDS -u GTEST_SHARD_INDEX -u GTEST_OUTPUT "
      "LOCKSTEP_BF16_MPI_WORKER=1 timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 " +
          self + " --gtest_color=no --gtest_filter=AllreduceBf16.MpiWorker",
      &output);
  EXPECT_EQ(rc, 0) << output;
  EXPECT_EQ(ld::testing::count_occurrences(output, "[  PASSED  ] 1 test"), 2) << output;
}

// The entry point of the test above's two ranks (mpirun starts this binary with the variable
// set); a plain run skips it.
TEST(AllreduceBf16, MpiWorker) {
  if (!std::getenv("LOCKSTEP_BF16_MPI_WORKER")) GTEST_SKIP() << "only under mpirun";
  ld::CommunicationOptions o;
  o.implementation = ld::CollectiveImplementation::kMpi;
  auto comm = ld::connect(ld::ClusterResolver::from_environment(), o);
  ASSERT_EQ(comm->backend(), "mpi");
  Bucket b(comm->rank());
  auto buffers = b.buffers();
  comm->allreduce_sum_bf16(buffers);
  EXPECT_EQ(b.check(comm->size()), "");
  comm->close();
}
#else
TEST(AllreduceBf16, MpiTwoRanksUnderMpirun) {
  GTEST_SKIP() << "Lockstep was built without OpenMPI (install libopenmpi-dev, reconfigure)";
}
#endif

}  // namespace
