// The callback / log / weight trace of Model's fit, evaluate, predict and *_on_batch over the
// data forms they take (arrays, a Dataset, a multi-input list, a dict, validation data,
// steps_per_execution, the *_on_batch calls), against a golden trace recorded with the code
// before Model's data path became one (tests/train/golden/fit_trace.txt). The trace is text:
// every callback call with its logs, each fit's History, the weights after it and digests of
// the predictions. Words must match exactly; numbers within a relative 1e-4 (the golden file was
// written on one CPU; another one's kernels may round differently), which any change of batching,
// shuffling, weighting, step ids or callback order exceeds by far.
//
// Regenerate (only when a change of behaviour is intended): LOCKSTEP_WRITE_GOLDEN=1
// ./build/bin/lockstep_tests --gtest_filter='FitTrace.*'. LOCKSTEP_TRACE_OUT=<file> writes the
// trace of this build there, to diff it against the golden file byte for byte.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;

namespace {

std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// The trace under construction (one line per event).
struct Trace {
  std::ostringstream out;
  void line(const std::string& s) { out << s << "\n"; }
};

std::string logs_text(const Logs& logs) {
  std::string s;
  for (auto& [k, v] : logs)
    if (k.rfind("input_wait", 0) != 0) s += " " + k + "=" + number(v);  // (timings: left out)
  return s;
}

// Every callback hook, in call order, with its index and logs.
struct Recorder : Callback {
  explicit Recorder(Trace& t) : trace(t) {}
  Trace& trace;
  void hook(const std::string& name, int index, const Logs& logs) {
    trace.line("  cb " + name + (index >= 0 ? " " + std::to_string(index) : "") + logs_text(logs));
  }
  void on_train_begin(const Logs& l) override { hook("train_begin", -1, l); }
  void on_train_end(const Logs& l) override { hook("train_end", -1, l); }
  void on_epoch_begin(int e, const Logs& l) override { hook("epoch_begin", e, l); }
  void on_epoch_end(int e, const Logs& l) override { hook("epoch_end", e, l); }
  void on_train_batch_begin(int b, const Logs& l) override { hook("train_batch_begin", b, l); }
  void on_train_batch_end(int b, const Logs& l) override { hook("train_batch_end", b, l); }
  void on_test_begin(const Logs& l) override { hook("test_begin", -1, l); }
  void on_test_end(const Logs& l) override { hook("test_end", -1, l); }
  void on_test_batch_begin(int b, const Logs& l) override { hook("test_batch_begin", b, l); }
  void on_test_batch_end(int b, const Logs& l) override { hook("test_batch_end", b, l); }
  void on_predict_begin(const Logs& l) override { hook("predict_begin", -1, l); }
  void on_predict_end(const Logs& l) override { hook("predict_end", -1, l); }
  void on_predict_batch_begin(int b, const Logs& l) override { hook("predict_batch_begin", b, l); }
  void on_predict_batch_end(int b, const Logs& l) override { hook("predict_batch_end", b, l); }
};

// A tensor as its shape, sum, sum of squares and first values (enough to see any change).
std::string digest(const Tensor& t) {
  std::vector<float> v = t.to_vector();
  double sum = 0, squares = 0;
  for (float f : v) sum += f, squares += double(f) * f;
  std::string s = t.shape().str() + " sum=" + number(sum) + " sq=" + number(squares) + " head";
  for (size_t i = 0; i < v.size() && i < 6; ++i) s += " " + number(v[i]);
  return s;
}

void weights(Trace& t, const Model& m) {
  for (auto& w : m.weights()) {
    std::string s = "  weight " + w->name + " " + w->value.shape().str();
    for (float f : w->value.to_vector()) s += " " + number(f);
    t.line(s);
  }
}

void history(Trace& t, const History& h) {
  for (auto& [name, values] : h.history) {
    if (name.rfind("input_wait", 0) == 0) continue;
    std::string s = "  history " + name;
    for (double v : values) s += " " + number(v);
    t.line(s);
  }
  std::string epochs = "  epochs";
  for (int e : h.epoch) epochs += " " + std::to_string(e);
  t.line(epochs + " samples=" + std::to_string(h.samples) +
         " stopped_on_nan=" + std::to_string(h.stopped_on_nan));
}

// sin-valued data as numpy's np.sin(np.arange(n) * 0.37 + k) * s.
Tensor vals(Shape shape, int k, float s = 1.0f) {
  std::vector<float> v(size_t(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(std::sin(double(i) * 0.37 + k) * s);
  return Tensor::from_vector(shape, v);
}

// Sample weights in [1 - s, 1 + s].
Tensor positive(int64_t n, int k, float s = 0.5f) {
  Tensor w = vals(Shape{n}, k, s);
  for (int64_t i = 0; i < n; ++i) w.data<float>()[i] += 1.0f;
  return w;
}

Tensor labels(int64_t n, int classes, int offset = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = int32_t((i * 7 + offset) % classes);
  return Tensor::from_vector_i32(Shape{n}, v);
}

CompileConfig single_config(int steps_per_execution = 1) {
  return {.optimizer = optimizers::Adam(1e-2),
          .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
          .metrics = {"accuracy"},
          .weighted_metrics = {"accuracy"},
          .steps_per_execution = steps_per_execution};
}

// Dense -> Dropout (draws from the step id) -> Dense, weights from a fixed seed.
Model single_model(int steps_per_execution = 1) {
  set_random_seed(5);
  reset_layer_names();
  Model m = Sequential({layers::Input({4}), layers::Dense(8, {.activation = "relu"}),
                        layers::Dropout(0.25, 3), layers::Dense(3)});
  m.compile(single_config(steps_per_execution));
  return m;
}

// Inputs a [3] and b [2]; outputs reg (mse, mae) and cls (sparse crossentropy, accuracy).
Model two_headed() {
  set_random_seed(9);
  reset_layer_names();
  KTensor a = layers::Input({3}, "a"), b = layers::Input({2}, "b");
  KTensor h = layers::Concatenate()({a, b});
  h = layers::Dense(6, {.activation = "tanh", .name = "hidden"})(h);
  KTensor reg = layers::Dense(2, {.name = "reg"})(h);
  KTensor cls = layers::Dense(3, {.name = "cls"})(h);
  Model m({a, b}, {reg, cls}, "two_headed");
  m.compile(
      {.optimizer = optimizers::SGD(0.1, 0.9),
       .losses = {losses::get("mse"), losses::SparseCategoricalCrossentropy({.from_logits = true})},
       .loss_weights = {0.5, 2.0},
       .output_metrics = {{"mae"}, {"accuracy"}},
       .output_weighted_metrics = {{}, {"accuracy"}}});
  return m;
}

struct SingleData {
  Tensor x = vals(Shape{44, 4}, 1), y = labels(44, 3);
  Tensor w = positive(44, 2);
};

struct MultiData {
  Tensor xa = vals(Shape{20, 3}, 3), xb = vals(Shape{20, 2}, 4);
  Tensor y1 = vals(Shape{20, 2}, 5), y2 = labels(20, 3, 1);
};

void arrays(Trace& t) {
  t.line("scenario arrays");
  SingleData d;
  Model m = single_model();
  auto rec = std::make_shared<Recorder>(t);
  History h = m.fit(d.x, d.y,
                    {.batch_size = 8,
                     .epochs = 2,
                     .verbose = 0,
                     .callbacks = {rec},
                     .validation_split = 0.25,
                     .seed = 7,
                     .sample_weight = d.w});
  history(t, h), weights(t, m);
  t.line(
      "  evaluate" +
      logs_text(m.evaluate(
          d.x, d.y, {.batch_size = 16, .verbose = 0, .sample_weight = d.w, .callbacks = {rec}})));
  Tensor p = m.predict(d.x, {.batch_size = 10, .callbacks = {rec}});
  t.line("  predict " + digest(p));
  t.line("  predict(x, 7) " + digest(m.predict(d.x, 7)));
}

void class_weights_and_validation(Trace& t) {
  t.line("scenario validation_data");
  SingleData d;
  Model m = single_model();
  auto rec = std::make_shared<Recorder>(t);
  const Tensor vx = d.x.slice(0, 12).contiguous(), vy = d.y.slice(0, 12).contiguous();
  History h = m.fit(d.x, d.y,
                    {.batch_size = 16,
                     .epochs = 3,
                     .verbose = 0,
                     .callbacks = {rec},
                     .validation_data = ValidationData(vx, vy, d.w.slice(0, 12).contiguous()),
                     .shuffle = false,
                     .class_weight = {{0, 2.0}, {2, 0.5}}});
  history(t, h), weights(t, m);
}

void dataset(Trace& t) {
  t.line("scenario dataset");
  SingleData d;
  Model m = single_model();
  auto rec = std::make_shared<Recorder>(t);
  data::Dataset train = data::Dataset::from_tensor_slices({d.x, d.y, d.w}).batch(8);
  data::Dataset val = data::Dataset::from_tensor_slices({d.x, d.y}).take(20).batch(6);
  History h = m.fit(train, {.epochs = 2, .verbose = 0, .callbacks = {rec}, .validation_data = val});
  history(t, h), weights(t, m);
  t.line("  evaluate" + logs_text(m.evaluate(val, {.verbose = 0, .callbacks = {rec}})));
  t.line("  evaluate(steps=2)" + logs_text(m.evaluate(val, {.verbose = 0, .steps = 2})));
  Tensor p =
      m.predict(data::Dataset::from_tensor_slices(d.x).batch(9), PredictConfig{.callbacks = {rec}});
  t.line("  predict " + digest(p));
  // steps_per_epoch on a repeated dataset: one iterator runs on across epochs.
  History r = m.fit(data::Dataset::from_tensor_slices({d.x, d.y}).batch(10).repeat(),
                    {.epochs = 2, .verbose = 0, .steps_per_epoch = 3});
  history(t, r), weights(t, m);
}

void multi_list(Trace& t) {
  t.line("scenario multi_list");
  MultiData d;
  Model m = two_headed();
  auto rec = std::make_shared<Recorder>(t);
  const Tensor w2 = positive(20, 6);
  History h = m.fit({d.xa, d.xb}, {d.y1, d.y2},
                    {.batch_size = 6,
                     .epochs = 2,
                     .verbose = 0,
                     .callbacks = {rec},
                     .validation_data = ValidationData::arrays({d.xa, d.xb}, {d.y1, d.y2}),
                     .seed = 3,
                     .output_sample_weights = {Tensor(), w2}});
  history(t, h), weights(t, m);
  t.line("  evaluate" +
         logs_text(m.evaluate({d.xa, d.xb}, {d.y1, d.y2}, {.batch_size = 7, .verbose = 0})));
  std::vector<Tensor> p = m.predict(std::vector<Tensor>{d.xa, d.xb}, {.batch_size = 8});
  for (auto& out : p) t.line("  predict " + digest(out));
  data::Dataset ds = data::Dataset::from_tensor_slices({d.xa, d.xb, d.y1, d.y2}).batch(5);
  History hd = m.fit(ds, {.epochs = 1, .verbose = 0, .callbacks = {rec}});
  history(t, hd), weights(t, m);
  t.line("  evaluate(dataset)" + logs_text(m.evaluate(ds, {.verbose = 0})));
}

void dict(Trace& t) {
  t.line("scenario dict");
  MultiData d;
  Model m = two_headed();
  auto rec = std::make_shared<Recorder>(t);
  const TensorDict x{{"b", d.xb}, {"a", d.xa}}, y{{"cls", d.y2}, {"reg", d.y1}};
  History h = m.fit(x, y,
                    {.batch_size = 8,
                     .epochs = 2,
                     .verbose = 0,
                     .callbacks = {rec},
                     .validation_data = ValidationData::dicts(x, y, {{"cls", positive(20, 7)}}),
                     .shuffle = false,
                     .sample_weight_by_output = {{"reg", positive(20, 8)}}});
  history(t, h), weights(t, m);
  t.line("  evaluate" + logs_text(m.evaluate(x, y, {.batch_size = 20, .verbose = 0})));
  std::map<std::string, Tensor> p = m.predict(x, {.batch_size = 6});
  for (auto& [name, out] : p) t.line("  predict " + name + " " + digest(out));
}

void steps_per_execution(Trace& t) {
  t.line("scenario steps_per_execution");
  SingleData d;
  Model m = single_model(3);
  auto rec = std::make_shared<Recorder>(t);
  History h = m.fit(d.x, d.y,
                    {.batch_size = 6,
                     .epochs = 2,
                     .verbose = 0,
                     .callbacks = {rec},
                     .validation_data = ValidationData(d.x, d.y),
                     .seed = 1});
  history(t, h), weights(t, m);
  t.line("  evaluate" +
         logs_text(m.evaluate(d.x, d.y, {.batch_size = 5, .verbose = 0, .callbacks = {rec}})));
  t.line("  predict " + digest(m.predict(d.x, {.batch_size = 4, .callbacks = {rec}})));
  History r = m.fit(data::Dataset::from_tensor_slices({d.x, d.y}).batch(4).repeat(),
                    {.epochs = 2, .verbose = 0, .callbacks = {rec}, .steps_per_epoch = 5});
  history(t, r), weights(t, m);
}

void on_batch(Trace& t) {
  t.line("scenario on_batch");
  SingleData d;
  Model m = single_model();
  const Tensor x = d.x.slice(0, 8).contiguous(), y = d.y.slice(0, 8).contiguous();
  t.line("  train_on_batch" + logs_text(m.train_on_batch(x, y)));
  t.line("  train_on_batch(class_weight)" +
         logs_text(m.train_on_batch(x, y, {.class_weight = {{1, 3.0}}})));
  t.line("  test_on_batch" +
         logs_text(m.test_on_batch(x, y, {.sample_weight = d.w.slice(0, 8).contiguous()})));
  t.line("  predict_on_batch " + digest(m.predict_on_batch(x)));
  weights(t, m);
  MultiData md;
  Model two = two_headed();
  const std::vector<Tensor> xs{md.xa, md.xb}, ys{md.y1, md.y2};
  t.line("  train_on_batch(list)" + logs_text(two.train_on_batch(xs, ys)));
  t.line("  test_on_batch(list)" + logs_text(two.test_on_batch(xs, ys)));
  std::vector<Tensor> p = two.predict_on_batch(xs);
  for (auto& out : p) t.line("  predict_on_batch " + digest(out));
  weights(t, two);
}

std::string full_trace() {
  Trace t;
  arrays(t);
  class_weights_and_validation(t);
  dataset(t);
  multi_list(t);
  dict(t);
  steps_per_execution(t);
  on_batch(t);
  return t.out.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Words equal, numbers (a token's text after '=', or a whole token) within a relative 1e-4.
bool same_token(const std::string& a, const std::string& b) {
  if (a == b) return true;
  const size_t ea = a.find('='), eb = b.find('=');
  if (ea != eb || a.compare(0, ea == std::string::npos ? 0 : ea + 1, b, 0,
                            eb == std::string::npos ? 0 : eb + 1) != 0)
    return false;
  const std::string na = ea == std::string::npos ? a : a.substr(ea + 1);
  const std::string nb = eb == std::string::npos ? b : b.substr(eb + 1);
  char *end_a = nullptr, *end_b = nullptr;
  const double va = std::strtod(na.c_str(), &end_a), vb = std::strtod(nb.c_str(), &end_b);
  if (*end_a != '\0' || *end_b != '\0' || na.empty() || nb.empty()) return false;
  return std::fabs(va - vb) <= 1e-4 * std::max({1e-3, std::fabs(va), std::fabs(vb)});
}

std::vector<std::string> tokens(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string tok; in >> tok;) out.push_back(tok);
  return out;
}

const char* kGolden = LOCKSTEP_SOURCE_DIR "/tests/train/golden/fit_trace.txt";

}  // namespace

TEST(FitTrace, MatchesTheGoldenTraceOfTheOriginalDataPath) {
  const std::string trace = full_trace();
  if (const char* out = std::getenv("LOCKSTEP_TRACE_OUT")) std::ofstream(out) << trace;
  if (std::getenv("LOCKSTEP_WRITE_GOLDEN")) {
    std::ofstream(kGolden) << trace;
    GTEST_SKIP() << "wrote " << kGolden;
  }
  const std::vector<std::string> want = lines_of(test_util::read_text_file(kGolden));
  const std::vector<std::string> got = lines_of(trace);
  ASSERT_FALSE(want.empty()) << "no golden trace at " << kGolden;
  ASSERT_EQ(got.size(), want.size()) << "the trace has another number of lines";
  int mismatches = 0;
  for (size_t i = 0; i < want.size() && mismatches < 10; ++i) {
    const std::vector<std::string> a = tokens(want[i]), b = tokens(got[i]);
    bool same = a.size() == b.size();
    for (size_t k = 0; same && k < a.size(); ++k) same = same_token(a[k], b[k]);
    if (!same) ++mismatches;
    EXPECT_TRUE(same) << "line " << i + 1 << "\n  golden: " << want[i] << "\n  got:    " << got[i];
  }
}

// The comparison itself: a changed number, word or line count is caught.
TEST(FitTrace, ComparisonCatchesChanges) {
  EXPECT_TRUE(same_token("loss=0.5", "loss=0.50001"));
  EXPECT_FALSE(same_token("loss=0.5", "loss=0.5001"));
  EXPECT_FALSE(same_token("loss=0.5", "accuracy=0.5"));
  EXPECT_FALSE(same_token("train_batch_end", "test_batch_end"));
  EXPECT_TRUE(same_token("1.25", "1.25000001"));
  EXPECT_FALSE(same_token("3", "4"));
}
