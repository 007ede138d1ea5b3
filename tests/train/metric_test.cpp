// Metrics accumulate total/count across batches through assign_add side effects.
#include <gtest/gtest.h>

#include "lockstep/graph/executable.h"
#include "lockstep/train/metric.h"

using namespace lockstep;

namespace {

// Compiles metric->update for fixed shapes and runs it once per batch.
struct MetricRunner {
  MetricRunner(MetricPtr m, TensorType yt_type, TensorType yp_type, const std::string& backend = "reference")
      : metric(std::move(m)) {
    Value yt = g.input(yt_type, "y_true");
    Value yp = g.input(yp_type, "y_pred");
    metric->update(g, yt, yp);
    CompileOptions o;
    o.backend = backend;
    exe = std::make_unique<Executable>(g, std::vector<Value>{yt, yp}, std::vector<Value>{}, o);
  }
  void run(const Tensor& yt, const Tensor& yp) {
    exe->input(0).copy_from(yt);
    exe->input(1).copy_from(yp);
    exe->run();
  }
  MetricPtr metric;
  Graph g;
  std::unique_ptr<Executable> exe;
};

}  // namespace

TEST(Metric, SparseCategoricalAccuracyOverTwoBatches) {
  for (std::string backend : {"reference", "cpu"}) {
    MetricRunner r(metrics::SparseCategoricalAccuracy(), {DType::i32, Shape{4}},
                   {DType::f32, Shape{4, 3}}, backend);
    EXPECT_EQ(r.metric->variables().size(), 2u);
    EXPECT_EQ(r.metric->variables()[0]->name, "sparse_categorical_accuracy/total");
    EXPECT_EQ(r.metric->variables()[1]->name, "sparse_categorical_accuracy/count");
    EXPECT_FALSE(r.metric->variables()[0]->trainable);
    Tensor pred = Tensor::from_vector(Shape{4, 3}, {0.1f, 0.8f, 0.1f, 0.7f, 0.2f, 0.1f,
                                                    0.2f, 0.3f, 0.5f, 0.3f, 0.3f, 0.4f});
    // argmax = 1, 0, 2, 2
    r.run(Tensor::from_vector_i32(Shape{4}, {1, 0, 2, 0}), pred);  // 3/4
    EXPECT_FLOAT_EQ(r.metric->result(), 0.75f) << backend;
    r.run(Tensor::from_vector_i32(Shape{4}, {0, 1, 2, 1}), pred);  // 1/4
    EXPECT_FLOAT_EQ(r.metric->result(), 0.5f) << backend;
    EXPECT_FLOAT_EQ(r.metric->variables()[1]->value.item(), 8.f);
    r.metric->reset();
    EXPECT_FLOAT_EQ(r.metric->result(), 0.f);
    r.run(Tensor::from_vector_i32(Shape{4}, {1, 0, 2, 2}), pred);
    EXPECT_FLOAT_EQ(r.metric->result(), 1.f);
  }
}

