// Your own layer, loss and callback (docs/extending.md): a learnable per-feature scale, the
// mean squared logarithmic error, and a callback that stops at a target loss; the model is
// saved and loaded back with the custom layer registered.
//   build/bin/extending [OUT.keras]     (default extending.keras)
#include <cstdio>
#include <string>

#include <lockstep/lockstep.h>
#include <lockstep/tools/example_args.h>
namespace ls = lockstep;
using namespace ls::layers;

// docs: begin layer
// y = x * scale, one learnable factor per feature (last axis); Keras's `class Scale(Layer)`.
class Scale : public ls::Layer {
 public:
  using ls::Layer::Layer;  // Scale(name)
  std::string class_name() const override { return "Scale"; }
  // Keras's build(input_shape): create the weights once the input shape is known.
  void build(const std::vector<ls::Shape>& input_shapes) override {
    scale_ = add_weight("scale", ls::Shape{input_shapes[0][-1]}, "ones");
  }
  // Keras's call(inputs): add this layer's ops to the graph being compiled.
  std::vector<ls::Value> call(ls::CallContext& ctx, const std::vector<ls::Value>& in) override {
    return {ctx.graph.add(ls::op::mul, {in[0], ctx.read(scale_)})};  // numpy broadcasting
  }

 private:
  ls::VariablePtr scale_;
};
// docs: end layer

// docs: begin loss
// Per sample: mean over the last axis of (log(1 + max(y_pred, 0)) - log(1 + y_true))^2.
class MeanSquaredLogError : public ls::Loss {
 public:
  std::string name() const override { return "MeanSquaredLogError"; }
  ls::json get_config() const override { return {{"name", "msle"}}; }
  ls::Value per_sample(ls::Graph& g, ls::Value y_true, ls::Value y_pred) const override {
    auto log1p = [&g](ls::Value v) {
      return g.add(ls::op::log, {g.add(ls::op::scale_shift, {v}, ls::Attrs{{"scale", 1.0}, {"shift", 1.0}})});
    };
    ls::Value d = g.add(ls::op::sub, {log1p(g.add(ls::op::relu, {y_pred})), log1p(y_true)});
    return g.add(ls::op::reduce_mean, {g.add(ls::op::square, {d})},
                 ls::Attrs{{"axes", std::vector<int64_t>{-1}}, {"keepdims", false}});
  }
};
// docs: end loss

// docs: begin callback
// Stops training once the epoch's loss is below a target (Keras: subclass keras.callbacks.Callback
// and set self.model.stop_training = True).
class StopAtLoss : public ls::Callback {
 public:
  explicit StopAtLoss(double target) : target_(target) {}
  void on_epoch_end(int epoch, const ls::Logs& logs) override {
    if (logs.at("loss") < target_) {
      std::printf("epoch %d: loss %.4f < %.4f, stopping\n", epoch + 1, logs.at("loss"), target_);
      model->stop_training = true;
    }
  }

 private:
  double target_;
};
// docs: end callback

int main(int argc, char** argv) {
  const auto args = ls::tools::parse_example_args(
      argc, argv,
      "usage: extending [OUT.keras]\n"
      "Trains a model with a custom layer, loss and callback, saves it to OUT.keras (default\n"
      "extending.keras) and loads it back.\n",
      {}, 1);
  const std::string path = args.positional_or(0, "extending.keras");
  // Synthetic regression data: y = sum of the positive features.
  const int64_t n = 1024;
  ls::Tensor x = ls::Tensor::empty({n, 8}), y = ls::Tensor::zeros({n, 1});
  ls::Philox rng(5);
  for (int64_t i = 0; i < n * 8; ++i) {
    x.data<float>()[i] = rng.uniform(-1, 1);
    if (x.data<float>()[i] > 0) y.data<float>()[i / 8] += x.data<float>()[i];
  }

  // docs: begin use
  // load_model and model_from_json find the class by name (Keras: custom_objects).
  ls::register_layer("Scale", [](const ls::json& config) {
    ls::KerasConfigReader r("Scale", config);  // fails on a key it did not read
    r.finish();
    return std::make_shared<Scale>(r.name());
  });
  auto input = Input({8});
  auto h = Dense(32, {.activation = "relu"})(input);
  h = ls::LayerHandle(std::make_shared<Scale>("scale"))(h);
  ls::Model model(input, Dense(1)(h));
  model.compile({.optimizer = ls::optimizers::Adam(1e-2),
                 .loss = std::make_shared<MeanSquaredLogError>()});
  model.fit(x, y, {.batch_size = 64, .epochs = 50, .verbose = 0,
                   .callbacks = {std::make_shared<StopAtLoss>(0.01)}});
  model.save(path);
  ls::Model again = ls::load_model(path, /*compile=*/false);  // losses::get has no "msle"
  // docs: end use
  const float a = model.predict(x.slice(0, 4)).to_vector()[0];
  const float b = again.predict(x.slice(0, 4)).to_vector()[0];
  std::printf("saved %s; the loaded model predicts %.4f, the original %.4f\n", path.c_str(), b, a);
  return a == b ? 0 : 1;
}
