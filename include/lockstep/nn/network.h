// Network: a graph of layer calls from inputs to outputs (the functional API), or a Sequential
// list — the structure and weights of a model. Training lives one layer up: lockstep/trainers/
// model.h's Model is a Network plus compile/fit/evaluate/predict.
#pragma once
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "lockstep/graph/device_residence.h"
#include "lockstep/nn/layer.h"

namespace lockstep {

class Network;
struct HostPreprocessing;  // lockstep/nn/text_layers.h
/// One entry of a Sequential list: a layer, or an Input (KTensor) as the first item (implicit
/// from each, so `Sequential({Input({4}), Dense(2)})` reads like Keras).
struct SequentialItem {
  /// A layer.
  SequentialItem(LayerHandle l) : layer(l.ptr()) {}  // NOLINT
  /// A nested model (its as_layer()).
  SequentialItem(const Network& nested);  // NOLINT
  /// A layer.
  SequentialItem(LayerPtr l) : layer(std::move(l)) {}  // NOLINT
  /// The Input (first item only).
  SequentialItem(KTensor t) : input(std::move(t)), is_input(true) {}  // NOLINT
  LayerPtr layer;         ///< the layer (unless is_input)
  KTensor input;          ///< the Input (when is_input)
  bool is_input = false;  ///< this item is the Input
};

/// The structure and weights of a model: a graph of layer calls from Inputs to outputs (the
/// functional API) or a Sequential list. Model adds training (lockstep/trainers/model.h).
class Network {
 public:
  Network() = default;  ///< empty
  /// Every input must come from layers::Input(); the layer calls reachable from the outputs
  /// are ordered topologically. Throws naming the network when an output depends on an Input
  /// that is not among `inputs`.
  Network(std::vector<KTensor> inputs, std::vector<KTensor> outputs, std::string name = "");
  /// keras.Sequential: the first item must be an Input (so shapes are known when built).
  /// (The default name becomes "sequential", "sequential_1", ... unless exact_name.)
  static Network sequential(std::vector<SequentialItem> items, std::string name = "sequential",
                            bool exact_name = false);

  /// Keras's model.summary() table (layer, output shape, parameters; totals) on `os`.
  void summary(std::ostream& os) const;
  void summary() const;                       ///< ... on stdout
  std::string name() const { return name_; }  ///< "sequential", "functional", or the given name
  /// The layers, in Keras's model.layers order (Sequential: the list, InputLayer first;
  /// functional: by depth from the inputs, ties in traversal order, as Keras's map_graph, so
  /// a branch's longer path comes first).
  const std::vector<LayerPtr>& layers() const { return layers_; }
  /// The layer called `name`; an unknown name throws lockstep::Error listing the model's layer
  /// names.
  LayerPtr get_layer(const std::string& name) const;
  /// Keras order: by layer, then weight order. The weights and trainable_weights() hand out the
  /// variables themselves: when a device holds newer values (a model trained on backend "xla")
  /// they come to the host first, and the device copies count as stale (the caller may write).
  std::vector<VariablePtr> weights() const;
  /// weights() that fit trains: the trainable weights of trainable layers (a frozen nested model
  /// freezes all of its layers; in a trainable one, each of its layers decides).
  std::vector<VariablePtr> trainable_weights() const;
  /// The other weights() (keras model.non_trainable_weights): frozen layers' weights and the
  /// layers' own non-trainable ones (BatchNormalization's moving statistics).
  std::vector<VariablePtr> non_trainable_weights() const;
  /// The non-trainable weights that training updates: those of trainable layers
  /// (BatchNormalization's moving statistics; a frozen BatchNormalization's stay put).
  std::vector<VariablePtr> updated_non_trainable_weights() const;
  /// keras `model.trainable = value`: sets `trainable` on every layer, the layers of nested
  /// models included, and on the network's own layer (as_layer()) when one exists. Then
  /// unfreeze the top layers one by one (`layers()[i]->trainable = true`) and compile again.
  void set_trainable(bool value);
  std::vector<Tensor> get_weights() const;  ///< copies of weights()' values (Keras order)
  /// Sets every weight, in get_weights()' order; throws on a count or shape mismatch.
  void set_weights(const std::vector<Tensor>& values);
  /// Where the weights' newest values live when a backend keeps them on a device (set by
  /// Model::compile; lockstep/graph/device_residence.h). Reads and writes through this
  /// network's methods keep host and device in step; code holding a layer's variables from
  /// before a fit step calls device_residence()->to_host() or ->host_changed() itself.
  void set_device_residence(std::shared_ptr<DeviceResidence> residence) {
    residence_ = std::move(residence);
  }
  /// The residence set_device_residence() gave (nullptr: none).
  const std::shared_ptr<DeviceResidence>& device_residence() const { return residence_; }
  int64_t count_params() const;  ///< the number of weight elements
  /// Keras 3's model config (Functional: layers with inbound_nodes, input_layers,
  /// output_layers; Sequential: the layer list), as keras `model.to_json()` writes it
  /// (lockstep/nn/config.h rebuilds a Network from one).
  json get_config() const;
  bool is_sequential() const { return sequential_; }  ///< built by Sequential
  /// The layer calls, topological (depth-first from the outputs, inputs in order).
  const std::vector<std::shared_ptr<LayerCall>>& calls() const { return calls_; }
  const std::vector<KTensor>& inputs() const { return inputs_; }    ///< the Inputs, in order
  const std::vector<KTensor>& outputs() const { return outputs_; }  ///< the outputs, in order
  /// Adds the network's computation to ctx.graph for the given input values (replay).
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& inputs) const;

