// Known values for every forward op, on the reference AND the cpu backend.
//
// The op table (op_harness.cpp) compares each backend with the reference backend, and both
// backends share the elementwise formulas, so a wrong formula would pass it. This test checks
// each op against numbers computed independently, in double precision, by
// tests/ops/known_values/make_known_values.py (committed with its output, known_values.json).
// To add or change a case, edit the script and rerun it:
//     python3 tests/ops/known_values/make_known_values.py
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "lockstep/graph/backends.h"
#include "lockstep/graph/op_registry.h"
#include "ops/op_harness.h"
#include "test_util.h"

namespace lockstep::testing {
namespace {

using json = nlohmann::json;

// Every host backend ({"reference", "cpu"} today), from the one list in lockstep/graph/backends.h.
const std::vector<std::string>& backends() {
  static const std::vector<std::string> b = host_backends();
  return b;
}

// One case as read from the JSON; tensors and attrs are built when the case runs (the table is
// read once, when gtest expands the parameterised test into one test per case).
struct KnownCase {
  std::string name, op, why;
  json attrs, inputs, outputs;
  double tol = 1e-5;
};

std::string table_path() {
  return std::string(LOCKSTEP_SOURCE_DIR) + "/tests/ops/known_values/known_values.json";
}

Tensor tensor_of(const json& j) {
  std::vector<int64_t> dims = j.at("shape").get<std::vector<int64_t>>();
  Tensor t = Tensor::empty(Shape(dims), dtype_from_name(j.at("dtype").get<std::string>()));
  const json& v = j.at("values");
  LS_CHECK(int64_t(v.size()) == t.numel(), "tensor ", t.shape().str(), " has ", v.size(),
           " values");
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case DType::f32:
        t.data<float>()[i] = v[i].get<float>();
        break;
      case DType::i32:
        t.data<int32_t>()[i] = v[i].get<int32_t>();
        break;
      case DType::i64:
        t.data<int64_t>()[i] = v[i].get<int64_t>();
        break;
      case DType::u8:
        t.data<uint8_t>()[i] = v[i].get<uint8_t>();
        break;
      default:
        LS_FAIL("unsupported dtype ", dtype_name(t.dtype()));
    }
  }
  return t;
}

// JSON types map onto attr types: integer -> int64, float -> double, bool, string, list of
// integers (or empty) -> int list, list with a float -> double list.
Attrs attrs_of(const json& j) {
  Attrs a;
  for (const auto& [k, v] : j.items()) {
    if (v.is_boolean())
      a.set(k, AttrValue(v.get<bool>()));
    else if (v.is_number_integer())
      a.set(k, AttrValue(v.get<int64_t>()));
    else if (v.is_number_float())
      a.set(k, AttrValue(v.get<double>()));
    else if (v.is_string())
      a.set(k, AttrValue(v.get<std::string>()));
    else if (v.is_array() &&
             std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_number_integer(); }))
      a.set(k, AttrValue(v.get<std::vector<int64_t>>()));
    else if (v.is_array())
      a.set(k, AttrValue(v.get<std::vector<double>>()));
    else
      LS_FAIL("attribute '", k, "' has an unsupported JSON type");
  }
  return a;
}

struct Table {
  std::vector<KnownCase> cases;
  std::string error;  // why the table could not be read ("" when it was)
};

// Loaded once; a missing or broken file becomes a failing test (TableLoadsWithUniqueNames),
// not a crash.
const Table& table() {
  static const Table t = [] {
    Table r;
    try {
      std::ifstream f(table_path());
      LS_CHECK(f, "cannot open ", table_path());
      json j = json::parse(f);
      for (const json& c : j.at("cases")) {
        KnownCase k;
        k.name = c.at("name").get<std::string>();
        k.op = c.at("op").get<std::string>();
        k.why = c.value("why", "");
        k.attrs = c.at("attrs");
        k.inputs = c.at("inputs");
        k.outputs = c.at("outputs");
        k.tol = c.at("tol").get<double>();
        r.cases.push_back(std::move(k));
      }
    } catch (const std::exception& e) {
      r.error = table_path() + ": " + e.what();
    }
    return r;
  }();
  return t;
}

