// In-process communicator: sums over replica threads, bitwise determinism, broadcast,
// all-gather, mismatched calls, a replica that never arrives, abort.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "lockstep/distribute/collective.h"

namespace ld = lockstep::distribute;

namespace {

// Runs fn(rank, communicator) on one thread per replica; rethrows nothing (tests check).
template <typename Fn>
void run_replicas(std::vector<std::unique_ptr<ld::Communicator>>& comms, Fn fn) {
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r) {
    threads.emplace_back([&, r] { fn(int(r), *comms[r]); });
  }
  for (auto& t : threads) t.join();
}

// Values whose float sum depends on the order of addition.
float value(int rank, size_t i) {
  return float((i * 7919 + rank * 104729) % 1000) * 1.1e-3f + (rank % 2 ? 1e4f : 1e-4f);
}

}  // namespace

class InProcessSum : public ::testing::TestWithParam<int> {};

TEST_P(InProcessSum, SumsInRankOrderAndIsBitwiseReproducible) {
  const int n = GetParam();
  for (size_t count : {size_t(0), size_t(1), size_t(17), size_t(1000), size_t(100003)}) {
    std::vector<std::vector<float>> first;
    for (int repeat = 0; repeat < 3; ++repeat) {
      auto comms = ld::make_in_process_communicators(n, {.timeout = std::chrono::seconds(10)});
      std::vector<std::vector<float>> data(n, std::vector<float>(count));
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < count; ++i) data[r][i] = value(r, i);
      }
      run_replicas(comms, [&](int r, ld::Communicator& c) {
        EXPECT_EQ(c.rank(), r);
        EXPECT_EQ(c.size(), n);
        // Stagger the threads so arrival order differs between repeats.
        std::this_thread::sleep_for(std::chrono::microseconds(((r + repeat) % n) * 300));
        c.allreduce_sum(data[r].data(), count);
      });
      for (size_t i = 0; i < count; ++i) {
        float expected = value(0, i);
        for (int r = 1; r < n; ++r) expected += value(r, i);  // rank order
        for (int r = 0; r < n; ++r) {
          ASSERT_EQ(std::memcmp(&data[r][i], &expected, sizeof(float)), 0)
              << "n=" << n << " count=" << count << " i=" << i << " replica " << r;
        }
      }
      if (repeat == 0) first = data;
      if (count > 0)  // memcmp must not see the null data() of empty vectors (UBSan)
        EXPECT_EQ(std::memcmp(first[0].data(), data[0].data(), count * sizeof(float)), 0);
    }
  }
}

