// SimpleRNN, LSTM, GRU and Bidirectional: outputs and final states against values Keras 3.15
// computed (with a mask, go_backwards and both GRU forms; /tmp-free: the numbers are pasted
// below), configs both ways, the errors for what Lockstep refuses, mixed_bfloat16 within bf16's
// tolerance, a .keras round trip, and 20 training steps of a masked model that agree across the
// backends.
#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/graph/executable.h"
#include "lockstep/lockstep.h"
#include "test_util.h"
#ifdef LOCKSTEP_XLA
#include "backends/xla_test_util.h"
#endif

using namespace lockstep;
namespace L = lockstep::layers;

namespace {

constexpr int64_t N = 2, T = 4, F = 3, H = 2;

// The weights the Keras script set: w[i] = ((i * 7 + 3k) % 11 - 5) * 0.11 for weight k.
void set_keras_weights(Layer& l) {
  const auto& ws = l.weights();
  for (size_t k = 0; k < ws.size(); ++k) {
    float* p = ws[k]->value.data<float>();
    for (int64_t i = 0; i < ws[k]->value.numel(); ++i)
      p[i] = float(((i * 7 + int64_t(k) * 3) % 11) - 5) * 0.11f;
  }
}

Tensor keras_x() {
  std::vector<float> v(size_t(N * T * F));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::fmod(float(i) * 0.37f, 2.f) - 1.f;
  return Tensor::from_vector(Shape{N, T, F}, v);
}

// Runs layer `l` on keras_x() (with the mask [[1,1,0,1],[1,0,0,1]] when `masked`).
std::vector<Tensor> run(const LayerHandle& l, bool masked, const std::string& backend,
                        DType dtype = DType::f32, std::vector<std::string>* report = nullptr) {
  l->ensure_built({Shape{-1, T, F}});
  set_keras_weights(*l);
  Graph g;
  Value x = g.input({DType::f32, Shape{N, T, F}}, "x");
  Value m = g.input({DType::f32, Shape{N, T}}, "mask");
  Value xin = dtype == DType::f32 ? x : g.add(op::cast, {x}, Attrs{{"dtype", "bfloat16"}});
  CallContext ctx{g, false, 0, {}};
  if (masked) ctx.masks = {m};
  std::vector<Value> ys = l->invoke(ctx, {xin});
  for (auto& y : ys)
    if (g.type(y).dtype != DType::f32) y = g.add(op::cast, {y}, Attrs{{"dtype", "float32"}});
  Executable exe(g, {x, m}, ys, {.backend = backend});
  exe.input(0).copy_from(keras_x());
  exe.input(1).copy_from(Tensor::from_vector(Shape{N, T}, {1, 1, 0, 1, 1, 0, 0, 1}));
  exe.run();
  if (report) *report = exe.report();
  std::vector<Tensor> out;
  for (size_t i = 0; i < ys.size(); ++i) out.push_back(exe.output(int(i)).clone());
  return out;
}

void expect_values(const Tensor& got, const std::vector<float>& want, double tol,
                   const char* what) {
  auto g = got.to_vector();
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], tol) << what << " element " << i;
}

struct KerasCase {
  const char* name;
  std::function<LayerHandle()> make;
  std::vector<std::vector<float>> plain, masked;  // y (N, T, H), then the final states
};

