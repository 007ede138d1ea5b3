// The small Dense classifier the XLA Model tests train on backend "xla" and on a cpu twin
// (tests/backends/xla_model_test.cpp, xla_residence_test.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <utility>

#include "lockstep/core/rng.h"
#include "lockstep/lockstep.h"

namespace lockstep::xla_test {

// 8 features -> Dense(16, relu) -> Dense(3) logits.
inline Model dense_model() {
  using namespace layers;
  return Sequential({Input({8}), Dense(16, {.activation = "relu"}), Dense(3)});
}

// 96 rows of 8 uniform features in [-1, 1) drawn with `seed`; the label is the quadrant-like
// class of the first two features (0, 1 or 2).
inline std::pair<Tensor, Tensor> dense_data(uint64_t seed) {
  Philox rng(seed);
  Tensor x = Tensor::zeros(Shape{96, 8});
  Tensor y = Tensor::zeros(Shape{96}, DType::i32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = rng.uniform(-1.f, 1.f);
  for (int64_t r = 0; r < 96; ++r) {
    const float* row = x.data<float>() + 8 * r;
    y.data<int32_t>()[r] = row[0] > 0 ? (row[1] > 0 ? 2 : 1) : 0;
  }
  return {x, y};
}

// Adam(1e-2), sparse categorical cross-entropy from logits, accuracy, on `backend`.
inline CompileConfig adam_config(const std::string& backend) {
  return {.optimizer = optimizers::Adam(1e-2),
          .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
          .metrics = {"accuracy"},
          .backend = backend};
}

}  // namespace lockstep::xla_test