// "" when `got` matches `want` (shape, dtype, and |got - want| <= tol * (1 + |want|)).
std::string compare(const Tensor& got, const Tensor& want, double tol) {
  std::ostringstream os;
  if (got.shape() != want.shape()) {
    os << "shape " << got.shape().str() << ", want " << want.shape().str();
    return os.str();
  }
  if (got.dtype() != want.dtype()) {
    os << "dtype " << dtype_name(got.dtype()) << ", want " << dtype_name(want.dtype());
    return os.str();
  }
  std::vector<float> g = got.to_vector(), w = want.to_vector();
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    double d = std::fabs(double(g[i]) - double(w[i]));
    if (!(d <= tol * (1.0 + std::fabs(double(w[i]))))) {
      if (bad++ < 4) os << "\n    [" << i << "] got " << g[i] << ", want " << w[i];
    }
  }
  if (bad)
    return std::to_string(bad) + " of " + std::to_string(g.size()) + " elements differ:" + os.str();
  return "";
}

// Instances: KnownValues/KnownValueCase.MatchOnBothBackends/<case name>.
class KnownValueCase : public ::testing::TestWithParam<int> {};

TEST_P(KnownValueCase, MatchOnBothBackends) {
  const KnownCase& c = table().cases.at(size_t(GetParam()));
  const Attrs attrs = attrs_of(c.attrs);
  std::vector<Tensor> inputs, want;
  for (const json& t : c.inputs) inputs.push_back(tensor_of(t));
  for (const json& t : c.outputs) want.push_back(tensor_of(t));
  for (const std::string& backend : backends()) {
    SCOPED_TRACE(c.op + " on " + backend + (c.why.empty() ? "" : " (" + c.why + ")"));
    std::vector<Tensor> got;
    std::string err =
        test_util::error_of([&] { got = run_single_op(c.op, attrs, inputs, backend); });
    ASSERT_EQ(err, "") << c.name;
    ASSERT_EQ(got.size(), want.size()) << c.name << ": number of outputs";
    for (size_t k = 0; k < got.size(); ++k)
      EXPECT_EQ(compare(got[k], want[k], c.tol), "") << c.name << ": output " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(KnownValues, KnownValueCase,
                         ::testing::Range(0, int(table().cases.size())),
                         [](const ::testing::TestParamInfo<int>& info) {
                           std::string n = table().cases[size_t(info.param)].name;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(KnownValues, TableLoadsWithUniqueNames) {
  ASSERT_EQ(table().error, "");
  EXPECT_GT(table().cases.size(), 100u);
  for (const char* b : {"reference", "cpu"})  // the two backends this table must check
    EXPECT_NE(std::find(backends().begin(), backends().end(), b), backends().end()) << b;
  std::set<std::string> names;
  for (const auto& c : table().cases)
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate " << c.name;
}

// Ops without a known-value case, each with the reason. `covered_by`: the forward op whose
// finite-difference check (OpTableGradient.MatchesFiniteDifferences, both backends) runs this
// gradient op; the test below insists that such a check exists.
struct Exemption {
  const char* op;
  const char* covered_by;  // nullptr when not a gradient op
  const char* reason;
};

const std::vector<Exemption>& exemptions() {
  static const std::vector<Exemption> e = {
      // Gradient ops: checked against finite differences of their forward op.
      {"abs_grad", "abs", "gradient op"},
      {"maximum_grad", "maximum", "gradient op"},
      {"minimum_grad", "minimum", "gradient op"},
      {"relu_grad", "relu", "gradient op"},
      {"relu6_grad", "relu6", "gradient op"},
      {"sigmoid_grad", "sigmoid", "gradient op"},
      {"tanh_grad", "tanh", "gradient op"},
      {"gelu_grad", "gelu", "gradient op"},
      {"swish_grad", "swish", "gradient op"},
      {"leaky_relu_grad", "leaky_relu", "gradient op"},
      {"elu_grad", "elu", "gradient op"},
      {"softplus_grad", "softplus", "gradient op"},
      {"reduce_sum_grad", "reduce_sum", "gradient op"},
      {"reduce_mean_grad", "reduce_mean", "gradient op"},
      {"reduce_max_grad", "reduce_max", "gradient op"},
      {"softmax_grad", "softmax", "gradient op"},
      {"log_softmax_grad", "log_softmax", "gradient op"},
      {"slice_grad", "slice", "gradient op"},
      {"sparse_softmax_cross_entropy_grad", "sparse_softmax_cross_entropy", "gradient op"},
      {"softmax_cross_entropy_grad", "softmax_cross_entropy", "gradient op"},
      {"sigmoid_cross_entropy_grad", "sigmoid_cross_entropy", "gradient op"},
      {"conv2d_backward_input", "conv2d", "gradient op (conv2d's input adjoint)"},
      {"conv2d_backward_filter", "conv2d", "gradient op (conv2d's filter adjoint)"},
      {"max_pool2d_grad", "max_pool2d", "gradient op"},
      {"avg_pool2d_grad", "avg_pool2d", "gradient op"},
      {"upsample2d_grad", "upsample2d", "gradient op (upsample2d's transpose)"},
      {"batch_norm_train_grad", "batch_norm_train", "gradient op"},
      {"batch_norm_infer_grad", "batch_norm_infer", "gradient op"},
      {"layer_norm_grad", "layer_norm", "gradient op"},
      {"image_affine_transform_grad", "image_affine_transform",
       "gradient op (adjoint of the sampling)"},
      {"image_adjust_contrast_grad", "image_adjust_contrast", "gradient op"},
      {"image_adjust_brightness_grad", "image_adjust_brightness", "gradient op"},
      {"image_crop_grad", "image_crop", "gradient op (zero padding back to the input size)"},
      {"lstm_grad", "lstm", "gradient op"},
      {"gru_grad", "gru", "gradient op"},
      {"simple_rnn_grad", "simple_rnn", "gradient op"},
      // Recurrent ops: values Keras 3.15 computed, per cell, masked and not, go_backwards, both
      // GRU forms, in tests/nn/recurrent_test.cpp (RecurrentLayers.OutputsAndStatesMatchKeras*).
      {"lstm", nullptr, "Keras values at the layer level (tests/nn/recurrent_test.cpp)"},
      {"gru", nullptr, "Keras values at the layer level (tests/nn/recurrent_test.cpp)"},
      {"simple_rnn", nullptr, "Keras values at the layer level (tests/nn/recurrent_test.cpp)"},
      // Transformer ops: values against independent computations elsewhere.
      {"batch_matmul", nullptr,
       "values against a brute-force numpy-style einsum loop (tests/ops/transformer_ops_test.cpp,"
       " TransformerOps.EinsumMatchesANumpyStyleLoopOverManyEquations)"},
      {"rms_norm", nullptr,
       "hand-computed values (EinsumLayers.RmsAndUnitNormalizationAndSoftmaxValues) and Keras's "
       "RMSNormalization (keras_einsum_interop)"},
      {"rms_norm_grad", "rms_norm", "gradient op"},
      {"rotary_embedding", nullptr,
       "KerasHub's values (TransformerOps.RotaryEmbeddingMatchesKerasHub)"},
      {"random_categorical", nullptr,
       "random: TransformerOps.RandomCategorical* check determinism, top_k and frequencies"},
      {"scaled_dot_product_attention", nullptr,
       "Keras's MultiHeadAttention, GroupQueryAttention and Attention values "
       "(keras_attention_interop)"
       " and the plain formula in double (OpTable sdpa_* cases against the reference kernel)"},
      {"scaled_dot_product_attention_grad", "scaled_dot_product_attention", "gradient op"},
      // Sources and state.
      {"input", nullptr, "graph placeholder: every case feeds its inputs through it"},
      {"variable", nullptr, "reads a Variable's storage; no computation"},
      {"assign", nullptr,
       "side effect on a Variable, no outputs (exercised by every fit in tests/train)"},
      {"assign_add", nullptr,
       "side effect on a Variable, no outputs (exercised by every fit in tests/train)"},
      {"sgd_update", nullptr,
       "optimizer update: side effect on variables; Keras values in "
       "tests/train/optimizer_test.cpp"},
      {"adam_update", nullptr,
       "optimizer update: side effect on variables; Keras values in "
       "tests/train/optimizer_test.cpp"},
      {"rmsprop_update", nullptr,
       "optimizer update: side effect on variables; Keras values in "
       "tests/train/optimizer_test.cpp"},
      // Collectives.
      {"all_reduce_start", nullptr, "collective: needs a live replica group (tests/distribute)"},
      {"all_reduce_wait", nullptr, "collective: needs a live replica group (tests/distribute)"},
      {"cross_replica_sum", nullptr, "collective: needs a live replica group (tests/distribute)"},
      // Random.
      {"image_random_flip", nullptr,
       "every output is random (no setting disables it); KnownValues.RandomOpsKeepTheirDefinitions "
       "checks y against the flags it reports"},
  };
  return e;
}

TEST(KnownValues, EveryForwardOpHasACase) {
  ASSERT_EQ(table().error, "");
  std::map<std::string, int> cases_per_op;
  for (const auto& c : table().cases) ++cases_per_op[c.op];
  std::map<std::string, const Exemption*> exempt;
  for (const auto& e : exemptions()) {
    EXPECT_TRUE(exempt.emplace(e.op, &e).second) << "exempted twice: " << e.op;
  }
  const auto names = OpRegistry::get().op_names();
  const std::set<std::string> registered(names.begin(), names.end());
  std::vector<std::string> missing;
  for (const std::string& op : names)
    if (!cases_per_op.count(op) && !exempt.count(op)) missing.push_back(op);
  for (const std::string& op : missing)
    ADD_FAILURE() << "op '" << op << "' has no known-value case: add one to "
                  << "tests/ops/known_values/make_known_values.py (and rerun it), or exempt it "
                  << "with a reason in known_values_test.cpp";
  for (const auto& [op, n] : cases_per_op)
    EXPECT_TRUE(registered.count(op))
        << "known-value cases for an op that is not registered: " << op;
  for (const auto& [op, e] : exempt) {
    EXPECT_TRUE(registered.count(op)) << "stale exemption: '" << op << "' is not registered";
    EXPECT_FALSE(cases_per_op.count(op)) << "'" << op << "' has cases; drop its exemption";
    if (!e->covered_by) continue;
    // The gradient op is only covered if its forward op has a finite-difference case.
    bool fd = false;
    for (const OpCase& c : op_cases()) fd = fd || (c.op.view() == e->covered_by && c.check_grad);
    EXPECT_TRUE(fd) << "'" << op << "' is exempt as covered by the finite-difference check of '"
                    << e->covered_by << "', but the op table has no gradient case for it";
  }
  int covered = 0;
  for (const std::string& op : names) covered += cases_per_op.count(op) ? 1 : 0;
  std::cout << "[ known values ] " << covered << " of " << names.size() << " ops have cases ("
            << table().cases.size() << " cases), " << exemptions().size() << " exempt\n";
}

// ---- random ops: the deterministic parts of their definitions, on both backends ----

Tensor uniform(Shape s, uint64_t seed, float lo, float hi) {
  Tensor t = Tensor::empty(s);
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    t.data<float>()[i] = lo + (hi - lo) * float((state >> 40) & 0xFFFFFF) / float(1 << 24);
  }
  return t;
}

TEST(KnownValues, RandomOpsKeepTheirDefinitions) {
  for (const std::string& backend : backends()) {
    SCOPED_TRACE(backend);
    {  // dropout: mask in {0, 1/(1-rate)}, y = x * mask, about 1 - rate kept.
      Tensor x = uniform(Shape{32, 32}, 1, -2.f, 2.f);
      auto out =
          run_single_op("dropout", Attrs{{"rate", 0.25}, {"seed", int64_t(4)}}, {x}, backend);
      auto xv = x.to_vector(), y = out[0].to_vector(), m = out[1].to_vector();
      int kept = 0;
      for (size_t i = 0; i < xv.size(); ++i) {
        ASSERT_TRUE(m[i] == 0.f || std::fabs(m[i] - 1.f / 0.75f) < 1e-6f) << i << ": mask " << m[i];
        EXPECT_NEAR(y[i], xv[i] * m[i], 1e-6f) << i;
        kept += m[i] != 0.f;
      }
      EXPECT_GT(kept, 0.65 * 1024);
      EXPECT_LT(kept, 0.85 * 1024);
    }
    const int64_t N = 16, H = 4, W = 5, C = 2;
    Tensor img = uniform(Shape{N, H, W, C}, 2, 0.f, 1.f);
    const float* x = img.data<float>();
    auto at = [&](int64_t n, int64_t i, int64_t j, int64_t c) {
      return x[((n * H + i) * W + j) * C + c];
    };
    for (const std::string mode : {"horizontal", "vertical", "horizontal_and_vertical"}) {
      SCOPED_TRACE(mode);
      auto out = run_single_op("image_random_flip", Attrs{{"mode", mode}, {"seed", int64_t(3)}},
                               {img}, backend);
      ASSERT_EQ(out[1].shape(), (Shape{N, 2}));
      const float* f = out[1].data<float>();
      const float* y = out[0].data<float>();
      int flipped[2] = {0, 0};
      for (int64_t n = 0; n < N; ++n) {
        const float h = f[2 * n], v = f[2 * n + 1];
        ASSERT_TRUE((h == 0.f || h == 1.f) && (v == 0.f || v == 1.f)) << "flags " << h << ", " << v;
        if (mode == "horizontal") EXPECT_EQ(v, 0.f);
        if (mode == "vertical") EXPECT_EQ(h, 0.f);
        flipped[0] += h != 0.f;
        flipped[1] += v != 0.f;
        for (int64_t i = 0; i < H; ++i)
          for (int64_t j = 0; j < W; ++j)
            for (int64_t c = 0; c < C; ++c)
              ASSERT_EQ(y[((n * H + i) * W + j) * C + c],
                        at(n, v ? H - 1 - i : i, h ? W - 1 - j : j, c))
                  << "image " << n;
      }
      if (mode != "vertical") EXPECT_GT(flipped[0], 0);
      if (mode != "horizontal") EXPECT_GT(flipped[1], 0);
      if (mode != "vertical") EXPECT_LT(flipped[0], N);
    }
    {  // random crop: integer offsets inside the image, y = the window there.
      auto out =
          run_single_op("image_random_crop",
                        Attrs{{"height", int64_t(2)}, {"width", int64_t(3)}, {"seed", int64_t(8)}},
                        {img}, backend);
      const float* o = out[1].data<float>();
      const float* y = out[0].data<float>();
      std::set<std::pair<int, int>> seen;
      for (int64_t n = 0; n < N; ++n) {
        const float top = o[2 * n], left = o[2 * n + 1];
        ASSERT_TRUE(top == std::floor(top) && top >= 0 && top <= H - 2) << top;
        ASSERT_TRUE(left == std::floor(left) && left >= 0 && left <= W - 3) << left;
        seen.insert({int(top), int(left)});
        for (int64_t i = 0; i < 2; ++i)
          for (int64_t j = 0; j < 3; ++j)
            for (int64_t c = 0; c < C; ++c)
              ASSERT_EQ(y[((n * 2 + i) * 3 + j) * C + c],
                        at(n, int64_t(top) + i, int64_t(left) + j, c));
      }
      EXPECT_GT(seen.size(), 1u);
    }
    {  // random contrast: factor in [1 - lower, 1 + upper]; y = clip((x - mean) f + mean).
      auto out = run_single_op("image_random_contrast",
                               Attrs{{"lower", 0.5},
                                     {"upper", 0.75},
                                     {"value_range", std::vector<double>{0.1, 0.9}},
                                     {"seed", int64_t(6)}},
                               {img}, backend);
      const float* f = out[1].data<float>();
      const float* y = out[0].data<float>();
      for (int64_t n = 0; n < N; ++n) {
        ASSERT_TRUE(f[n] >= 0.5f && f[n] <= 1.75f) << f[n];
        for (int64_t c = 0; c < C; ++c) {
          double mean = 0;
          for (int64_t i = 0; i < H; ++i)
            for (int64_t j = 0; j < W; ++j) mean += at(n, i, j, c);
          mean /= double(H * W);
          for (int64_t i = 0; i < H; ++i)
            for (int64_t j = 0; j < W; ++j) {
              double want = std::clamp((at(n, i, j, c) - mean) * f[n] + mean, 0.1, 0.9);
              ASSERT_NEAR(y[((n * H + i) * W + j) * C + c], want, 1e-5) << "image " << n;
            }
        }
      }
    }
    {  // random brightness: delta / (hi - lo) in [lower, upper]; y = clip(x + delta).
      auto out = run_single_op("image_random_brightness",
                               Attrs{{"lower", -0.25},
                                     {"upper", 0.5},
                                     {"value_range", std::vector<double>{0.0, 2.0}},
                                     {"seed", int64_t(7)}},
                               {img}, backend);
      const float* d = out[1].data<float>();
      const float* y = out[0].data<float>();
      for (int64_t n = 0; n < N; ++n) {
        ASSERT_TRUE(d[n] >= -0.5f - 1e-6f && d[n] <= 1.0f + 1e-6f) << d[n];
        for (int64_t k = 0; k < H * W * C; ++k)
          ASSERT_NEAR(y[n * H * W * C + k], std::clamp(x[n * H * W * C + k] + d[n], 0.f, 2.f),
                      1e-6f);
      }
    }
    {  // random affine (rotation only): Keras's rotation matrix for an angle in the range, and
       // y = image_affine_transform(x, the reported matrix) (that op has known values).
      const double f = 0.2;
      Attrs a{{"rotation", std::vector<double>{-f, f}},
              {"fill_mode", "constant"},
              {"interpolation", "bilinear"},
              {"seed", int64_t(9)}};
      auto out = run_single_op("image_random_affine", a, {img}, backend);
      const float* t = out[1].data<float>();
      for (int64_t n = 0; n < N; ++n) {
        const float* m = t + 8 * n;
        double ang = std::atan2(double(m[3]), double(m[0]));
        EXPECT_LE(std::fabs(ang), f * 2 * M_PI + 1e-5);
        double c = std::cos(ang), s = std::sin(ang);
        double xo = ((W - 1) - (c * (W - 1) - s * (H - 1))) / 2,
               yo = ((H - 1) - (s * (W - 1) + c * (H - 1))) / 2;
        const double want[8] = {c, -s, xo, s, c, yo, 0, 0};
        for (int k = 0; k < 8; ++k)
          EXPECT_NEAR(m[k], want[k], 1e-5) << "image " << n << " entry " << k;
      }
      Attrs fa{{"fill_mode", "constant"}, {"interpolation", "bilinear"}};
      auto replay = run_single_op("image_affine_transform", fa, {img, out[1]}, backend);
      EXPECT_EQ(compare(out[0], replay[0], 1e-6), "");
    }
  }
}

}  // namespace
}  // namespace lockstep::testing
