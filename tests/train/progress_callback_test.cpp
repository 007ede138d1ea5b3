// Progress bar formatting (temp file and pty) and callbacks, incl. one Model::fit run.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <regex>
#include <thread>

#include "lockstep/callbacks/callback.h"
#include "lockstep/losses/loss.h"
#include "lockstep/nn/layers.h"
#include "lockstep/optimizers/optimizer.h"
#include "lockstep/trainers/model.h"
#include "lockstep/trainers/progress.h"
#include "trainers/progress_clock.h"

using namespace lockstep;

namespace {

// Runs `fn` with a ProgressBar writing to a temp file and returns what was written.
template <typename Fn>
std::string capture(int target, int verbose, Fn fn) {
  FILE* f = std::tmpfile();
  {
    ProgressBar bar(target, verbose, f);
    fn(bar);
  }
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[512];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  std::fclose(f);
  return s;
}

const Logs kLogs = {{"accuracy", 0.8452}, {"loss", 0.4321}};

}  // namespace

TEST(Progress, FormatDuration) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(12.3), "12s");
  EXPECT_EQ(format_duration(0.025), "25ms");
  EXPECT_EQ(format_duration(4e-5), "40us");
}

TEST(Progress, NonTtyVerbose1PrintsOnlyFinalLine) {
  std::string out = capture(469, 1, [](ProgressBar& b) {
    for (int s = 1; s <= 469; ++s) b.update(s, kLogs);
    b.finish(kLogs);
  });
  std::regex want(
      R"(469/469 \[==============================\] - \d+s \d+(us|ms|s)/step - loss: 0\.4321 - accuracy: 0\.8452\n)");
  EXPECT_TRUE(std::regex_match(out, want)) << out;
}

TEST(Progress, PartialBarAndPadding) {
  std::string out = capture(10, 1, [](ProgressBar& b) {
    b.update(3, kLogs);
    b.finish(kLogs);  // stopped early: shows 3/10
  });
  std::regex want(
      R"( 3/10 \[========>\.{21}\] - \d+s \d+(us|ms|s)/step - loss: 0\.4321 - accuracy: 0\.8452\n)");
  EXPECT_TRUE(std::regex_match(out, want)) << out;
}

TEST(Progress, Verbose2OneLinePerEpoch) {
  Logs logs = {{"accuracy", 0.8452}, {"loss", 0.4321}, {"val_accuracy", 0.9}, {"val_loss", 0.0001}};
  std::string out = capture(469, 2, [&](ProgressBar& b) {
    for (int s = 1; s <= 469; ++s) b.update(s, logs);
    b.finish(logs);
  });
  std::regex want(
      R"(469/469 - \d+s - loss: 0\.4321 - accuracy: 0\.8452 - val_loss: 1\.0000e-04 - val_accuracy: 0\.9000 - \d+(us|ms|s)/epoch - \d+(us|ms|s)/step\n)");
  EXPECT_TRUE(std::regex_match(out, want)) << out;
}

TEST(Progress, Verbose0Silent) {
  EXPECT_EQ(capture(5, 0,
                    [](ProgressBar& b) {
                      b.update(5, kLogs);
                      b.finish(kLogs);
                    }),
            "");
}

TEST(Progress, UnknownTarget) {
  std::string out = capture(0, 1, [](ProgressBar& b) {
    b.update(42, kLogs);
    b.finish(kLogs);
  });
  EXPECT_TRUE(std::regex_match(
      out, std::regex(
               R"(\s+42/Unknown - \d+s \d+(us|ms|s)/step - loss: 0\.4321 - accuracy: 0\.8452\n)")))
      << out;
}

TEST(Callback, EarlyStoppingPatienceOnLoss) {
  auto cb = callbacks::EarlyStopping("val_loss", 2);
  auto es = std::dynamic_pointer_cast<EarlyStoppingCallback>(cb);
  ASSERT_TRUE(es);
  cb->on_train_begin({});
  std::vector<double> losses = {1.0, 0.9, 0.95, 0.92, 0.91};
  int stopped = -1;
  for (int e = 0; e < int(losses.size()); ++e) {
    cb->on_epoch_end(e, {{"val_loss", losses[e]}});
    if (es->stopped_epoch() > 0) {
      stopped = e;
      break;
    }
  }
  EXPECT_EQ(stopped, 3);  // no improvement at epochs 2 and 3
  EXPECT_EQ(es->best_epoch(), 1);
  EXPECT_DOUBLE_EQ(es->best(), 0.9);
}