std::vector<KerasCase> keras_cases() {
  L::RNNOptions seq{.return_sequences = true, .return_state = true};
  L::RNNOptions back = seq;
  back.go_backwards = true;
  L::RNNOptions before = seq;
  before.reset_after = false;
  return {
      {"lstm_backwards",
       [=] { return L::LSTM(H, back); },
       {{-0.1713565f, 0.022166f, -0.1837301f, 0.07423861f, -0.1576792f, 0.05574529f, -0.2094316f,
         0.08122982f, -0.165112f, 0.03355678f, -0.1574198f, 0.07506519f, -0.2843923f, 0.04213183f,
         -0.2048246f, 0.07905338f},
        {-0.2094316f, 0.08122982f, -0.2048246f, 0.07905338f},
        {-0.7451355f, 0.2505794f, -0.5840833f, 0.2279198f}},
       {{-0.1713565f, 0.022166f, -0.1713565f, 0.022166f, -0.08231629f, 0.03112767f, -0.1777209f,
         0.0750414f, -0.165112f, 0.03355678f, -0.165112f, 0.03355678f, -0.165112f, 0.03355678f,
         -0.1804079f, 0.08069713f},
        {-0.1777209f, 0.0750414f, -0.1804079f, 0.08069713f},
        {-0.6121017f, 0.2285457f, -0.5195494f, 0.2273762f}}},
      {"gru_backwards",
       [=] { return L::GRU(H, back); },
       {{0.03601141f, -0.306547f, -0.01970457f, 0.4491134f, -0.1516455f, 0.4052581f, -0.06970865f,
         0.6311178f, 0.1786591f, 0.2370025f, 0.03862078f, 0.4595945f, 0.03797162f, -0.171405f,
         -0.04198363f, 0.4325114f},
        {-0.06970865f, 0.6311178f, -0.04198363f, 0.4325114f}},
       {{0.03601141f, -0.306547f, 0.03601141f, -0.306547f, -0.1257621f, 0.2756322f, -0.06306501f,
         0.6011216f, 0.1786591f, 0.2370025f, 0.1786591f, 0.2370025f, 0.1786591f, 0.2370025f,
         0.07219994f, 0.5031102f},
        {-0.06306501f, 0.6011216f, 0.07219994f, 0.5031102f}}},
      {"gru_reset_before",
       [=] { return L::GRU(H, before); },
       {{-0.1574837f, 0.4422519f, -0.3633223f, 0.3791506f, -0.4214636f, 0.5488643f, -0.290849f,
         -0.03605813f, -0.2009604f, 0.3745793f, -0.2138298f, -0.1306939f, -0.3586801f, 0.3160431f,
         -0.2144095f, 0.3017997f},
        {-0.290849f, -0.03605813f, -0.2144095f, 0.3017997f}},
       {{-0.1574837f, 0.4422519f, -0.3633223f, 0.3791506f, -0.3633223f, 0.3791506f, -0.2714261f,
         -0.1153837f, -0.2009604f, 0.3745793f, -0.2009604f, 0.3745793f, -0.2009604f, 0.3745793f,
         -0.1356337f, 0.3289428f},
        {-0.2714261f, -0.1153837f, -0.1356337f, 0.3289428f}}},
      {"simple_rnn",
       [=] { return L::SimpleRNN(H, seq); },
       {{0.6469294f, -0.6699762f, -0.1767461f, 0.249241f, 0.5986886f, -0.7130493f, -0.4914323f,
         0.7612097f, 0.4459232f, -0.5491058f, -0.5590876f, 0.7432773f, 0.4923517f, -0.7906187f,
         -0.3570367f, 0.05972653f},
        {-0.4914323f, 0.7612097f, -0.3570367f, 0.05972653f}},
       {{0.6469294f, -0.6699762f, -0.1767461f, 0.249241f, -0.1767461f, 0.249241f, -0.2556974f,
         0.2496505f, 0.4459232f, -0.5491058f, 0.4459232f, -0.5491058f, 0.4459232f, -0.5491058f,
         -0.3245324f, -0.045406f},
        {-0.2556974f, 0.2496505f, -0.3245324f, -0.045406f}}},
  };
}

// Restores the global seed a test changes (tests of one process run after each other).
struct SeedGuard {
  uint64_t seed = random_seed();
  ~SeedGuard() { set_random_seed(seed); }
};

// A test-only layer that hands its second input on as its first input's Keras mask (the
// masking layers, Embedding(mask_zero) and Masking, are another part of issue 35).
class AttachMask : public Layer {
 public:
  using Layer::Layer;
  std::string class_name() const override { return "AttachMask"; }
  std::vector<Value> call(CallContext&, const std::vector<Value>& in) override { return {in[0]}; }
  std::vector<Value> compute_mask(CallContext&, const std::vector<Value>& in,
                                  const std::vector<Value>&, int) override {
    return {in.at(1)};
  }
};

}  // namespace

