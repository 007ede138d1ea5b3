// The fused attention op's memory (the cpu kernel's bytes grow linearly in the sequence length,
// by the allocator's count and by the program's plan: arena and kernels' workspace) and the
// attention layers: a transformer classifier trains, the mixed_bfloat16 path runs attention in bf16
// with f32 softmax statistics, a config round-trips, and bad input is refused naming the layer and
// the argument.
#include "lockstep/nn/attention.h"

#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/core/allocator.h"
#include "lockstep/core/env.h"
#include "lockstep/graph/autodiff.h"
#include "lockstep/graph/executable.h"
#include "lockstep/graph/op_registry.h"
#include "lockstep/lockstep.h"
#include "lockstep/nn/layers_1d.h"
#include "test_util.h"

using namespace lockstep;
namespace L = lockstep::layers;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

void expect_has(const std::string& e, std::initializer_list<const char*> parts) {
  ASSERT_FALSE(e.empty()) << "no error";
  for (const char* p : parts) EXPECT_NE(e.find(p), std::string::npos) << p << " not in: " << e;
}

// Bytes a train step of one causal attention node (forward and gradient) over sequences of
// length T takes, counted twice: `planned`, as its program lays them out (the planned arena of
// inputs, outputs and intermediates, plus the one workspace, the largest any of its kernels asks
// for), and `measured`, by the allocator's count: the peak of live bytes over compiling the step
// and running it, above what was live before (lockstep/core/allocator.h).
struct StepBytes {
  size_t planned = 0, measured = 0;
  size_t blocks = 0;  // the arena and the workspace as the allocator hands them out (rounded)
};

// A block of `bytes` as aligned_alloc_bytes rounds it: to 64 bytes, and from 4 MiB up to whole
// 2 MiB huge pages (LOCKSTEP_HUGE_PAGES, on by default).
size_t allocator_block(size_t bytes) {
  const size_t huge = size_t(2) << 20;
  if (bytes >= (size_t(4) << 20) && env::flag(env::huge_pages)) return (bytes + huge - 1) / huge * huge;
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}
StepBytes step_bytes(int64_t T, const std::string& backend) {
  const int64_t B = 1, H = 2, D = 32;
  Graph g;
  Value q = g.input({DType::f32, Shape{B, T, H, D}}, "q");
  Value k = g.input({DType::f32, Shape{B, T, H, D}}, "k");
  Value v = g.input({DType::f32, Shape{B, T, H, D}}, "v");
  Value y = g.add_multi(op::scaled_dot_product_attention, {q, k, v}, Attrs{{"causal", true}})[0];
  Value loss = g.add(op::reduce_sum, {g.add(op::square, {y})},
                     Attrs{{"axes", std::vector<int64_t>{0, 1, 2, 3}}, {"keepdims", false}});
  std::vector<Value> grads = gradients(g, loss, {q, k, v});
  std::vector<Tensor> inputs;
  for (int i = 0; i < 3; ++i)
    inputs.push_back(test_util::lcg_inputs(Shape{B, T, H, D}, uint64_t(i + 1)));
  const size_t before = allocated_bytes();
  reset_peak_allocated_bytes();
  StepBytes bytes;
  {
    Executable exe(g, {q, k, v}, {loss, grads[0], grads[1], grads[2]}, {.backend = backend});
    for (int i = 0; i < 3; ++i) exe.copy_input_from_host(i, inputs[size_t(i)]);
    exe.run();
    bytes.planned = exe.arena_bytes() + exe.workspace_bytes();
    bytes.blocks = allocator_block(exe.arena_bytes()) +
                   (exe.workspace_bytes() ? allocator_block(exe.workspace_bytes()) : 0);
  }
  bytes.measured = peak_allocated_bytes() - before;
  return bytes;
}

}  // namespace

TEST(AttentionMemory, CpuKernelBytesGrowLinearlyInSequenceLength) {
  // The tiled kernel keeps no T x T matrix: doubling T doubles the step's bytes (inputs,
  // outputs, the per-row logsumexp and fixed tile scratch), and at T = 2048 the whole step
  // takes less than one f32 T x T weight matrix would. The allocator's count agrees with the
  // plan: nothing the program allocates escapes it (beyond the allocator's rounding of the two
  // blocks, to whole huge pages from 4 MiB on).
  const StepBytes b512 = step_bytes(512, "cpu"), b1024 = step_bytes(1024, "cpu"),
                  b2048 = step_bytes(2048, "cpu");
  std::printf("cpu attention step bytes (allocator's peak / planned): T=512 %zu / %zu, "
              "T=1024 %zu / %zu, T=2048 %zu / %zu\n",
              b512.measured, b512.planned, b1024.measured, b1024.planned, b2048.measured,
              b2048.planned);
  for (const StepBytes& b : {b512, b1024, b2048}) {
    EXPECT_GE(b.measured, b.blocks);
    EXPECT_LE(b.measured, b.blocks + 65536);
  }
  EXPECT_LE(double(b1024.planned), 2.2 * double(b512.planned));
  EXPECT_LE(double(b2048.planned), 2.2 * double(b1024.planned));
  EXPECT_GE(double(b2048.planned), 1.8 * double(b1024.planned));  // linear, not constant
  EXPECT_LT(b2048.measured, size_t(2048) * 2048 * sizeof(float));
  // The reference kernel holds the whole T x T matrix (in double): quadratic.
  const StepBytes r512 = step_bytes(512, "reference"), r1024 = step_bytes(1024, "reference");
  EXPECT_GE(double(r1024.planned), 3.0 * double(r512.planned));
}

