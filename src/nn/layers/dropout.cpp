// Dropout: the dropout op while training (inverted scaling), identity at inference. With a
// noise_shape the dropout op draws a mask of that shape (from a slice of the input: ones_like of
// it), which multiplies the input broadcast. SpatialDropout2D is Dropout with noise_shape
// [N, 1, 1, C] (Keras's _get_noise_shape for channels_last).
#include "nn/layers/layer_util.h"

namespace lockstep {
namespace {

class DropoutLayer : public Layer {
 public:
  DropoutLayer(double rate, uint64_t seed, std::vector<int64_t> noise_shape, std::string name,
               std::string cls = "Dropout")
      : Layer(std::move(name)),
        rate_(rate),
        seed_arg_(seed),
        noise_shape_(std::move(noise_shape)),
        cls_(std::move(cls)) {
    LS_CHECK(rate >= 0.0 && rate < 1.0, cls_, " '", this->name(), "': rate must be in [0, 1), got ",
             rate);
    for (int64_t d : noise_shape_)
      LS_CHECK(d == -1 || d > 0, "Dropout '", this->name(),
               "': noise_shape entries must be positive or -1 (None), got ",
               Shape(noise_shape_).str());
  }
  std::string class_name() const override { return cls_; }
  // Keras: Dropout passes a mask on; SpatialDropout2D does not take one.
  bool supports_masking() const override { return cls_ == "Dropout"; }
  json layer_config() const override {
    json seed = seed_arg_ == 0 ? json(nullptr) : json(seed_arg_);
    // SpatialDropout2D's config: Keras writes no noise_shape, and no trainable (its __init__
    // refuses one; null tells Layer::config() to leave it out).
    if (cls_ == "SpatialDropout2D")
      return {{"rate", rate_},
              {"seed", seed},
              {"data_format", "channels_last"},
              {"trainable", nullptr}};
    json noise = noise_shape_.empty() ? json(nullptr) : json::array();
    for (int64_t d : noise_shape_) noise.push_back(d < 0 ? json(nullptr) : json(d));
    return {{"rate", rate_}, {"seed", seed}, {"noise_shape", noise}};
  }
  void build(const std::vector<Shape>& in) override {
    LS_CHECK(cls_ != "SpatialDropout2D" || in.at(0).rank() == 4, "SpatialDropout2D '", name(),
             "': expected NHWC input of rank 4 (data_format channels_last), got ", in.at(0).str());
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    if (!ctx.training || rate_ == 0.0) return {in.at(0)};
    // Without an explicit seed the kernel keys the mask by (model seed, node id, replica),
    // so identically built models draw identical masks whatever their layer names.
    uint64_t seed = seed_arg_;
    const Attrs attrs{{"rate", rate_}, {"seed", int64_t(seed)}};
    if (noise_shape_.empty())
      return {ctx.graph.add_multi(op::dropout, {in.at(0)}, attrs, name())[0]};
    return {broadcast_dropout(ctx.graph, in.at(0), attrs)};
  }
  double rate() const { return rate_; }

 private:
  // x * dropout(ones of the noise shape): the mask drawn once per noise_shape cell.
  Value broadcast_dropout(Graph& g, Value x, const Attrs& attrs) {
    const Shape s = g.type(x).shape;
    LS_CHECK(cls_ != "SpatialDropout2D" || s.rank() == 4, "SpatialDropout2D '", name(),
             "': expected NHWC input of rank 4, got ", s.str());
    LS_CHECK(int(noise_shape_.size()) == s.rank(), cls_, " '", name(), "': noise_shape ",
             Shape(noise_shape_).str(), " needs one entry per input axis; input ", s.str());
    std::vector<int64_t> begin(size_t(s.rank()), 0), size;
    for (int i = 0; i < s.rank(); ++i) {
      const int64_t d = noise_shape_[size_t(i)];
      LS_CHECK(d == -1 || d == 1 || d == s[i], cls_, " '", name(), "': noise_shape ",
               Shape(noise_shape_).str(), " does not broadcast to the input ", s.str());
      size.push_back(d == 1 ? 1 : -1);
    }
    Value cell = g.add(op::slice, {x}, Attrs{{"begin", begin}, {"size", size}});
    if (g.type(cell).dtype != DType::f32)
      cell = g.add(op::cast, {cell}, Attrs{{"dtype", "float32"}});
    Value ones = g.add(op::stop_gradient, {g.add(op::ones_like, {cell})});
    Value mask = g.add_multi(op::dropout, {ones}, attrs)[0];
    if (g.type(x).dtype != DType::f32)
      mask = g.add(op::cast, {mask}, Attrs{{"dtype", std::string(dtype_name(g.type(x).dtype))}});
    return g.add(op::mul, {x, mask}, {}, name());
  }
  double rate_;
  uint64_t seed_arg_;
  std::vector<int64_t> noise_shape_;
  std::string cls_;
};

}  // namespace

namespace layers {

LayerHandle Dropout(double rate, uint64_t seed, std::string name) {
  return Dropout(rate, DropoutOptions{.seed = seed, .name = std::move(name)});
}

LayerHandle Dropout(double rate, DropoutOptions o) {
  return LayerPtr(std::make_shared<DropoutLayer>(rate, o.seed, std::move(o.noise_shape),
                                                 layer_util::default_name(o.name, "dropout")));
}

LayerHandle SpatialDropout2D(double rate, uint64_t seed, std::string name) {
  return LayerPtr(std::make_shared<DropoutLayer>(
      rate, seed, std::vector<int64_t>{-1, 1, 1, -1},
      layer_util::default_name(name, "spatial_dropout2d"), "SpatialDropout2D"));
}

}  // namespace layers
}  // namespace lockstep