TEST(RecurrentLayers, OutputsAndStatesMatchKerasWithAndWithoutMask) {
  for (const auto& c : keras_cases())
    for (const char* backend : {"reference", "cpu"})
      for (bool masked : {false, true}) {
        SCOPED_TRACE(std::string(c.name) + " " + backend + (masked ? " masked" : ""));
        auto out = run(c.make(), masked, backend);
        const auto& want = masked ? c.masked : c.plain;
        ASSERT_EQ(out.size(), want.size());
        for (size_t i = 0; i < out.size(); ++i) expect_values(out[i], want[i], 2e-5, c.name);
      }
}

// mixed_bfloat16 on cpu: oneDNN's bf16 RNN primitive where oneDNN offers it for the cell on
// this CPU (the report says which), else f32 between conversions; masked: the loop kernel.
TEST(RecurrentLayers, MixedBfloat16StaysWithinBf16Tolerance) {
  for (const auto& c : keras_cases())
    for (bool masked : {false, true}) {
      SCOPED_TRACE(std::string(c.name) + (masked ? " masked" : ""));
      LayerHandle l = c.make();
      l->set_dtype_policy("mixed_bfloat16");
      std::vector<std::string> report;
      auto out = run(l, masked, "cpu", DType::bf16, &report);
      for (const auto& line : report)
        if (getenv("RNN_DEBUG") || line.find("oneDNN RNN primitive") != std::string::npos)
          std::printf("%s: %s\n", c.name, line.c_str());
      const auto& want = masked ? c.masked : c.plain;
      for (size_t i = 0; i < out.size(); ++i) expect_values(out[i], want[i], 3e-2, c.name);
    }
}

TEST(RecurrentLayers, ConfigsRoundTrip) {
  std::vector<LayerHandle> ls{
      L::LSTM(5, {.use_bias = false,
                  .unit_forget_bias = false,
                  .dropout = 0.25,
                  .return_sequences = true,
                  .go_backwards = true,
                  .name = "enc"}),
      L::GRU(3, {.recurrent_dropout = 0.5, .return_state = true, .reset_after = false}),
      L::SimpleRNN(2, {.activation = "relu"}),
      L::Bidirectional(L::LSTM(4, {.return_sequences = true}), {.merge_mode = "ave"}),
      L::Bidirectional(L::GRU(4), {.merge_mode = ""})};
  for (auto& l : ls) {
    json c = l->config();
    LayerPtr again = layer_from_config(json{{"class_name", l->class_name()}, {"config", c}});
    EXPECT_EQ(again->config(), c) << l->class_name();
  }
  json bc = ls[3]->config();
  EXPECT_EQ(bc["layer"]["config"]["name"].get<std::string>().rfind("forward_lstm", 0), 0u);
  EXPECT_EQ(bc["backward_layer"]["config"]["go_backwards"], true);
  EXPECT_EQ(bc["layer"]["config"]["zero_output_for_mask"], true);  // Keras forces it
  EXPECT_TRUE(bc["merge_mode"] == "ave");
  EXPECT_TRUE(ls[4]->config()["merge_mode"].is_null());
}

TEST(RecurrentLayers, RefusesWhatItCannotRepresent) {
  test_util::expect_has(test_util::error_of([] { L::LSTM(4, {.stateful = true}); }),
                        {"LSTM", "stateful=True is not supported"});
  test_util::expect_has(test_util::error_of([] { L::GRU(4, {.activation = "relu"}); }),
                        {"GRU", "activation \"relu\""});
  test_util::expect_has(test_util::error_of([] { L::Bidirectional(L::Dense(3)); }),
                        {"Bidirectional", "SimpleRNN, LSTM or GRU", "Dense"});
  test_util::expect_has(
      test_util::error_of([] { L::Bidirectional(L::LSTM(3), {.merge_mode = "max"}); }),
      {"merge_mode", "max"});
  json c = L::LSTM(3)->config();
  c["stateful"] = true;
  test_util::expect_has(test_util::error_of([&] {
                          layer_from_config(json{{"class_name", "LSTM"}, {"config", c}});
                        }),
                        {"stateful=True"});
  LayerHandle l = L::LSTM(3);
  test_util::expect_has(test_util::error_of([&] {
                          l->ensure_built({Shape{-1, 8}});
                        }),
                        {"(batch, time, features)"});
}