TEST(AttentionDropout, GradientMatchesFiniteDifferencesAtAFixedStep) {
  // The kernels redraw the dropout from (seed, step, element): at one step the dropped weights
  // are fixed, so L = sum(w * y) is smooth in q, k and v and its gradient is checked by central
  // differences, every run at step 3, on the reference and cpu backends.
  const Shape qs{2, 3, 2, 4}, ks{2, 5, 1, 4}, vs{2, 5, 1, 3};
  for (const char* backend : {"reference", "cpu"}) {
    Graph g;
    Value q = g.input({DType::f32, qs}, "q"), k = g.input({DType::f32, ks}, "k");
    Value v = g.input({DType::f32, vs}, "v"), w = g.input({DType::f32, Shape{2, 3, 2, 3}}, "w");
    Value y = g.add_multi(op::scaled_dot_product_attention, {q, k, v},
                          Attrs{{"dropout", 0.3}, {"seed", 11}, {"causal", true}})[0];
    Value loss = g.add(op::reduce_sum, {g.add(op::mul, {y, w})},
                       Attrs{{"axes", std::vector<int64_t>{0, 1, 2, 3}}, {"keepdims", false}});
    std::vector<Value> d = gradients(g, loss, {q, k, v});
    Executable exe(g, {q, k, v, w}, {loss, d[0], d[1], d[2]}, {.backend = backend});
    std::vector<Tensor> in{test_util::lcg_inputs(qs, 1), test_util::lcg_inputs(ks, 2),
                           test_util::lcg_inputs(vs, 3),
                           test_util::lcg_inputs(Shape{2, 3, 2, 3}, 4)};
    auto run = [&] {
      for (int i = 0; i < 4; ++i) exe.input(i).copy_from(in[size_t(i)]);
      exe.set_step(3);
      exe.run();
      return double(exe.output(0).to_vector()[0]);
    };
    run();
    std::vector<std::vector<float>> analytic;
    for (int i = 1; i <= 3; ++i) analytic.push_back(exe.output(i).to_vector());
    for (int t = 0; t < 3; ++t)
      for (int64_t e = 0; e < in[size_t(t)].numel(); ++e) {
        float& x = in[size_t(t)].data<float>()[e];
        const float x0 = x, h = 5e-3f;
        x = x0 + h;
        const double up = run();
        x = x0 - h;
        const double down = run();
        x = x0;
        const double numeric = (up - down) / (2 * h);
        EXPECT_NEAR(analytic[size_t(t)][size_t(e)], numeric, 2e-2 * (std::fabs(numeric) + 0.05))
            << backend << " input " << t << " element " << e;
      }
  }
}

