// The fingerprint check behind the multi-worker agreement before fit (the end-to-end cases,
// two worker processes that disagree, are in tests/distribute/strategy_multiworker_test.cpp).
#include "trainers/worker_agreement.h"

#include <gtest/gtest.h>

#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;

namespace {
Fingerprint fields(int64_t batch, int replicas) {
  return {{"lockstep_version", "\"0.1.0\""},
          {"replicas_per_worker", std::to_string(replicas)},
          {"global_batch_size", std::to_string(batch)}};
}
}  // namespace

TEST(WorkerAgreement, SameFingerprintsPass) {
  EXPECT_NO_THROW(check_fingerprints_agree({fields(64, 1), fields(64, 1), fields(64, 1)}));
  EXPECT_NO_THROW(check_fingerprints_agree({fields(64, 1)}));
}

TEST(WorkerAgreement, FirstDifferingFieldIsNamedWithBothValues) {
  EXPECT_THROW(
      {
        try {
          check_fingerprints_agree({fields(64, 1), fields(64, 1), fields(66, 2)});
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find(
                        "workers disagree on replicas_per_worker: worker 0 has 1, worker 2 has 2"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
}

TEST(WorkerAgreement, ShorterFingerprintIsADifference) {
  Fingerprint shorter = fields(64, 1);
  shorter.pop_back();
  EXPECT_THROW(check_fingerprints_agree({fields(64, 1), shorter}), Error);
}

TEST(WorkerAgreement, EncodingRoundTripsAndGarbageIsAnError) {
  const Fingerprint f = fields(64, 1);
  EXPECT_EQ(decode_fingerprint(encode_fingerprint(f), 1), f);
  EXPECT_THROW(decode_fingerprint("{not json", 1), Error);
  EXPECT_THROW(decode_fingerprint("{\"lockstep_fit_fingerprint\": [[1]]}", 1), Error);
}

// A model's fingerprint names its layers' settings (here a Dense layer's units), so a
// different model differs in a named field.
TEST(WorkerAgreement, ModelFingerprintNamesLayerSettings) {
  using namespace layers;
  auto make = [](int units) {
    Model m = Sequential({Input({4}), Dense(units), Dense(2)});
    m.compile({.optimizer = optimizers::Adam(0.01), .loss = losses::MeanSquaredError()});
    return m;
  };
  Model a = make(8), b = make(9);
  FitConfig config;
  const FitData data{"arrays", "32", ""};
  try {
    check_fingerprints_agree({fit_fingerprint(a, config, data), fit_fingerprint(b, config, data)});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("units: worker 0 has 8, worker 1 has 9"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(check_fingerprints_agree(
      {fit_fingerprint(a, config, data), fit_fingerprint(make(8), config, data)}));
}

// Arrays of 96 and 95 samples make the same 6 batches of 16 (the step-count check passes), and
// the shorter worker trained on one row less per epoch: the fingerprint holds the row count.
TEST(WorkerAgreement, ArraysOfDifferentLengthsNameBothSampleCounts) {
  using namespace layers;
  Model m = Sequential({Input({4}), Dense(2)});
  m.compile({.optimizer = optimizers::SGD(0.1), .loss = losses::MeanSquaredError()});
  FitConfig config;
  const FitData w0{"arrays", "16", "", "96"}, w1{"arrays", "16", "", "95"};
  try {
    check_fingerprints_agree({fit_fingerprint(m, config, w0), fit_fingerprint(m, config, w1)});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("workers disagree on samples: worker 0 has 96, worker 1 has 95"),
        std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(
      check_fingerprints_agree({fit_fingerprint(m, config, w0), fit_fingerprint(m, config, w0)}));
}