TEST(RecurrentLayers, WeightsInKerasOrderAndShapes) {
  LayerHandle lstm = L::LSTM(4);
  lstm->ensure_built({Shape{-1, 5, 3}});
  ASSERT_EQ(lstm->weights().size(), 3u);
  EXPECT_EQ(lstm->weights()[0]->value.shape(), (Shape{3, 16}));
  EXPECT_EQ(lstm->weights()[1]->value.shape(), (Shape{4, 16}));
  EXPECT_EQ(lstm->weights()[2]->value.shape(), (Shape{16}));
  auto b = lstm->weights()[2]->value.to_vector();  // unit_forget_bias: the f block is ones
  for (int k = 0; k < 16; ++k) EXPECT_EQ(b[size_t(k)], k >= 4 && k < 8 ? 1.f : 0.f) << k;
  auto u = lstm->weights()[1]->value.to_vector();  // orthogonal: rows of U orthonormal
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      double d = 0;
      for (int k = 0; k < 16; ++k) d += double(u[size_t(i * 16 + k)]) * u[size_t(j * 16 + k)];
      EXPECT_NEAR(d, i == j ? 1.0 : 0.0, 1e-5);
    }
  LayerHandle gru = L::GRU(2);
  gru->ensure_built({Shape{-1, 5, 3}});
  EXPECT_EQ(gru->weights()[2]->value.shape(), (Shape{2, 6}));
  LayerHandle bi = L::Bidirectional(L::SimpleRNN(2));
  bi->ensure_built({Shape{-1, 5, 3}});
  EXPECT_EQ(bi->weights().size(), 6u);
}

// 20 Adam steps of a Bidirectional LSTM + GRU model, with a mask (trailing padding) or without:
// the backends agree step by step, and the loss falls. Without a mask the cpu backend runs
// oneDNN's primitives, with one the loop kernel.
struct Trained {
  std::vector<double> losses;
  Tensor pred;
};

Trained train_20_steps(const std::string& backend, bool masked) {
  const int64_t n = 8, t = 5, f = 3;
  Tensor x = test_util::lcg_inputs(Shape{n, t, f}, 5);
  std::vector<float> mv;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t s = 0; s < t; ++s) mv.push_back(!masked || s < t - (i % 3) ? 1.f : 0.f);
  Tensor mask = Tensor::from_vector(Shape{n, t}, mv);
  Tensor y = test_util::lcg_inputs(Shape{n, 2}, 9);
  reset_layer_names();
  set_random_seed(21);
  KTensor xi = L::Input({t, f}, "x"), mi = L::Input({t}, "mask");
  KTensor h = LayerHandle(std::make_shared<AttachMask>("attach"))({xi, mi});
  h = L::Bidirectional(L::LSTM(4, {.return_sequences = true}))(h);
  h = L::SimpleRNN(3, {.return_sequences = true, .go_backwards = true})(h);
  h = L::GRU(3, {.reset_after = !masked})(h);
  Model m({xi, mi}, {L::Dense(2)(h)});
  m.compile({.optimizer = optimizers::Adam(0.02), .loss = losses::get("mse"), .backend = backend});
  Trained r;
  for (int step = 0; step < 20; ++step)
    r.losses.push_back(m.train_on_batch({x, mask}, {y}).at("loss"));
  r.pred = m.predict({x, mask})[0];
  return r;
}

// The backends to hold to the reference: cpu, and xla where the build and its plugin have it.
std::vector<std::string> backends_beside_reference() {
  std::vector<std::string> b{"cpu"};
#ifdef LOCKSTEP_XLA
  if (xla_test::shared_client().client) b.push_back("xla");
#endif
  return b;
}

