// The transformer ops beyond the op table: einsum against a numpy-style loop over every label
// assignment (many equations, reference and cpu), its errors; the masked softmax against
// Keras's numbers; erf-exact gelu against keras.activations.gelu(approximate=False);
// random_categorical's determinism and its frequencies against softmax probabilities.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "lockstep/graph/executable.h"
#include "lockstep/ops/transformer.h"
#include "ops/op_harness.h"
#include "test_util.h"

using namespace lockstep;
using lockstep::test_util::error_of;
using lockstep::test_util::expect_has;

namespace {

std::vector<float> random_values(int64_t n, uint64_t seed) {
  Philox r(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = r.uniform(-1.f, 1.f);
  return v;
}

// numpy.einsum by brute force: every assignment of the letters, explicit "->" and no ellipsis.
std::vector<float> naive_einsum(const std::string& eq, const std::vector<Shape>& shapes,
                                const std::vector<std::vector<float>>& vals, Shape& out_shape) {
  const size_t arrow = eq.find("->");
  std::vector<std::string> terms;
  std::string lhs = eq.substr(0, arrow), out = eq.substr(arrow + 2);
  const size_t comma = lhs.find(',');
  terms.push_back(lhs.substr(0, comma));
  if (comma != std::string::npos) terms.push_back(lhs.substr(comma + 1));
  std::map<char, int64_t> size;
  for (size_t t = 0; t < terms.size(); ++t)
    for (size_t k = 0; k < terms[t].size(); ++k) size[terms[t][k]] = shapes[t][int(k)];
  std::string letters;
  for (auto& [c, d] : size) letters += c;
  out_shape = Shape{};
  for (char c : out) out_shape.push_back(size[c]);
  std::vector<float> y(size_t(std::max<int64_t>(out_shape.numel(), 1)), 0.f);
  std::vector<double> acc(y.size(), 0.0);
  std::map<char, int64_t> at;
  for (char c : letters) at[c] = 0;
  auto index = [&](const std::string& term, const Shape& s) {
    int64_t i = 0;
    for (size_t k = 0; k < term.size(); ++k) i = i * s[int(k)] + at[term[k]];
    return i;
  };
  while (true) {
    double p = 1;
    for (size_t t = 0; t < terms.size(); ++t) p *= vals[t][size_t(index(terms[t], shapes[t]))];
    acc[size_t(index(out, out_shape))] += p;
    int k = int(letters.size()) - 1;
    for (; k >= 0; --k) {
      if (++at[letters[size_t(k)]] < size[letters[size_t(k)]]) break;
      at[letters[size_t(k)]] = 0;
    }
    if (k < 0) break;
  }
  for (size_t i = 0; i < y.size(); ++i) y[i] = float(acc[i]);
  return y;
}

}  // namespace

TEST(TransformerOps, EinsumMatchesANumpyStyleLoopOverManyEquations) {
  struct Eq {
    std::string eq;
    Shape a, b;
  };
  const std::vector<Eq> eqs = {{"btd,dhk->bthk", {2, 3, 4}, {4, 2, 3}},
                               {"bqhd,bkhd->bhqk", {2, 3, 2, 4}, {2, 5, 2, 4}},
                               {"bhqk,bkhd->bqhd", {2, 2, 3, 5}, {2, 5, 2, 4}},
                               {"bqhd,hde->bqe", {2, 3, 2, 4}, {2, 4, 5}},
                               {"abc,cd->abd", {2, 3, 4}, {4, 5}},
                               {"abc,cd->ad", {2, 3, 4}, {4, 5}},
                               {"ab,cb->ac", {3, 4}, {5, 4}},
                               {"ba,bc->ac", {4, 3}, {4, 5}},
                               {"i,j->ij", {3}, {4}},
                               {"ij,ij->i", {3, 4}, {3, 4}},
                               {"ij,ij->", {3, 4}, {3, 4}},
                               {"abcd,cde->abe", {2, 2, 3, 4}, {3, 4, 2}},
                               {"abc->acb", {2, 3, 4}, {}},
                               {"abc->ca", {2, 3, 4}, {}},
                               {"abc->", {2, 3, 4}, {}},
                               {"abc->b", {2, 3, 4}, {}},
                               {"bxy,yz->bzx", {2, 3, 4}, {4, 5}},
                               {"xb,byz->zyx", {3, 2}, {2, 4, 5}}};
  for (const Eq& e : eqs) {
    SCOPED_TRACE(e.eq);
    const bool two = e.eq.find(',') != std::string::npos;
    std::vector<Shape> shapes{e.a};
    std::vector<std::vector<float>> vals{random_values(e.a.numel(), 1)};
    if (two) {
      shapes.push_back(e.b);
      vals.push_back(random_values(e.b.numel(), 2));
    }
    Shape want_shape;
    const std::vector<float> want = naive_einsum(e.eq, shapes, vals, want_shape);
    Graph g;
    std::vector<Value> feeds;
    std::vector<Tensor> tensors;
    for (size_t i = 0; i < shapes.size(); ++i) {
      feeds.push_back(g.input({DType::f32, shapes[i]}, "in" + std::to_string(i)));
      tensors.push_back(Tensor::from_vector(shapes[i], vals[i]));
    }
    Value y = ops::einsum(g, e.eq, feeds[0], two ? feeds[1] : Value{});
    EXPECT_EQ(g.type(y).shape, want_shape);
    EXPECT_EQ(ops::einsum_shape(e.eq, e.a, e.b), want_shape);
    for (const char* backend : {"reference", "cpu"}) {
      const std::vector<float> got =
          lockstep::testing::run_graph(g, feeds, {y}, tensors, backend)[0].to_vector();
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << backend;
    }
  }
}

TEST(TransformerOps, EinsumEllipsisBroadcastsAndImplicitOutputIsNumpys) {
  EXPECT_EQ(ops::einsum_shape("...ij,...jk->...ik", Shape{2, 3, 4}, Shape{1, 4, 5}),
            (Shape{2, 3, 5}));
  EXPECT_EQ(ops::einsum_shape("...ij,jk", Shape{7, 2, 3, 4}, Shape{4, 5}), (Shape{7, 2, 3, 5}));
  EXPECT_EQ(ops::einsum_shape("ij,jk", Shape{3, 4}, Shape{4, 5}), (Shape{3, 5}));
  EXPECT_EQ(ops::einsum_shape("ba", Shape{3, 4}), (Shape{4, 3}));
  EXPECT_EQ(ops::einsum_shape("...c->c...", Shape{2, 3, 4}), (Shape{4, 2, 3}));
}

TEST(TransformerOps, EinsumRefusesBadEquationsNamingThem) {
  auto err = [](const std::string& eq, Shape a, Shape b = Shape{}) {
    return error_of([&] { ops::einsum_shape(eq, a, b); });
  };
  expect_has(err("ii->i", {3, 3}), {"einsum \"ii->i\"", "repeats within one operand"});
  expect_has(err("ab,bc->ad", {2, 3}, {3, 4}), {"output letter 'd' is in no operand"});
  expect_has(err("ab,bc->ac", {2, 3}, {4, 5}), {"letter 'b' has size 3", "and 4"});
  expect_has(err("abc,bc->a", {2, 3}, {3, 4}), {"\"abc\" has 3 letters for an operand of rank 2"});
  expect_has(err("a1,bc->a", {2, 3}, {3, 4}), {"'1' is not a letter"});
  expect_has(err("ab,bc,cd->ad", {2, 3}, {3, 4}), {"3 input terms for 2 operand(s)"});
}

TEST(TransformerOps, MaskedSoftmaxGivesKerasNumbersAndZerosForAFullyMaskedRow) {
  // keras.layers.Softmax()(s, mask=m) in Keras 3.15 (jax).
  const std::vector<float> want = {
      0.1111656129360199f, 0.f, 0.8214089870452881f, 0.06742535531520844f, 0.f, 0.f, 0.f, 0.f};
  Graph g;
  Value x = g.input({DType::f32, Shape{2, 4}}, "x"), m = g.input({DType::f32, Shape{2, 4}}, "m");
  Value y = ops::masked_softmax(g, x, m);
  for (const char* backend : {"reference", "cpu"}) {
    auto got =
        lockstep::testing::run_graph(g, {x, m}, {y},
                                     {Tensor::from_vector({2, 4}, {1, 2, 3, 0.5f, 0.1f, -1, 2, 3}),
                                      Tensor::from_vector({2, 4}, {1, 0, 1, 1, 0, 0, 0, 0})},
                                     backend)[0]
            .to_vector();
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << backend;
  }
}

TEST(TransformerOps, GeluIsTheErfFormOfKeras) {
  // keras.activations.gelu(x, approximate=False) in Keras 3.15 (jax).
  const std::vector<float> x = {-3, -1.5f, -0.3f, 0, 0.2f, 0.7f, 1.3f, 2.5f, 4};
  const std::vector<float> want = {
      -0.0040496960282325745f, -0.10021083056926727f, -0.11462658643722534f, 0.0f,
      0.11585193872451782f,    0.5306254029273987f,   1.1741591691970825f,   2.48447585105896f,
      3.999873399734497f};
  for (const char* backend : {"reference", "cpu"}) {
    auto y =
        lockstep::testing::run_single_op("gelu", Attrs{}, {Tensor::from_vector({9}, x)}, backend);
    const std::vector<float> got = y[0].to_vector();
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << backend;
  }
}

namespace {

std::vector<int32_t> sample(const std::vector<float>& logits, int64_t B, int64_t V, uint64_t seed,
                            double temperature, int64_t top_k, const char* backend) {
  Graph g;
  Value x = g.input({DType::f32, Shape{B, V}}, "logits");
  Value ids = ops::random_categorical(g, x, seed, temperature, top_k, "sampler");
  Tensor t = lockstep::testing::run_graph(g, {x}, {ids}, {Tensor::from_vector({B, V}, logits)},
                                          backend)[0];
  const int32_t* p = t.data<int32_t>();
  return {p, p + B};
}

}  // namespace

TEST(TransformerOps, RandomCategoricalIsDeterministicForASeedAndHonoursTopK) {
  const int64_t B = 64, V = 9;
  const std::vector<float> logits = random_values(B * V, 3);
  const auto a = sample(logits, B, V, 7, 1.0, 0, "reference");
  EXPECT_EQ(a, sample(logits, B, V, 7, 1.0, 0, "reference"));
  EXPECT_EQ(a, sample(logits, B, V, 7, 1.0, 0, "cpu"));
  EXPECT_NE(a, sample(logits, B, V, 8, 1.0, 0, "reference"));
  // top_k = 2: only the two largest logits of each row come out.
  const auto k2 = sample(logits, B, V, 7, 1.0, 2, "cpu");
  for (int64_t r = 0; r < B; ++r) {
    int better = 0;
    for (int64_t c = 0; c < V; ++c)
      better += logits[size_t(r * V + c)] > logits[size_t(r * V + k2[size_t(r)])];
    EXPECT_LE(better, 1) << "row " << r;
  }
}

TEST(TransformerOps, RandomCategoricalFrequenciesMatchSoftmaxProbabilities) {
  // 40000 rows of the same logits, temperature 0.5: each class's count is binomial(n, p), whose
  // standard deviation is sqrt(n p (1 - p)) <= 100; a bound of 5 deviations (plus 1) fails a
  // correct sampler with probability < 1e-6 per class, while a wrong temperature or an
  // off-by-one in the inverse CDF moves some count by far more.
  const int64_t B = 40000, V = 5;
  const std::vector<float> row = {0.3f, -0.4f, 1.1f, 0.0f, -1.5f};
  std::vector<float> logits;
  for (int64_t r = 0; r < B; ++r) logits.insert(logits.end(), row.begin(), row.end());
  const auto ids = sample(logits, B, V, 11, 0.5, 0, "cpu");
  std::vector<double> p(V);
  double total = 0;
  for (int64_t c = 0; c < V; ++c) total += p[size_t(c)] = std::exp(row[size_t(c)] / 0.5);
  std::vector<int64_t> count(V, 0);
  for (int32_t id : ids) {
    ASSERT_TRUE(id >= 0 && id < V);
    ++count[size_t(id)];
  }
  for (int64_t c = 0; c < V; ++c) {
    const double pc = p[size_t(c)] / total, sd = std::sqrt(double(B) * pc * (1 - pc));
    EXPECT_NEAR(double(count[size_t(c)]), double(B) * pc, 5 * sd + 1) << "class " << c;
  }
}

TEST(TransformerOps, BadAttributesAndShapesNameTheOp) {
  Graph g;
  Value x = g.input({DType::f32, Shape{2, 3, 5}}, "x");
  expect_has(error_of([&] { ops::rotary_embedding(g, x, {}, Value{}, "rope"); }),
             {"rotary_embedding", "even size"});
  expect_has(error_of([&] {
               ops::rms_norm(g, x, g.input({DType::f32, Shape{4}}, "s"));
             }),
             {"rms_norm", "scale has shape (4,)"});
  Value l = g.input({DType::f32, Shape{2, 5}}, "l");
  expect_has(error_of([&] { ops::random_categorical(g, l, 0, 0.0); }),
             {"temperature must be positive"});
  expect_has(error_of([&] {
               g.add(op::batch_matmul, {x, g.input({DType::f32, Shape{4, 2}}, "w")});
             }),
             {"batch_matmul", "inner dimensions differ"});
}

TEST(TransformerOps, RotaryEmbeddingMatchesKerasHub) {
  // keras_hub 0.32's RotaryEmbedding (rope_type "linear"): x = arange(24) / 10 - 1.1 as
  // (1, 3, 2, 4) with max_wavelength 100, scaling_factor 2, start_index 3; and arange(24) / 7 -
  // 1.3 as (1, 4, 6) with sequence_axis 2, feature_axis 1 and the defaults.
  const std::vector<float> want1 = {
      0.819934606552124f,    -0.8692205548286438f,  -1.1609079837799072f,  -0.9404550194740295f,
      0.44923144578933716f,  -0.5334874391555786f,  -0.7336151599884033f,  -0.4851713478565216f,
      0.2157738208770752f,   -0.19601336121559143f, -0.2311745434999466f,  -0.039733875542879105f,
      -0.31440386176109314f, 0.11654551327228546f,  -0.03391427546739578f, 0.4317604601383209f,
      -0.8195022344589233f,  0.383424311876297f,    -0.26156437397003174f, 0.923572301864624f,
      -1.3793485164642334f,  0.672027587890625f,    -0.34263306856155396f, 1.4100987911224365f};
  const std::vector<float> want2 = {
      -1.2999999523162842f,  -1.0940264463424683f,  -0.21441644430160522f, 0.7437636852264404f,
      1.2222172021865845f,   0.9160696268081665f,   -0.4428570866584778f,  -0.3141275942325592f,
      -0.18825212121009827f, -0.06527160853147507f, 0.05477403104305267f,  0.17184501886367798f,
      0.4142857789993286f,   -0.6726764440536499f,  -1.213590145111084f,   -0.9573982357978821f,
      -0.09292131662368774f, 0.8817886710166931f,   1.2714285850524902f,   1.41121506690979f,
      1.5536890029907227f,   1.6988065242767334f,   1.8465244770050049f,   1.9967986345291138f};
  std::vector<float> x1(24), x2(24);
  for (int i = 0; i < 24; ++i) {
    x1[size_t(i)] = float(i) / 10.f - 1.1f;
    x2[size_t(i)] = float(i) / 7.f - 1.3f;
  }
  for (const char* backend : {"reference", "cpu"}) {
    auto y1 = lockstep::testing::run_single_op(
                  "rotary_embedding",
                  Attrs{{"max_wavelength", 100.0}, {"scaling_factor", 2.0}, {"start_index", 3}},
                  {Tensor::from_vector({1, 3, 2, 4}, x1)}, backend)[0]
                  .to_vector();
    auto y2 = lockstep::testing::run_single_op("rotary_embedding",
                                               Attrs{{"sequence_axis", 2}, {"feature_axis", 1}},
                                               {Tensor::from_vector({1, 4, 6}, x2)}, backend)[0]
                  .to_vector();
    for (size_t i = 0; i < 24; ++i) {
      EXPECT_NEAR(y1[i], want1[i], 2e-6) << backend << " " << i;
      EXPECT_NEAR(y2[i], want2[i], 2e-6) << backend << " " << i;
    }
  }
}

TEST(TransformerOps, CpuBatchMatmulRunsOnOneDnnWithoutFallbackInFloat32) {
  // Equal batch dims, broadcast ones on either side, transposes: oneDNN's matmul takes them all
  // in float32 (bf16 depends on the CPU, so it is not asserted here).
  struct Mm {
    Shape a, b;
    bool ta, tb;
  };
  for (const Mm& m :
       {Mm{{2, 3, 4}, {2, 4, 5}, false, false}, Mm{{2, 1, 3, 4}, {3, 4, 5}, false, false},
        Mm{{2, 3, 4}, {4, 5}, false, false}, Mm{{1, 2, 4, 3}, {3, 1, 5, 4}, true, true}}) {
    Graph g;
    Value a = g.input({DType::f32, m.a}, "a"), b = g.input({DType::f32, m.b}, "b");
    Value y =
        g.add(op::batch_matmul, {a, b}, Attrs{{"transpose_a", m.ta}, {"transpose_b", m.tb}}, "mm");
    CompileOptions o{.backend = "cpu"};
    o.strict_kernels = true;
    EXPECT_EQ(error_of([&] { Executable exe(g, {a, b}, {y}, o); }), "") << m.a.str() << m.b.str();
  }
}
