// The train-step graphs of the XLA tests (xla_train_step_test, xla_backend_test): a small MLP or
// CNN (optionally with batch norm), softmax cross-entropy, gradients() and one update op per
// variable, with its random weights and batches drawn from fixed seeds.
#pragma once
#include <string>
#include <vector>

#include "lockstep/core/rng.h"
#include "lockstep/graph/autodiff.h"
#include "lockstep/graph/graph.h"
#include "lockstep/graph/op_ids.h"

namespace lockstep::xla_test {

enum class Model { mlp, cnn, cnn_batch_norm };
enum class Optimizer { sgd, sgd_momentum, adam, rmsprop };

struct Step {
  Graph g;
  std::vector<Value> feeds;  // x, labels, lr, t
  Value loss;
  std::vector<VariablePtr> weights, slots;
};

inline VariablePtr variable(const std::string& name, const Shape& s, Philox& rng, float scale) {
  Tensor t = Tensor::zeros(s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = rng.uniform(-scale, scale);
  return std::make_shared<Variable>(Variable{name, t, true});
}

inline VariablePtr zeros(const std::string& name, const Shape& s) {
  return std::make_shared<Variable>(Variable{name, Tensor::zeros(s), false});
}

inline Value dense(Step& s, Value x, int64_t in, int64_t out, Philox& rng,
                   const std::string& name) {
  s.weights.push_back(variable(name + "/kernel", Shape{in, out}, rng, 0.5f));
  s.weights.push_back(variable(name + "/bias", Shape{out}, rng, 0.1f));
  Value y = s.g.add(op::matmul, {x, s.g.variable(s.weights[s.weights.size() - 2])}, {}, name);
  return s.g.add(op::bias_add, {y, s.g.variable(s.weights.back())}, {}, name);
}

// The logits of a batch of n (6 in most tests): [6, 8] -> 16 -> relu -> 4 (mlp), or [6, 6, 6, 2] ->
// conv 3x3 (same)
// -> [batch norm] -> relu -> max pool 2 -> flatten -> 4.
inline Value logits(Step& s, Model model, Philox& rng, Value x, int64_t n) {
  if (model == Model::mlp)
    return dense(s, s.g.add(op::relu, {dense(s, x, 8, 16, rng, "d1")}), 16, 4, rng, "d2");
  s.weights.push_back(variable("conv/kernel", Shape{3, 3, 2, 5}, rng, 0.4f));
  Value h = s.g.add(op::conv2d, {x, s.g.variable(s.weights.back())},
                    Attrs{{"padding", std::string("same")}}, "conv");
  if (model == Model::cnn_batch_norm) {
    s.weights.push_back(variable("bn/gamma", Shape{5}, rng, 0.2f));
    s.weights.back()->value.fill(1.f);
    s.weights.push_back(variable("bn/beta", Shape{5}, rng, 0.1f));
    h = s.g.add_multi(
        op::batch_norm_train,
        {h, s.g.variable(s.weights[s.weights.size() - 2]), s.g.variable(s.weights.back())}, {},
        "bn")[0];
  }
  h = s.g.add(op::max_pool2d, {s.g.add(op::relu, {h})},
              Attrs{{"pool_size", std::vector<int64_t>{2, 2}}}, "pool");
  h = s.g.add(op::reshape, {h}, Attrs{{"shape", std::vector<int64_t>{n, 45}}});
  return dense(s, h, 45, 4, rng, "head");
}

inline Step build_step(Model model, Optimizer opt, int64_t n = 6) {
  Step s;
  Philox rng(42);
  const Shape xs = model == Model::mlp ? Shape{n, 8} : Shape{n, 6, 6, 2};
  Value x = s.g.input({DType::f32, xs}, "x");
  Value labels = s.g.input({DType::i32, Shape{n}}, "labels");
  Value lr = s.g.input({DType::f32, Shape{}}, "lr");
  Value t = s.g.input({DType::f32, Shape{}}, "t");
  s.feeds = {x, labels, lr, t};
  Value per_example =
      s.g.add(op::sparse_softmax_cross_entropy, {logits(s, model, rng, x, n), labels});
  s.loss = s.g.add(op::reduce_mean, {per_example});
  std::vector<Value> wv;
  for (auto& w : s.weights) wv.push_back(s.g.variable(w));
  std::vector<Value> grads = gradients(s.g, s.loss, wv);
  for (size_t i = 0; i < wv.size(); ++i) {
    const Shape& shape = s.weights[i]->value.shape();
    if (opt == Optimizer::adam) {
      s.slots.push_back(zeros("m", shape));
      s.slots.push_back(zeros("v", shape));
      s.g.add_multi(op::adam_update,
                    {wv[i], grads[i], lr, s.g.variable(s.slots[s.slots.size() - 2]),
                     s.g.variable(s.slots.back()), t},
                    {}, "", s.weights[i]);
    } else if (opt == Optimizer::rmsprop) {
      s.slots.push_back(zeros("ms", shape));
      s.slots.push_back(zeros("mom", shape));
      s.g.add_multi(op::rmsprop_update,
                    {wv[i], grads[i], lr, s.g.variable(s.slots[s.slots.size() - 2]),
                     s.g.variable(s.slots.back())},
                    Attrs{{"rho", 0.8}, {"momentum", 0.5}, {"weight_decay", 0.02}}, "",
                    s.weights[i]);
    } else if (opt == Optimizer::sgd_momentum) {
      s.slots.push_back(zeros("momentum", shape));
      s.g.add_multi(op::sgd_update, {wv[i], grads[i], lr, s.g.variable(s.slots.back())},
                    Attrs{{"momentum", 0.9}, {"weight_decay", 0.01}}, "", s.weights[i]);
    } else {
      s.g.add_multi(op::sgd_update, {wv[i], grads[i], lr}, {}, "", s.weights[i]);
    }
  }
  return s;
}

inline std::vector<Tensor> batch(Model model, int step) {
  Philox rng(1000 + uint64_t(step));
  Tensor x = Tensor::zeros(model == Model::mlp ? Shape{6, 8} : Shape{6, 6, 6, 2});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = rng.uniform(-1.f, 1.f);
  Tensor labels = Tensor::zeros(Shape{6}, DType::i32);
  for (int i = 0; i < 6; ++i) labels.data<int32_t>()[i] = int32_t(rng.uniform(0.f, 3.999f));
  return {x, labels, Tensor::full(Shape{}, 0.05f), Tensor::full(Shape{}, float(step))};
}

}  // namespace lockstep::xla_test