TEST(Metric, CategoricalBinaryTopKAndMse) {
  Tensor pred = Tensor::from_vector(Shape{2, 3}, {0.1f, 0.6f, 0.3f, 0.5f, 0.2f, 0.3f});
  {
    MetricRunner r(metrics::CategoricalAccuracy(), {DType::f32, Shape{2, 3}}, {DType::f32, Shape{2, 3}});
    r.run(Tensor::from_vector(Shape{2, 3}, {0, 1, 0, 0, 0, 1}), pred);  // 1/2
    r.run(Tensor::from_vector(Shape{2, 3}, {0, 1, 0, 1, 0, 0}), pred);  // 2/2
    EXPECT_FLOAT_EQ(r.metric->result(), 0.75f);
  }
  {
    MetricRunner r(metrics::SparseTopKCategoricalAccuracy(2), {DType::i32, Shape{2}}, {DType::f32, Shape{2, 3}});
    r.run(Tensor::from_vector_i32(Shape{2}, {2, 1}), pred);  // top2: {1,2} has 2; {0,2} lacks 1
    r.run(Tensor::from_vector_i32(Shape{2}, {0, 0}), pred);  // no; yes
    EXPECT_FLOAT_EQ(r.metric->result(), 0.5f);
  }
  {
    MetricRunner r(metrics::BinaryAccuracy(), {DType::f32, Shape{4}}, {DType::f32, Shape{4, 1}});
    r.run(Tensor::from_vector(Shape{4}, {1, 0, 1, 0}), Tensor::from_vector(Shape{4, 1}, {0.9f, 0.2f, 0.4f, 0.7f}));
    r.run(Tensor::from_vector(Shape{4}, {1, 1, 1, 1}), Tensor::from_vector(Shape{4, 1}, {0.9f, 0.6f, 0.4f, 0.7f}));
    EXPECT_FLOAT_EQ(r.metric->result(), 5.f / 8.f);
  }
  {
    MetricRunner r(metrics::get("mse", "MeanSquaredError"), {DType::f32, Shape{2, 2}}, {DType::f32, Shape{2, 2}});
    EXPECT_EQ(r.metric->name(), "mse");
    r.run(Tensor::from_vector(Shape{2, 2}, {0, 0, 0, 0}), Tensor::from_vector(Shape{2, 2}, {1, 1, 2, 2}));
    r.run(Tensor::from_vector(Shape{2, 2}, {0, 0, 0, 0}), Tensor::from_vector(Shape{2, 2}, {0, 0, 3, 3}));
    EXPECT_FLOAT_EQ(r.metric->result(), (1 + 4 + 0 + 9) / 4.f);
  }
  {
    // Mean ignores y_true, so only y_pred is fed (the executable rejects unused inputs).
    auto m = metrics::Mean("loss");
    Graph g;
    Value v = g.input({DType::f32, Shape{3}}, "v");
    m->update(g, v, v);
    Executable exe(g, {v}, {}, {.backend = "reference"});
    exe.input(0).copy_from(Tensor::from_vector(Shape{3}, {1, 2, 3}));
    exe.run();
    exe.input(0).copy_from(Tensor::from_vector(Shape{3}, {4, 5, 6}));
    exe.run();
    EXPECT_FLOAT_EQ(m->result(), 3.5f);
  }
}

TEST(Metric, GetResolvesAccuracyByLoss) {
  Graph g;
  Value yi = g.input({DType::i32, Shape{2}}, "yi");
  Value yf = g.input({DType::f32, Shape{2, 3}}, "yf");
  Value p = g.input({DType::f32, Shape{2, 3}}, "p");
  auto last_op = [&] { return g.node(g.size() - 1).op; };
  auto uses = [&](const std::string& op) {
    for (auto& n : g.nodes())
      if (n.op == op) return true;
    return false;
  };
  auto m = metrics::get("accuracy", "SparseCategoricalCrossentropy");
  EXPECT_EQ(m->name(), "accuracy");  // Keras keeps the user's name
  m->update(g, yi, p);
  EXPECT_TRUE(uses("sparse_categorical_accuracy"));
  auto c = metrics::get("acc", "categorical_crossentropy");
  EXPECT_EQ(c->name(), "acc");
  c->update(g, yf, p);
  EXPECT_TRUE(uses("categorical_accuracy"));
  auto b = metrics::get("accuracy", "binary_crossentropy");
  b->update(g, yf, p);
  EXPECT_TRUE(uses("binary_accuracy"));
  auto k = metrics::get("sparse_top_k_categorical_accuracy", "sparse_categorical_crossentropy");
  EXPECT_EQ(k->name(), "sparse_top_k_categorical_accuracy");
  k->update(g, yi, p);
  EXPECT_TRUE(uses("in_top_k"));
  EXPECT_EQ(last_op(), "assign_add");
  EXPECT_EQ(metrics::get("top_k", "sparse_categorical_crossentropy")->name(), "top_k");
  EXPECT_THROW(metrics::get("f1_of_doom", "mse"), Error);
}
