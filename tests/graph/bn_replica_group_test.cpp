// batch_norm_train with a replica group (synchronized statistics between in-process replicas,
// lockstep/graph/replica_exchange.h): two replicas of 6 and 2 rows, each running its own
// compiled program on its own thread, compute what one program computes on all 8 rows. The
// forward outputs are the whole batch's rows; each replica's loss is its share of the total
// scaled by 1 / w_r (as the strategy's replicas are: their gradients are weighted by w_r when
// summed), so w_r * dx_r are the whole batch's dx rows and sum_r w_r * dgamma_r its dgamma. For
// each fused activation the cpu backend has (relu6 with its mask from x, swish, relu reading y,
// none), f32.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "graph/graph_test_util.h"
#include "lockstep/core/rng.h"
#include "lockstep/graph/autodiff.h"
#include "lockstep/graph/executable.h"
#include "lockstep/graph/replica_exchange.h"

namespace lockstep {
namespace {

using I = std::vector<int64_t>;
constexpr int64_t kC = 6;
constexpr int64_t kGroup = 900001;  // (no strategy's reducer uses ids this large in a test)

// A plain exchange: a mutex and a condition variable, two slots per replica by parity.
class TestExchange final : public ReplicaExchange {
 public:
  explicit TestExchange(std::vector<float> weights) : weights_(std::move(weights)) {
    for (auto& p : slots_) p.resize(weights_.size()), views_[&p - slots_].resize(weights_.size());
    rounds_.assign(weights_.size(), 0);
  }
  int replicas() const override { return int(weights_.size()); }
  float weight(int replica) const override { return weights_.at(size_t(replica)); }
  const double* const* gather(int replica, const double* mine, size_t n) override {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t round = ++rounds_[size_t(replica)];
    const int parity = int(round & 1);
    slots_[parity][size_t(replica)].assign(mine, mine + n);
    views_[parity][size_t(replica)] = slots_[parity][size_t(replica)].data();
    ++gathers_;
    cv_.notify_all();
    cv_.wait(lock, [&] {
      for (uint64_t r : rounds_)
        if (r < round) return false;
      return true;
    });
    return views_[parity].data();
  }
  int gathers() const { return gathers_; }

