// Pooling: MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D, GlobalMaxPooling2D.
#include "nn/layers/layer_util.h"

namespace lockstep {
namespace {

void check_rank4(const Shape& s) {
  LS_CHECK(s.rank() == 4, "expected input of rank 4 (batch, height, width, channels), got ",
           s.str());
}

class Pool2D : public Layer {
 public:
  Pool2D(bool max, std::vector<int64_t> pool, layers::PoolOptions o, std::string name)
      : Layer(std::move(name)), max_(max), o_(std::move(o)) {
    try {
      pool_ = layer_util::pair(pool, "pool_size");
      strides_ = o_.strides.empty() ? pool_ : layer_util::pair(o_.strides, "strides");
      layer_util::check_padding(o_.padding);
    } catch (const Error& e) {
      LS_FAIL(class_name(), " '", this->name(), "': ", e.what());
    }
  }
  std::string class_name() const override { return max_ ? "MaxPooling2D" : "AveragePooling2D"; }
  json layer_config() const override {
    return {{"pool_size", pool_},
            {"padding", o_.padding},
            {"strides", strides_},
            {"data_format", "channels_last"}};
  }
  void build(const std::vector<Shape>& in) override { check_rank4(in.at(0)); }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    check_rank4(ctx.graph.type(in.at(0)).shape);
    return {ctx.graph.add(
        max_ ? op::max_pool2d : op::avg_pool2d, {in[0]},
        Attrs{{"pool_size", pool_}, {"strides", strides_}, {"padding", o_.padding}}, name())};
  }

 private:
  bool max_;
  layers::PoolOptions o_;
  std::vector<int64_t> pool_, strides_;
};

class GlobalPool2D : public Layer {
 public:
  GlobalPool2D(bool max, bool keepdims, std::string name)
      : Layer(std::move(name)), max_(max), keepdims_(keepdims) {}
  std::string class_name() const override {
    return max_ ? "GlobalMaxPooling2D" : "GlobalAveragePooling2D";
  }
  json layer_config() const override {
    return {{"data_format", "channels_last"}, {"keepdims", keepdims_}};
  }
  void build(const std::vector<Shape>& in) override { check_rank4(in.at(0)); }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    check_rank4(ctx.graph.type(in.at(0)).shape);
    return {ctx.graph.add(max_ ? op::reduce_max : op::reduce_mean, {in[0]},
                          Attrs{{"axes", std::vector<int64_t>{1, 2}}, {"keepdims", keepdims_}},
                          name())};
  }

 private:
  bool max_, keepdims_;
};

}  // namespace

namespace layers {

LayerHandle MaxPooling2D(std::vector<int64_t> pool_size, PoolOptions o) {
  std::string n = layer_util::default_name(o.name, "max_pooling2d");
  return LayerPtr(std::make_shared<Pool2D>(true, std::move(pool_size), std::move(o), n));
}

LayerHandle AveragePooling2D(std::vector<int64_t> pool_size, PoolOptions o) {
  std::string n = layer_util::default_name(o.name, "average_pooling2d");
  return LayerPtr(std::make_shared<Pool2D>(false, std::move(pool_size), std::move(o), n));
}

LayerHandle GlobalAveragePooling2D(bool keepdims, std::string name) {
  return LayerPtr(std::make_shared<GlobalPool2D>(
      false, keepdims, layer_util::default_name(name, "global_average_pooling2d")));
}

LayerHandle GlobalMaxPooling2D(bool keepdims, std::string name) {
  return LayerPtr(std::make_shared<GlobalPool2D>(
      true, keepdims, layer_util::default_name(name, "global_max_pooling2d")));
}

}  // namespace layers
}  // namespace lockstep