TEST(RecurrentLayers, ModelsTrainAlikeOnEveryBackendMaskedOrNot) {
  SeedGuard guard;
  for (bool masked : {false, true}) {
    Trained ref = train_20_steps("reference", masked);
    EXPECT_LT(ref.losses.back(), 0.8 * ref.losses.front());
    for (const std::string& backend : backends_beside_reference()) {
      SCOPED_TRACE(backend + (masked ? " masked" : " unmasked"));
      Trained other = train_20_steps(backend, masked);
      for (int step = 0; step < 20; ++step)
        EXPECT_NEAR(other.losses[size_t(step)], ref.losses[size_t(step)], 1e-4) << step;
      EXPECT_LE(test_util::max_abs_diff(other.pred, ref.pred), 1e-4f);
    }
  }
}

// The compiled step's report names every node that runs the reference kernel on cpu.
TEST(RecurrentLayers, CpuFallsBackToTheLoopKernelOnlyForMasks) {
  for (const auto& c : keras_cases())
    for (bool masked : {false, true}) {
      std::vector<std::string> report;
      run(c.make(), masked, "cpu", DType::f32, &report);
      std::string fallback;
      for (const auto& line : report)
        if (line.find("fallback: lstm") != std::string::npos ||
            line.find("fallback: gru") != std::string::npos ||
            line.find("fallback: simple_rnn") != std::string::npos)
          fallback += line;
      if (masked)
        test_util::expect_has(fallback, {"a Keras mask skips steps per sample"});
      else
        EXPECT_EQ(fallback, "") << c.name;
    }
}

TEST(RecurrentLayers, KerasFileRoundTripKeepsPredictions) {
  reset_layer_names();
  KTensor xi = L::Input({5, 3}, "x");
  KTensor h = L::Bidirectional(L::GRU(3, {.return_sequences = true}), {.merge_mode = "sum"})(xi);
  h = L::SimpleRNN(2, {.go_backwards = true})(L::LSTM(4, {.return_sequences = true})(h));
  Model m(xi, h);
  Tensor x = test_util::lcg_inputs(Shape{3, 5, 3}, 2);
  const std::string path = (test_util::temp_dir("recurrent_round_trip") / "m.keras").string();
  m.save(path);
  Model again = load_model(path, /*compile=*/false);
  EXPECT_LE(test_util::max_abs_diff(again.predict(x), m.predict(x)), 1e-6f);
}

// dropout and recurrent_dropout act in training only: predict is the layer without them, and
// training steps (the masks drawn by the dropout op, the fed-back state's through the loop
// kernel on cpu) agree across the backends.
TEST(RecurrentLayers, DropoutActsInTrainingOnly) {
  SeedGuard guard;
  Tensor x = test_util::lcg_inputs(Shape{6, 5, 3}, 4), y = test_util::lcg_inputs(Shape{6, 2}, 8);
  auto build = [](double rate) {
    reset_layer_names();
    set_random_seed(5);
    KTensor in = L::Input({5, 3}, "x");
    KTensor h =
        L::LSTM(4, {.dropout = rate, .recurrent_dropout = rate, .return_sequences = true})(in);
    return Model(in, L::Dense(2)(L::GRU(3, {.dropout = rate, .recurrent_dropout = rate})(h)));
  };
  Model plain = build(0.0), dropped = build(0.3);
  EXPECT_LE(test_util::max_abs_diff(dropped.predict(x), plain.predict(x)), 1e-6f);
  std::vector<std::vector<double>> losses;
  for (std::string backend : backends_beside_reference()) {
    for (const std::string& b : {std::string("reference"), backend}) {
      Model m = build(0.3);
      m.compile({.optimizer = optimizers::Adam(0.01), .loss = losses::get("mse"), .backend = b});
      std::vector<double> l;
      for (int step = 0; step < 5; ++step) l.push_back(m.train_on_batch(x, y).at("loss"));
      losses.push_back(l);
    }
    for (int step = 0; step < 5; ++step) {
      EXPECT_TRUE(std::isfinite(losses[0][size_t(step)]));
      EXPECT_NEAR(losses[1][size_t(step)], losses[0][size_t(step)], 1e-4) << backend << " " << step;
    }
    losses.clear();
  }
}