TEST(Callback, EarlyStoppingMinDeltaAndAccuracyMode) {
  auto cb = callbacks::EarlyStopping("val_loss", 1, 0.05);
  auto es = std::dynamic_pointer_cast<EarlyStoppingCallback>(cb);
  cb->on_train_begin({});
  cb->on_epoch_end(0, {{"val_loss", 1.0}});
  cb->on_epoch_end(1, {{"val_loss", 0.96}});  // improved by less than min_delta
  EXPECT_EQ(es->stopped_epoch(), 1);

  auto acc = callbacks::EarlyStopping("val_accuracy", 1);
  auto ea = std::dynamic_pointer_cast<EarlyStoppingCallback>(acc);
  acc->on_train_begin({});
  acc->on_epoch_end(0, {{"val_accuracy", 0.5}});
  acc->on_epoch_end(1, {{"val_accuracy", 0.6}});
  EXPECT_EQ(ea->stopped_epoch(), 0);
  acc->on_epoch_end(2, {{"val_accuracy", 0.55}});
  EXPECT_EQ(ea->stopped_epoch(), 2);
  EXPECT_DOUBLE_EQ(ea->best(), 0.6);

  // patience 0 stops at the first epoch without improvement, never at epoch 0.
  auto p0 = callbacks::EarlyStopping("loss", 0);
  auto e0 = std::dynamic_pointer_cast<EarlyStoppingCallback>(p0);
  p0->on_train_begin({});
  p0->on_epoch_end(0, {{"loss", 1.0}});
  EXPECT_EQ(e0->stopped_epoch(), 0);
  p0->on_epoch_end(1, {{"loss", 1.0}});
  EXPECT_EQ(e0->stopped_epoch(), 1);
}

TEST(Callback, EarlyStoppingRestoresBestWeightsAndStopsModel) {
  Model m = Sequential({layers::Input({3}), layers::Dense(2)});
  auto cb = callbacks::EarlyStopping("val_loss", 1, 0.0, true);
  cb->set_model(&m);
  cb->on_train_begin({});
  auto w0 = m.get_weights();
  cb->on_epoch_end(0, {{"val_loss", 1.0}});
  auto changed = m.get_weights();
  for (auto& t : changed) t.fill(7.f);
  m.set_weights(changed);
  cb->on_epoch_end(1, {{"val_loss", 2.0}});
  EXPECT_TRUE(m.stop_training);
  cb->on_train_end({});
  auto w = m.get_weights();
  ASSERT_EQ(w.size(), w0.size());
  for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(w[i].to_vector(), w0[i].to_vector()) << i;
}

TEST(Callback, LambdaAndTerminateOnNaN) {
  int epochs = 0, batches = 0;
  auto l = callbacks::LambdaCallback([&](int, const Logs&) { ++epochs; },
                                     [&](int, const Logs&) { ++batches; });
  l->on_epoch_end(0, {});
  l->on_train_batch_end(0, {});
  l->on_train_batch_end(1, {});
  EXPECT_EQ(epochs, 1);
  EXPECT_EQ(batches, 2);
  callbacks::LambdaCallback(LambdaHooks{})->on_epoch_end(0, {});  // empty functions are fine

  Model m = Sequential({layers::Input({3}), layers::Dense(2)});
  auto t = callbacks::TerminateOnNaN();
  t->set_model(&m);
  t->on_train_batch_end(0, {{"loss", 0.5}});
  EXPECT_FALSE(m.stop_training);
  t->on_train_batch_end(1, {{"loss", std::nan("")}});
  EXPECT_TRUE(m.stop_training);
}