 private:
  std::vector<float> weights_;
  std::vector<std::vector<double>> slots_[2];
  std::vector<const double*> views_[2];
  std::vector<uint64_t> rounds_;
  int gathers_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
};

struct Built {
  Graph g;
  std::vector<Value> feeds, fetch;  // feeds: x, w, scale, gamma0, beta0, gamma1, beta1
};

// y = act(bn1(act(bn0(x)))); loss = scale * sum(w * y); fetch loss, y, d/d(x, gammas, betas).
Built two_norms(int64_t rows, const std::string& act, int64_t group, int replica) {
  Built b;
  Graph& g = b.g;
  const Shape xs{rows, 4, 4, kC};
  Value x = g.input({DType::f32, xs}, "x"), w = g.input({DType::f32, xs}, "w");
  Value scale = g.input({DType::f32, Shape{}}, "scale");
  b.feeds = {x, w, scale};
  std::vector<Value> wrt{x};
  auto bn = [&](Value v, int k) {
    Value gamma = g.input({DType::f32, Shape{kC}}, "gamma"),
          beta = g.input({DType::f32, Shape{kC}}, "beta");
    b.feeds.insert(b.feeds.end(), {gamma, beta});
    wrt.insert(wrt.end(), {gamma, beta});
    Attrs a{{"epsilon", 1e-3}};
    if (group) a.set("group", AttrValue(group)), a.set("replica", AttrValue(int64_t(replica)));
    Value y = g.add_multi(op::batch_norm_train, {v, gamma, beta}, a, "bn" + std::to_string(k))[0];
    return act == "linear" ? y : g.add(OpId::named(act), {y});
  };
  Value y = bn(bn(x, 0), 1);
  Value loss = g.add(op::mul, {g.add(op::reduce_sum, {g.add(op::mul, {y, w})},
                                     Attrs{{"axes", I{0, 1, 2, 3}}, {"keepdims", false}}),
                               scale});
  b.fetch = {loss, y};
  for (Value d : gradients(g, loss, wrt)) b.fetch.push_back(d);
  return b;
}

// Feeds for `rows` rows starting at row `first` of one fixed 8-row batch.
std::vector<std::vector<float>> feeds(int64_t first, int64_t rows, float scale) {
  Philox rng(11);
  const int64_t per_row = 4 * 4 * kC;
  std::vector<float> x(size_t(8 * per_row)), w(x.size());
  for (float& v : x) v = rng.uniform(-2.f, 2.f) + 0.5f;
  for (float& v : w) v = rng.uniform(-1.f, 1.f);
  auto part = [&](const std::vector<float>& all) {
    return std::vector<float>(all.begin() + first * per_row,
                              all.begin() + (first + rows) * per_row);
  };
  std::vector<std::vector<float>> in{part(x), part(w), {scale}};
  for (int k = 0; k < 2; ++k) {
    std::vector<float> gamma(kC), beta(kC);
    for (float& v : gamma) v = rng.uniform(1.f, 3.f);  // large enough to clip at 6
    for (float& v : beta) v = rng.uniform(-0.5f, 1.5f);
    in.push_back(gamma);
    in.push_back(beta);
  }
  return in;
}

void check(const std::string& act) {
  SCOPED_TRACE(act);
  const std::vector<int64_t> rows{6, 2};
  const std::vector<float> weights{0.75f, 0.25f};
  TestExchange exchange(weights);
  ReplicaExchange::set(kGroup, &exchange);
  Built whole = two_norms(8, act, 0, 0);
  Executable one(whole.g, whole.feeds, whole.fetch);
  const auto want = test_util::run_once(one, feeds(0, 8, 1.f));
  std::vector<Built> parts;
  std::vector<std::unique_ptr<Executable>> exes;
  for (int r = 0; r < 2; ++r) {
    parts.push_back(two_norms(rows[size_t(r)], act, kGroup, r));
    exes.push_back(std::make_unique<Executable>(parts[size_t(r)].g, parts[size_t(r)].feeds,
                                                parts[size_t(r)].fetch));
  }
  std::vector<std::vector<std::vector<float>>> got(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      got[size_t(r)] = test_util::run_once(
          *exes[size_t(r)], feeds(r == 0 ? 0 : 6, rows[size_t(r)], 1.f / weights[size_t(r)]));
    });
  for (auto& t : threads) t.join();
  ReplicaExchange::set(kGroup, nullptr);
  EXPECT_EQ(exchange.gathers(), 2 * 4);  // 2 replicas x (2 forward + 2 backward) norms
  // Fetches: 0 loss, 1 y, 2 dx, 3.. dgamma0, dbeta0, dgamma1, dbeta1.
  auto rows_of = [&](size_t k) {  // y and w_r * dx, the replicas' rows in order
    std::vector<float> all;
    for (int r = 0; r < 2; ++r)
      for (float v : got[size_t(r)][k]) all.push_back(k == 1 ? v : v * weights[size_t(r)]);
    return all;
  };
  EXPECT_LE(test_util::worst(rows_of(1), want[1], 1e-5, 1e-5), 1.0) << "y";
  EXPECT_LE(test_util::worst(rows_of(2), want[2], 1e-5, 1e-4), 1.0) << "dx";
  for (size_t k = 3; k < want.size(); ++k) {
    std::vector<float> sum(want[k].size(), 0.f);
    for (int r = 0; r < 2; ++r)
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += weights[size_t(r)] * got[size_t(r)][k][i];
    EXPECT_LE(test_util::worst(sum, want[k], 1e-5, 1e-4), 1.0) << "parameter gradient " << k;
  }
  // The per-replica statistics differ from the global ones: pooling is what made them agree.
  Built alone = two_norms(2, act, 0, 0);
  Executable lone(alone.g, alone.feeds, alone.fetch);
  const auto own = test_util::run_once(lone, feeds(6, 2, 4.f));
  EXPECT_GT(test_util::worst(own[1], got[1][1], 1e-5, 1e-5), 10.0) << "y of 2 rows alone";
}

TEST(BatchNormReplicaGroup, MatchesTheWholeBatchRelu6MaskFromX) { check("relu6"); }
TEST(BatchNormReplicaGroup, MatchesTheWholeBatchSwish) { check("swish"); }
TEST(BatchNormReplicaGroup, MatchesTheWholeBatchRelu) { check("relu"); }
TEST(BatchNormReplicaGroup, MatchesTheWholeBatchLinear) { check("linear"); }

TEST(BatchNormReplicaGroup, UnknownGroupIsAnError) {
  Built b = two_norms(2, "linear", 424242, 0);
  Executable exe(b.g, b.feeds, b.fetch);
  try {
    test_util::run_once(exe, feeds(0, 2, 1.f));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("replica group 424242"), std::string::npos) << e.what();
  }
}

TEST(BatchNormReplicaGroup, ReferenceBackendRefusesAGroup) {
  Built b = two_norms(2, "linear", kGroup, 0);
  EXPECT_THROW(
      {
        Executable exe(b.g, b.feeds, b.fetch, CompileOptions{.backend = "reference"});
        test_util::run_once(exe, feeds(0, 2, 1.f));
      },
      Error);
}

}  // namespace
}  // namespace lockstep
