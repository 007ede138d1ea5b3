// LocalExchange (src/distribute/internal/strategy_runtime.h): the in-step exchange of the local
// replica threads behind synchronized batch norm. Every replica gets every replica's vector in
// replica order, round after round (the slots are double-buffered: a fast replica's next round
// does not overwrite what a slow one still reads); a failed replica's abort ends the others'
// wait with its reason, and a replica that never arrives is named after the timeout.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "distribute/internal/strategy_runtime.h"
#include "lockstep/distribute/collective.h"

using namespace lockstep;
using namespace lockstep::distribute;
using namespace std::chrono_literals;

TEST(LocalExchange, EveryReplicaSeesEveryVectorInOrderRoundAfterRound) {
  constexpr int kReplicas = 3, kRounds = 200;
  LocalExchange x(kReplicas, 10s);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < kReplicas; ++r)
    threads.emplace_back([&, r] {
      for (int round = 0; round < kRounds; ++round) {
        const size_t n = size_t(1 + round % 5);  // (the length changes from round to round)
        std::vector<double> mine(n, double(100 * round + r));
        const double* const* all = x.gather(r, mine.data(), n);
        if (r == 0) std::this_thread::yield();  // one slow reader
        for (int q = 0; q < kReplicas; ++q)
          for (size_t i = 0; i < n; ++i)
            if (all[q][i] != double(100 * round + q)) ++wrong;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(LocalExchange, AbortEndsTheWaitWithTheReason) {
  LocalExchange x(2, 30s);
  std::string what;
  std::thread waiter([&] {
    double v = 1;
    try {
      x.gather(0, &v, 1);
    } catch (const CollectiveError& e) {
      what = e.what();
    }
  });
  std::this_thread::sleep_for(50ms);
  x.abort("replica 1 failed: out of memory");
  waiter.join();
  EXPECT_NE(what.find("replica 1 failed: out of memory"), std::string::npos) << what;
}

TEST(LocalExchange, AMissingReplicaIsNamedAfterTheTimeout) {
  LocalExchange x(2, 200ms);
  double v = 1;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    x.gather(0, &v, 1);
    FAIL() << "expected PeerLostError";
  } catch (const PeerLostError& e) {
    EXPECT_EQ(e.rank(), 1);
    EXPECT_NE(std::string(e.what()).find("replica 1"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);
}
