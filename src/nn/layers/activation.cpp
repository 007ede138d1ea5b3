// Activations: apply_activation (shared by Dense/Conv), Activation, ReLU (with max_value and
// negative_slope) and Rescaling layers.
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

// keras.layers.ReLU(max_value, negative_slope, threshold=0): relu6 for max_value 6, leaky_relu
// for a slope alone, else min(relu(x), max_value) - slope * relu(-x) (Keras's formula).
class ReLULayer : public Layer {
 public:
  ReLULayer(layers::ReLUOptions o, std::string name) : Layer(std::move(name)), o_(std::move(o)) {
    LS_CHECK(!o_.max_value || *o_.max_value >= 0, "ReLU '", this->name(),
             "': max_value must be >= 0, got ", *o_.max_value);
    LS_CHECK(o_.negative_slope >= 0, "ReLU '", this->name(), "': negative_slope must be >= 0, got ",
             o_.negative_slope);
    LS_CHECK(o_.threshold == 0.0, "ReLU '", this->name(), "': threshold ", o_.threshold,
             " is not supported (only 0); use max_value and negative_slope");
  }
  std::string class_name() const override { return "ReLU"; }
  json layer_config() const override {
    return {{"max_value", o_.max_value ? json(*o_.max_value) : json(nullptr)},
            {"negative_slope", o_.negative_slope},
            {"threshold", o_.threshold}};
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    Value x = in.at(0);
    const double slope = o_.negative_slope;
    if (!o_.max_value && slope == 0.0) return {g.add(op::relu, {x}, {}, name())};
    if (!o_.max_value) return {g.add(op::leaky_relu, {x}, Attrs{{"alpha", slope}}, name())};
    const bool six = *o_.max_value == 6.0;
    Value y = g.add(six ? op::relu6 : op::relu, {x}, {}, slope == 0.0 && six ? name() : "");
    if (!six)
      y = g.add(op::minimum, {y, scalar_like(g, x, *o_.max_value)}, {}, slope == 0.0 ? name() : "");
    if (slope == 0.0) return {y};
    Value neg = g.add(op::relu, {g.add(op::neg, {x})});
    neg = g.add(op::scale_shift, {neg}, Attrs{{"scale", -slope}, {"shift", 0.0}});
    return {g.add(op::add, {y, neg}, {}, name())};
  }

 private:
  static Value scalar_like(Graph& g, Value x, double v) {
    Value s = g.scalar(float(v));
    if (g.type(x).dtype == DType::f32) return s;
    return g.add(op::cast, {s}, Attrs{{"dtype", std::string(dtype_name(g.type(x).dtype))}});
  }
  layers::ReLUOptions o_;
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

LayerHandle ReLU(std::string name) { return ReLU(ReLUOptions{.name = std::move(name)}); }

LayerHandle ReLU(ReLUOptions o) {
  std::string name = layer_util::default_name(o.name, "re_lu");
  return LayerPtr(std::make_shared<ReLULayer>(std::move(o), std::move(name)));
}

LayerHandle Rescaling(double scale, double offset, std::string name) {
  return LayerPtr(
      std::make_shared<RescalingLayer>(scale, offset, layer_util::default_name(name, "rescaling")));
}

}  // namespace layers
}  // namespace lockstep