TEST(AttentionLayers, TransformerClassifierLossFalls) {
  // Tokens 1..3 in sequences of 8; the label is the most frequent token (ties: the smaller).
  reset_layer_names();
  set_random_seed(5);
  const int64_t N = 192, T = 8;
  Tensor x = Tensor::zeros(Shape{N, T}), y = Tensor::zeros(Shape{N});
  uint64_t s = 12345;
  for (int64_t n = 0; n < N; ++n) {
    int count[4] = {0, 0, 0, 0};
    for (int64_t t = 0; t < T; ++t) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      const int tok = 1 + int((s >> 33) % 3);
      x.data<float>()[n * T + t] = float(tok);
      ++count[tok];
    }
    int best = 1;
    for (int c = 2; c <= 3; ++c)
      if (count[c] > count[best]) best = c;
    y.data<float>()[n] = float(best - 1);
  }
  KTensor ids = L::Input({T}, "ids");
  KTensor e = L::Embedding(4, 16)(ids);
  KTensor a = L::attend(L::MultiHeadAttention(2, 8, {.dropout = 0.1}), e, e);
  KTensor h = L::LayerNormalization({.epsilon = 1e-6})(L::Add()({e, a}));
  KTensor f = L::Dense(16)(L::Dense(32, {.activation = "relu"})(h));
  h = L::LayerNormalization({.epsilon = 1e-6})(L::Add()({h, f}));
  KTensor out = L::Dense(3)(L::GlobalAveragePooling1D()(h));
  Model m(ids, out);
  m.compile({.optimizer = optimizers::Adam(3e-3),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  History hist = m.fit(x, y, {.batch_size = 32, .epochs = 12, .verbose = 0});
  const auto& loss = hist.history.at("loss");
  std::printf("transformer classifier loss: first epoch %.4f, last %.4f\n", loss.front(),
              loss.back());
  EXPECT_LT(loss.back(), 0.7 * loss.front());
}

TEST(AttentionLayers, MixedBfloat16RunsAttentionInBf16) {
  mixed_precision::set_global_policy("mixed_bfloat16");
  KTensor x = L::Input({6, 8}, "x");
  auto mha = L::MultiHeadAttention(2, 4);
  KTensor y = L::attend(mha, x, x, {.use_causal_mask = true});
  mixed_precision::set_global_policy("float32");
  EXPECT_EQ(y.dtype(), DType::bf16);
  Model m(x, y);
  const Tensor in = test_util::lcg_inputs(Shape{3, 6, 8}, 4);
  const Tensor got = m.predict(in);
  // The same weights in float32.
  KTensor x32 = L::Input({6, 8}, "x32");
  auto mha32 = L::MultiHeadAttention(2, 4);
  Model m32(x32, L::attend(mha32, x32, x32, {.use_causal_mask = true}));
  for (size_t i = 0; i < mha->weights().size(); ++i)
    mha32->weights()[i]->value.copy_from(mha->weights()[i]->value);
  const Tensor want = m32.predict(in);
  EXPECT_LE(test_util::max_abs_diff(got, want), 0.05f);
  // The attention node computes in bf16; its logsumexp (the softmax statistics) stays f32.
  Graph g;
  Value q = g.input({DType::bf16, Shape{1, 4, 2, 8}}, "q");
  std::vector<Value> o = g.add_multi(op::scaled_dot_product_attention, {q, q, q});
  EXPECT_EQ(g.type(o[0]).dtype, DType::bf16);
  EXPECT_EQ(g.type(o[1]).dtype, DType::f32);
}

TEST(AttentionLayers, ConfigRoundTripsAndBadInputIsNamed) {
  auto mha = L::MultiHeadAttention(3, 4, {.value_dim = 5, .output_shape = {7}, .name = "mha"});
  LayerPtr back =
      layer_from_config({{"class_name", "MultiHeadAttention"}, {"config", mha->config()}});
  EXPECT_EQ(back->config(), mha->config());
  auto gqa = L::GroupQueryAttention(4, 4, 2, {.name = "gqa"});
  LayerPtr gback =
      layer_from_config({{"class_name", "GroupQueryAttention"}, {"config", gqa->config()}});
  EXPECT_EQ(gback->config(), gqa->config());
  auto att = L::Attention({.use_scale = true, .name = "att"});
  LayerPtr aback = layer_from_config({{"class_name", "Attention"}, {"config", att->config()}});
  EXPECT_EQ(aback->config(), att->config());

  KTensor x = L::Input({6, 8}, "x"), flat = L::Input({8}, "flat"), other = L::Input({5, 8}, "o");
  expect_has(error_of([&] { L::attend(L::MultiHeadAttention(2, 4, {.name = "m1"}), flat, x); }),
             {"m1", "query", "(batch, time, features)"});
  KTensor bad_mask = L::Input({6, 4}, "mask");
  expect_has(error_of([&] {
               L::attend(L::MultiHeadAttention(2, 4, {.name = "m2"}), x, x,
                         {.attention_mask = bad_mask});
             }),
             {"m2", "attention_mask", "(batch, 6, 6)"});
  expect_has(error_of([&] {
               L::attend(L::MultiHeadAttention(2, 4, {.name = "m3"}), x, x, {.key = other});
             }),
             {"m3", "key", "same length"});
  expect_has(error_of([] { L::GroupQueryAttention(4, 4, 3, {.name = "g1"}); }),
             {"g1", "num_key_value_heads", "divide"});
  expect_has(error_of([] { L::MultiHeadAttention(2, 4, {.attention_axes = {2}, .name = "m4"}); }),
             {"m4", "attention_axes"});
  // The op itself: q and k head sizes must agree.
  Graph g;
  Value q = g.input({DType::f32, Shape{1, 4, 2, 8}}, "q");
  Value k = g.input({DType::f32, Shape{1, 4, 2, 6}}, "k");
  expect_has(error_of([&] {
               g.add_multi(op::scaled_dot_product_attention, {q, k, k});
             }),
             {"scaled_dot_product_attention", "head size"});
}
