// Activations: apply_activation (shared by Dense/Conv), Activation, ReLU and Rescaling layers.
#include "lockstep/graph/op_registry.h"
#include "nn/layers/layer_util.h"

namespace lockstep {

Value apply_activation(Graph& g, Value x, const std::string& activation, const std::string& name) {
  const std::string& a = activation;
  if (a.empty() || a == "linear") return x;
  const OpDef* def = OpRegistry::get().activation_op(a);
  LS_CHECK(def, (name.empty() ? "" : "'" + name + "': "), "unknown activation '", a,
           "'; valid names: ", layer_util::activation_names());
  // An op without bfloat16 support runs in f32 under mixed precision (softmax: its sum of
  // exponentials needs the mantissa).
  if (!def->bf16 && g.type(x).dtype != DType::f32)
    x = g.add(op::cast, {x}, Attrs{{"dtype", std::string("float32")}});
  // Keras's activation strings use the ops' declared defaults (softmax over the last axis, exact
  // gelu, leaky_relu with slope 0.2).
  return g.add(def->name, {x}, {}, name);
}

namespace {

class ActivationLayer : public Layer {
 public:
  ActivationLayer(std::string act, std::string name)
      : Layer(std::move(name)), act_(std::move(act)) {
    try {
      layer_util::check_activation(act_);
    } catch (const Error& e) {
      LS_FAIL("Activation '", this->name(), "': ", e.what());
    }
  }
  std::string class_name() const override { return "Activation"; }
  json layer_config() const override { return {{"activation", act_.empty() ? "linear" : act_}}; }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    return {apply_activation(ctx.graph, in.at(0), act_, name())};
  }

 private:
  std::string act_;
};

class ReLULayer : public Layer {
 public:
  using Layer::Layer;
  std::string class_name() const override { return "ReLU"; }
  json layer_config() const override {
    return {{"max_value", nullptr}, {"negative_slope", 0.0}, {"threshold", 0.0}};
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    return {ctx.graph.add(op::relu, {in.at(0)}, {}, name())};
  }
};

class RescalingLayer : public Layer {
 public:
  RescalingLayer(double scale, double offset, std::string name)
      : Layer(std::move(name)), scale_(scale), offset_(offset) {}
  std::string class_name() const override { return "Rescaling"; }
  json layer_config() const override { return {{"scale", scale_}, {"offset", offset_}}; }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    return {ctx.graph.add(op::scale_shift, {in.at(0)}, Attrs{{"scale", scale_}, {"shift", offset_}},
                          name())};
  }

 private:
  double scale_, offset_;
};

}  // namespace

namespace layers {

LayerHandle Activation(std::string activation, std::string name) {
  return LayerPtr(std::make_shared<ActivationLayer>(std::move(activation),
                                                    layer_util::default_name(name, "activation")));
}

LayerHandle ReLU(std::string name) {
  return LayerPtr(std::make_shared<ReLULayer>(layer_util::default_name(name, "re_lu")));
}

LayerHandle Rescaling(double scale, double offset, std::string name) {
  return LayerPtr(
      std::make_shared<RescalingLayer>(scale, offset, layer_util::default_name(name, "rescaling")));
}

}  // namespace layers
}  // namespace lockstep