TEST_P(InProcessSum, BucketDoubleBroadcastAllgatherBarrier) {
  const int n = GetParam();
  auto comms = ld::make_in_process_communicators(n);
  std::vector<std::vector<float>> a(n, std::vector<float>(33)), b(n, std::vector<float>(5000));
  std::vector<std::vector<double>> d(n, std::vector<double>(3));
  std::vector<std::vector<float>> w(n, std::vector<float>(10));
  std::vector<std::vector<std::vector<char>>> gathered(n);
  run_replicas(comms, [&](int r, ld::Communicator& c) {
    for (size_t i = 0; i < a[r].size(); ++i) a[r][i] = float(r + 1);
    for (size_t i = 0; i < b[r].size(); ++i) b[r][i] = float(i) * float(r + 1);
    d[r] = {double(r), 1.0, 0.5};
    for (size_t i = 0; i < w[r].size(); ++i) w[r][i] = r == n - 1 ? float(i) : -1.0f;
    std::vector<ld::FloatBuffer> bucket{{a[r].data(), a[r].size()}, {b[r].data(), b[r].size()}};
    for (int step = 0; step < 3; ++step) {
      if (step > 0) {  // reset and reduce again: the same buffers every step
        for (auto& x : a[r]) x = float(r + 1);
        for (size_t i = 0; i < b[r].size(); ++i) b[r][i] = float(i) * float(r + 1);
      }
      c.allreduce_sum(std::span<const ld::FloatBuffer>(bucket));
    }
    c.allreduce_sum(d[r].data(), d[r].size());
    c.broadcast(w[r].data(), w[r].size(), n - 1);
    std::string mine = "replica-" + std::to_string(r) + std::string(r, '!');
    gathered[r] = c.allgather_bytes(mine.data(), mine.size());
    c.barrier();
  });
  const float tri = float(n * (n + 1) / 2);
  for (int r = 0; r < n; ++r) {
    for (float x : a[r]) EXPECT_EQ(x, tri);
    for (size_t i = 0; i < b[r].size(); ++i) EXPECT_EQ(b[r][i], float(i) * tri) << i;
    EXPECT_EQ(d[r][0], double(n * (n - 1) / 2));
    EXPECT_EQ(d[r][1], double(n));
    for (size_t i = 0; i < w[r].size(); ++i) EXPECT_EQ(w[r][i], float(i));
    ASSERT_EQ(int(gathered[r].size()), n);
    for (int q = 0; q < n; ++q) {
      EXPECT_EQ(std::string(gathered[r][q].begin(), gathered[r][q].end()),
                "replica-" + std::to_string(q) + std::string(q, '!'));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Replicas, InProcessSum, ::testing::Values(1, 2, 4));

TEST(InProcessCollective, MeanDividesBySize) {
  auto comms = ld::make_in_process_communicators(2);
  std::vector<std::vector<float>> x = {{1, 2}, {3, 6}};
  run_replicas(comms, [&](int r, ld::Communicator& c) { c.allreduce_mean(x[r].data(), 2); });
  EXPECT_EQ(x[0], (std::vector<float>{2, 4}));
  EXPECT_EQ(x[1], (std::vector<float>{2, 4}));
}

TEST(InProcessCollective, MismatchedSizesThrowOnEveryReplica) {
  auto comms = ld::make_in_process_communicators(2, {.timeout = std::chrono::seconds(5)});
  std::vector<float> x(10), y(11);
  std::vector<std::string> errors(2);
  run_replicas(comms, [&](int r, ld::Communicator& c) {
    try {
      c.allreduce_sum(r == 0 ? x.data() : y.data(), r == 0 ? x.size() : y.size());
    } catch (const ld::CollectiveError& e) {
      errors[r] = e.what();
    }
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("out of step"), std::string::npos) << e;
    EXPECT_NE(e.find("10 floats on replica 0 but 11 on replica 1"), std::string::npos) << e;
  }
}

TEST(InProcessCollective, MissingReplicaIsNamedWithinTimeout) {
  auto comms = ld::make_in_process_communicators(3, {.timeout = std::chrono::milliseconds(200)});
  std::vector<std::string> errors(3);
  std::vector<int> lost(3, -2);
  const auto start = std::chrono::steady_clock::now();
  run_replicas(comms, [&](int r, ld::Communicator& c) {
    if (r == 2) return;  // replica 2 never calls the collective
    float x = 1;
    try {
      c.allreduce_sum(&x, 1);
    } catch (const ld::PeerLostError& e) {
      errors[r] = e.what();
      lost[r] = e.rank();
    } catch (const ld::CollectiveError& e) {
      errors[r] = e.what();
    }
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 60.0);  // hang guard; the outcome is who is named
  // The first replica to time out names replica 2; the other sees the failure too.
  EXPECT_TRUE(lost[0] == 2 || lost[1] == 2);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("replica 2"), std::string::npos) << errors[r];
  }
  // The group is failed from now on: the late replica throws instead of hanging.
  float x = 1;
  EXPECT_THROW(comms[2]->allreduce_sum(&x, 1), ld::CollectiveError);
}

TEST(InProcessCollective, AbortWakesBlockedReplicas) {
  // A timeout far beyond the hang guard: only the abort can end the wait, and its message says so.
  auto comms = ld::make_in_process_communicators(2, {.timeout = std::chrono::seconds(300)});
  std::string error;
  const auto start = std::chrono::steady_clock::now();
  std::thread waiter([&] {
    float x = 1;
    try {
      comms[0]->allreduce_sum(&x, 1);
    } catch (const ld::CollectiveError& e) {
      error = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  comms[1]->abort("loss was NaN");
  waiter.join();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 60.0);
  EXPECT_NE(error.find("aborted by replica 1: loss was NaN"), std::string::npos) << error;
}

TEST(InProcessCollective, AsyncCollectivesRunInOrderAndReportErrors) {
  auto comms = ld::make_in_process_communicators(2);
  std::vector<std::vector<float>> g1(2, std::vector<float>(100, 1.0f)),
      g2(2, std::vector<float>(7, 2.0f));
  run_replicas(comms, [&](int r, ld::Communicator& c) {
    ld::AsyncCollectives async(c);
    auto f1 = async.allreduce_sum({{g1[r].data(), g1[r].size()}});
    auto f2 = async.allreduce_sum({{g2[r].data(), g2[r].size()}});
    f1.get();
    f2.get();
  });
  for (int r = 0; r < 2; ++r) {
    for (float x : g1[r]) EXPECT_EQ(x, 2.0f);
    for (float x : g2[r]) EXPECT_EQ(x, 4.0f);
  }
}

TEST(InProcessCollective, BadArgumentsAreExplained) {
  EXPECT_THROW(ld::make_in_process_communicators(0), ld::CollectiveError);
  auto comms = ld::make_in_process_communicators(2);
  float x = 0;
  try {
    comms[0]->broadcast(&x, 1, 5);
    FAIL();
  } catch (const ld::CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("root 5"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ld::parse_collective_implementation("halving_doubling"),
            ld::CollectiveImplementation::kHalvingDoubling);
  EXPECT_THROW(ld::parse_collective_implementation("nccl"), ld::CollectiveError);
}
