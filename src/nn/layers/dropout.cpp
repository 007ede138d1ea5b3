// Dropout: the dropout op while training (inverted scaling), identity at inference.
#include "nn/layers/layer_util.h"

namespace lockstep {
namespace {

class DropoutLayer : public Layer {
 public:
  DropoutLayer(double rate, uint64_t seed, std::string name)
      : Layer(std::move(name)), rate_(rate), seed_arg_(seed) {
    LS_CHECK(rate >= 0.0 && rate < 1.0, "Dropout '", this->name(),
             "': rate must be in [0, 1), got ", rate);
  }
  std::string class_name() const override { return "Dropout"; }
  json layer_config() const override {
    json seed = seed_arg_ == 0 ? json(nullptr) : json(seed_arg_);
    return {{"rate", rate_}, {"seed", seed}, {"noise_shape", nullptr}};
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    if (!ctx.training || rate_ == 0.0) return {in.at(0)};
    // Without an explicit seed the kernel keys the mask by (model seed, node id, replica),
    // so identically built models draw identical masks whatever their layer names.
    uint64_t seed = seed_arg_;
    auto outs = ctx.graph.add_multi(op::dropout, {in.at(0)},
                                    Attrs{{"rate", rate_}, {"seed", int64_t(seed)}}, name());
    return {outs.at(0)};
  }
  double rate() const { return rate_; }

 private:
  double rate_;
  uint64_t seed_arg_;
};

}  // namespace

namespace layers {

LayerHandle Dropout(double rate, uint64_t seed, std::string name) {
  return LayerPtr(
      std::make_shared<DropoutLayer>(rate, seed, layer_util::default_name(name, "dropout")));
}

}  // namespace layers
}  // namespace lockstep
