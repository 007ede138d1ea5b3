// Network: a graph of layer calls from inputs to outputs (the functional API), or a Sequential
// list — the structure and weights of a model. Training lives one layer up: lockstep/train/
// model.h's Model is a Network plus compile/fit/evaluate/predict.
#pragma once
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "lockstep/nn/layer.h"

namespace lockstep {

// One entry of a Sequential list: a layer, or an Input (KTensor) as the first item.
struct SequentialItem {
  SequentialItem(LayerHandle l) : layer(l.ptr()) {}                   // NOLINT
  SequentialItem(LayerPtr l) : layer(std::move(l)) {}                 // NOLINT
  SequentialItem(KTensor t) : input(std::move(t)), is_input(true) {}  // NOLINT
  LayerPtr layer;
  KTensor input;
  bool is_input = false;
};

class Network {
 public:
  Network() = default;
  // Every input must come from layers::Input(); the layer calls reachable from the outputs
  // are ordered topologically. Throws naming the network when an output depends on an Input
  // that is not among `inputs`.
  Network(std::vector<KTensor> inputs, std::vector<KTensor> outputs, std::string name = "");
  // keras.Sequential: the first item must be an Input (so shapes are known when built).
  static Network sequential(std::vector<SequentialItem> items, std::string name = "sequential");

  void summary(std::ostream& os) const;
  void summary() const;
  std::string name() const { return name_; }
  const std::vector<LayerPtr>& layers() const { return layers_; }
  LayerPtr get_layer(const std::string& name) const;
  std::vector<VariablePtr> weights() const;  // Keras order: by layer, then weight order
  std::vector<VariablePtr> trainable_weights() const;
  std::vector<Tensor> get_weights() const;
  void set_weights(const std::vector<Tensor>& values);
  int64_t count_params() const;
  json get_config() const;
  const std::vector<KTensor>& inputs() const { return inputs_; }
  const std::vector<KTensor>& outputs() const { return outputs_; }
  // Adds the network's computation to ctx.graph for the given input values (replay).
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& inputs) const;

 protected:
  std::string name_;
  std::vector<KTensor> inputs_, outputs_;
  std::vector<std::shared_ptr<LayerCall>> calls_;  // topological order
  std::vector<LayerPtr> layers_;
};

}  // namespace lockstep