  /// Nested models: the network as a layer of another model (Keras: calling a model on tensors
  /// or listing it in a Sequential). The layer is named after the network, its class is
  /// "Sequential" or "Functional", its weights are this network's variables (shared, not
  /// copied), and its config is the network's (lockstep/nn/config.h round-trips it). The same
  /// layer while it is alive: calling twice shares the weights.
  LayerPtr as_layer() const;
  /// Keras models whose first layers take strings (Input(dtype="string") -> TextVectorization
  /// -> ...): those layers run on the host before the compiled step, kept here (nullptr: none;
  /// lockstep/nn/text_layers.h). get_config() writes them back in front of the network.
  const std::shared_ptr<HostPreprocessing>& host_preprocessing() const { return host_; }
  /// Sets them (network_from_config does, for a Keras config with a string input).
  void set_host_preprocessing(std::shared_ptr<HostPreprocessing> h) { host_ = std::move(h); }
  /// Calls the network as a layer: `KTensor h = base(x);`.
  KTensor operator()(const KTensor& x) const { return (*as_layer())(x); }
  /// The same with several inputs.
  KTensors operator()(const std::vector<KTensor>& xs) const { return (*as_layer())(xs); }

 protected:
  std::string name_;  ///< name()
  ///@{
  /// inputs() and outputs().
  std::vector<KTensor> inputs_, outputs_;
  ///@}
  std::vector<std::shared_ptr<LayerCall>> calls_;  ///< topological order
  std::vector<LayerPtr> layers_;                   ///< layers()
  bool sequential_ = false;                        ///< is_sequential()
  mutable std::weak_ptr<Layer> as_layer_;          ///< weak: the layer holds a copy of this network
  std::shared_ptr<DeviceResidence> residence_;     ///< device_residence()
  std::shared_ptr<HostPreprocessing> host_;        ///< host_preprocessing()

 private:
  std::vector<VariablePtr> collect_weights() const;  // weights() without the device sync
  void order_layers_by_depth();                      // layers_ in Keras's map_graph order
};

/// The network behind a layer made by Network::as_layer() (a nested model), or nullptr.
const Network* nested_network(const Layer& layer);

inline SequentialItem::SequentialItem(const Network& nested) : layer(nested.as_layer()) {}

}  // namespace lockstep
