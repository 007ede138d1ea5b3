// Model::step_memory, the train step's planned peak memory as summary() and CostReport show it:
// it grows with an attention model's sequence length, agrees with the allocator's count of what
// compiling the step took, and appears in summary() and the cost report's JSON.
#include <gtest/gtest.h>

#include <sstream>

#include "lockstep/core/allocator.h"
#include "lockstep/lockstep.h"
#include "lockstep/nn/attention.h"
#include "lockstep/nn/layers_1d.h"

using namespace lockstep;
namespace L = lockstep::layers;

namespace {

// One pre-norm self-attention block over T steps of 64 features, then a 3-way head.
Model attention_model(int64_t T) {
  reset_layer_names();
  set_random_seed(3);
  KTensor x = L::Input({T, 64}, "x");
  KTensor h = L::LayerNormalization()(x);
  KTensor a = L::attend(L::MultiHeadAttention(4, 16), h, h)[0];
  KTensor y = L::Dense(3)(L::GlobalAveragePooling1D()(L::Add()({x, a})[0]));
  Model m(x, y);
  m.compile({.optimizer = optimizers::Adam(1e-3),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  return m;
}

}  // namespace

TEST(StepMemory, GrowsWithSequenceLengthAndMatchesTheAllocator) {
  std::vector<StepMemory> at;
  for (int64_t T : {128, 256, 512}) {
    Model m = attention_model(T);
    const size_t before = allocated_bytes();
    reset_peak_allocated_bytes();
    const StepMemory s = m.step_memory(8);
    const size_t measured = peak_allocated_bytes() - before;
    std::printf("T=%lld: peak %zu = arena %zu + workspace %zu + variables %zu; allocator %zu\n",
                (long long)T, s.peak_bytes, s.arena_bytes, s.workspace_bytes, s.variable_bytes,
                measured);
    EXPECT_TRUE(s.planned);
    EXPECT_EQ(s.batch_size, 8);
    EXPECT_EQ(s.peak_bytes, s.arena_bytes + s.workspace_bytes + s.variable_bytes);
    // Compiling allocates the arena and the workspace (the weights were there before; Adam's
    // slots are made here): the allocator saw at least those, and not much more than the whole
    // peak (it rounds a block of 4 MiB or more up to whole 2 MiB huge pages).
    EXPECT_GE(measured, s.arena_bytes + s.workspace_bytes);
    EXPECT_LE(double(measured), 1.25 * double(s.peak_bytes) + 262144.0);
    at.push_back(s);
  }
  // The weights do not depend on T; the activations grow with it (linearly: no T x T matrix).
  EXPECT_EQ(at[0].variable_bytes, at[2].variable_bytes);
  EXPECT_GT(double(at[1].arena_bytes), 1.8 * double(at[0].arena_bytes));
  EXPECT_LT(double(at[2].arena_bytes), 2.2 * double(at[1].arena_bytes));
}

TEST(StepMemory, SummaryAndCostReportShowThePlannedPeak) {
  Model m = attention_model(64);
  std::ostringstream not_yet;
  m.summary(not_yet);  // compiles nothing itself
  EXPECT_NE(not_yet.str().find("Train step: not compiled yet"), std::string::npos) << not_yet.str();
  EXPECT_FALSE(m.compiled_step_memory());
  EXPECT_EQ(m.programs_compiled(), 0);
  const StepMemory s = m.step_memory(32);  // the step fit will run, compiled before it
  std::ostringstream before_fit;
  m.summary(before_fit);
  char peak[64];
  std::snprintf(peak, sizeof peak, "peak memory %.2f MB", double(s.peak_bytes) / (1 << 20));
  EXPECT_NE(before_fit.str().find("Train step (batch 32"), std::string::npos) << before_fit.str();
  EXPECT_NE(before_fit.str().find(peak), std::string::npos) << peak << " in " << before_fit.str();
  const std::optional<StepMemory> planned = m.compiled_step_memory();
  ASSERT_TRUE(planned);
  EXPECT_EQ(planned->batch_size, 32);
  const int programs = m.programs_compiled();  // one, or one per thread replica
  EXPECT_EQ(programs, planned->replicas);

  Tensor x = Tensor::zeros(Shape{64, 64, 64}), y = Tensor::zeros(Shape{64});
  auto report = callbacks::CostReport({.verbose = 0});
  m.fit(x, y, {.batch_size = 32, .epochs = 1, .verbose = 0, .callbacks = {report}});
  EXPECT_EQ(m.programs_compiled(), programs);  // fit ran the step summary() compiled
  const json r = report->report();
  ASSERT_TRUE(r.contains("step_memory")) << r.dump(2);
  EXPECT_EQ(r["step_memory"]["peak_bytes"].get<size_t>(), planned->peak_bytes);
  EXPECT_EQ(r["step_memory"]["arena_bytes"].get<size_t>(), planned->arena_bytes);
  EXPECT_EQ(r["step_memory"]["batch_size"].get<int64_t>(), 32);
}

TEST(StepMemory, NeedsCompile) {
  reset_layer_names();
  Model m = Sequential({L::Input({4}), L::Dense(2)});
  try {
    m.step_memory(8);
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("compile()"), std::string::npos) << e.what();
  }
  std::ostringstream s;
  m.summary(s);  // uncompiled: Keras's table alone
  EXPECT_EQ(s.str().find("Train step"), std::string::npos);
}