// The redraw throttle (one TTY draw per 100 ms) and the ETA on an injected clock: the test sets
// the time, so a busy machine cannot stretch a window.
TEST(Progress, TtyRedrawsWithCarriageReturnAndEta) {
  int master = posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) GTEST_SKIP() << "no pty";
  int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
  ASSERT_GE(slave, 0);
  FILE* f = fdopen(slave, "w");
  ASSERT_TRUE(ProgressBar::is_tty(f));
  auto t = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  detail::set_progress_clock([&t] { return t; });
  const auto ms = [](int n) { return std::chrono::milliseconds(n); };
  {
    ProgressBar bar(5, 1, f);
    t += ms(50);
    bar.update(1, kLogs);  // within 0.1 s of the start: not drawn
    t += ms(70);
    bar.update(2, kLogs);  // 120 ms: drawn, ETA 3 steps x 70 ms
    t += ms(99);
    bar.update(3, kLogs);  // 99 ms after the draw: throttled
    t += ms(2);
    bar.update(4, kLogs);  // 101 ms: drawn, ETA 1 step x 57 ms
    t += ms(100);
    bar.update(5, kLogs);  // the last step is left to finish()
    bar.finish(kLogs);     // 321 ms in all, (321 - 50) / 4 = 68 ms per step after the first
  }
  detail::set_progress_clock(nullptr);
  std::fflush(f);
  std::string out;
  char buf[1024];
  fcntl(master, F_SETFL, O_NONBLOCK);
  for (ssize_t n; (n = read(master, buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
  std::fclose(f);
  close(master);
  std::regex want(
      R"(\r2/5 \[===========>\.{18}\] - ETA: 0s - loss: 0\.4321 - accuracy: 0\.8452)"
      R"(\r4/5 \[=======================>\.{6}\] - ETA: 0s - loss: 0\.4321 - accuracy: 0\.8452)"
      R"(\r5/5 \[={30}\] - 0s 68ms/step - loss: 0\.4321 - accuracy: 0\.8452 *\r?\n)");
  EXPECT_TRUE(std::regex_match(out, want)) << out;
}

// The ETA is the time per step after the first times the steps left (Keras's estimate).
TEST(Progress, TtyEtaFromTheInjectedClock) {
  int master = posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) GTEST_SKIP() << "no pty";
  int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
  ASSERT_GE(slave, 0);
  FILE* f = fdopen(slave, "w");
  auto t = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  detail::set_progress_clock([&t] { return t; });
  {
    ProgressBar bar(100, 1, f);
    t += std::chrono::seconds(5);  // the first step (compiles): left out of the estimate
    bar.update(1, kLogs);
    t += std::chrono::seconds(2);
    bar.update(3, kLogs);  // 1 s per step after the first, 97 steps left
  }
  detail::set_progress_clock(nullptr);
  std::fflush(f);
  std::string out;
  char buf[1024];
  fcntl(master, F_SETFL, O_NONBLOCK);
  for (ssize_t n; (n = read(master, buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
  std::fclose(f);
  close(master);
  EXPECT_NE(out.find("\r  1/100 ["), std::string::npos) << out;
  EXPECT_NE(out.find("\r  3/100 ["), std::string::npos) << out;
  EXPECT_NE(out.find(" - ETA: 1:37 - loss: 0.4321"), std::string::npos) << out;
}

TEST(Callback, FitWithOptimizerLossMetricAndEarlyStopping) {
  // A linear 3-class problem through Model::fit: the loss falls and accuracy is reported.
  Model m = Sequential({layers::Input({4}), layers::Dense(3)});
  m.compile({.optimizer = optimizers::Adam(0.05),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy"}});
  int64_t n = 96;
  Tensor x = Tensor::empty(Shape{n, 4});
  Tensor y = Tensor::empty(Shape{n}, DType::i32);
  for (int64_t i = 0; i < n; ++i) {
    int c = int(i % 3);
    y.data<int32_t>()[i] = c;
    for (int j = 0; j < 4; ++j)
      x.data<float>()[i * 4 + j] = (j == c ? 1.f : 0.f) + 0.1f * std::sin(float(i * 4 + j));
  }
  int epochs_seen = 0;
  History h =
      m.fit(x, y,
            {.batch_size = 16,
             .epochs = 8,
             .verbose = 0,
             .callbacks = {callbacks::LambdaCallback([&](int, const Logs&) { ++epochs_seen; }),
                           callbacks::EarlyStopping("loss", 0, 10.0)}});
  // min_delta 10 means nothing ever improves enough: stops after epoch 2 (index 1).
  EXPECT_EQ(epochs_seen, 2);
  ASSERT_EQ(h.history["loss"].size(), 2u);
  ASSERT_EQ(h.history["accuracy"].size(), 2u);
  EXPECT_LT(h.history["loss"][1], h.history["loss"][0]);
  // Optimizer and loss by name (probabilities path: the model ends in a softmax). One batch
  // of all n samples, so the epoch's loss is the loss of the initial weights, computed here
  // independently: mean_i -log softmax(x_i W + b)[y_i].
  Model m2 = Sequential({layers::Input({4}), layers::Dense(3, {.activation = "softmax"})});
  m2.compile({.optimizer = optimizers::get("adam"),
              .loss = losses::get("sparse_categorical_crossentropy"),
              .metrics = {"accuracy"}});
  const std::vector<Tensor> w0 = m2.get_weights();  // kernel [4, 3], bias [3]
  ASSERT_EQ(w0.size(), 2u);
  double want = 0;
  for (int64_t i = 0; i < n; ++i) {
    double z[3], mx = -1e30, s = 0;
    for (int k = 0; k < 3; ++k) {
      z[k] = w0[1].data<float>()[k];
      for (int j = 0; j < 4; ++j)
        z[k] += double(x.data<float>()[i * 4 + j]) * w0[0].data<float>()[j * 3 + k];
      mx = std::max(mx, z[k]);
    }
    for (int k = 0; k < 3; ++k) s += std::exp(z[k] - mx);
    want += -(z[y.data<int32_t>()[i]] - mx - std::log(s)) / double(n);
  }
  History h2 = m2.fit(x, y, {.batch_size = int(n), .epochs = 1, .verbose = 0});
  ASSERT_EQ(h2.history["loss"].size(), 1u);
  EXPECT_NEAR(h2.history["loss"][0], want, 1e-5);
  EXPECT_GT(want, 0.1);  // not a degenerate case (an untrained 3-class model is near log 3)
  EXPECT_EQ(m.compile_config().optimizer->variables().size(),
            5u);  // iterations + m, v for 2 weights
  EXPECT_FLOAT_EQ(m.compile_config().optimizer->iterations()->value.item(), 12.f);
}
