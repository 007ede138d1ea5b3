// Keras configs: a registry of layer classes (class_name -> factory from a Keras layer config),
// Keras 3's model configs (Functional with inbound_nodes / input_layers / output_layers, and
// Sequential, as keras `model.to_json()` writes them), and rebuilding a Network from one.
//
//   json cfg = network.get_config();                // Keras 3 model config
//   Network again = network_from_config(cfg);       // same layers, names and graph
//   register_layer("MyLayer", [](const json& c) { return LayerPtr(...); });  // user layers
//
// A Sequential or functional model inside a model (Network::as_layer(); class_name "Sequential" /
// "Functional" in the config, its layers' weights under the nested layer's path in
// model.weights.h5) round-trips like any layer. A layer class or option Lockstep cannot
// represent is an error naming the layer and the key.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "lockstep/core/json.h"
#include "lockstep/nn/network.h"

namespace lockstep {

/// Builds a layer from its Keras config (the "config" object: name, trainable, dtype, ...).
using LayerFactory = std::function<LayerPtr(const json& config)>;
/// Registers (or replaces) the factory for `class_name`. The built-in Keras layers are
/// registered when the library loads.
void register_layer(const std::string& class_name, LayerFactory factory);
/// Whether layer_from_config knows `class_name` ("Dense", "Conv2D", a registered user layer).
bool is_layer_registered(const std::string& class_name);
/// Every registered layer class name, sorted (the built-in Keras layers and user layers).
std::vector<std::string> registered_layers();
/// {"class_name": ..., "config": {...}} -> a layer (throws for an unknown class).
LayerPtr layer_from_config(const json& layer);

/// keras `model.layers` order: Functional by depth from the inputs, ties in traversal order
/// (as keras.src.ops.function.map_graph); Sequential in list order without the InputLayer.
std::vector<LayerPtr> keras_layer_order(const Network& network);
/// Keras's saving layout of a network's weights (model.weights.h5 / .weights.h5): one slot per
/// layer in keras_layer_order, at "<prefix>layers/<snake_case class>[_N]" (deduplicated per
/// container); a nested model's slot holds no weights itself and its layers follow at
/// "<its path>/layers/...".
struct KerasWeightSlot {
  std::string path;                  ///< "layers/dense_1", "layers/sequential/layers/dense"
  LayerPtr layer;                    ///< the layer (or nested model) stored there
  std::vector<VariablePtr> weights;  ///< stored at path + "/vars/<i>"
};
/// The slots of `network` in Keras's order; `prefix` is prepended to every path ("" for the
/// top-level model).
std::vector<KerasWeightSlot> keras_weight_slots(const Network& network,
                                                const std::string& prefix = "");
/// Keras's naming.to_snake_case ("Conv2D" -> "conv2d", "MaxPooling2D" -> "max_pooling2d").
std::string keras_snake_case(const std::string& class_name);

/// Model config -> Network. Accepts Functional / Model and Sequential configs, with or without
/// the outer {"class_name", "config"} wrapper. Refused with an error naming the model: layer names
/// used twice (as Keras refuses them), [layer, node, tensor] references whose indices are
/// negative, not integers or out of range, models nested more than 100 levels deep
/// (kMaxModelNesting), and more than 10,000 layers in all, nested models' included (kMaxLayers).
/// network_from_json parses with parse_json (at most kMaxJsonDepth levels).
Network network_from_config(const json& config);
/// network_from_config of JSON text (Keras's `model.to_json()`, a .keras file's config.json).
Network network_from_json(const std::string& json_text);

/// Helper for factories: reads keys of a Keras layer config and, at finish(), fails on any key
/// it did not read, naming the layer and the key.
class KerasConfigReader {
 public:
  /// Reads the config of a `class_name` layer (an error unless `config` is an object); takes
  /// name, trainable and dtype (the policies float32 and mixed_bfloat16; others are
  /// refused) itself.
  KerasConfigReader(std::string class_name, const json& config);
  const std::string& name() const { return name_; }  ///< The config's "name" ("" when absent).
  bool has(const std::string& key) const;            ///< Whether the config has `key`.
  /// The value at `key` (null when absent), marking the key as read.
  const json& get(const std::string& key);
  /// The value at `key` as a T; `fallback` when absent or null; fail() when it is not a T.
  template <class T>
  T get(const std::string& key, T fallback) {
    const json& v = get(key);
    if (v.is_null()) return fallback;
    try {
      return v.get<T>();
    } catch (const std::exception& e) {
      fail(key, std::string("has an unexpected value ") + v.dump());
    }
  }
  /// Ints or one int -> a list of ints.
  std::vector<int64_t> ints(const std::string& key, std::vector<int64_t> fallback);
  /// Reads `key`; it must be absent, null or equal to one of `allowed`.
  void expect(const std::string& key, std::vector<json> allowed);
  /// Keras initializer / regularizer objects -> Lockstep names / L2 factors.
  std::string initializer(const std::string& key, const std::string& fallback);
  /// The L2 factor of a Keras L2 regularizer at `key`; 0 when absent; fail() for any other
  /// regularizer.
  double l2_regularizer(const std::string& key);
  /// Throws lockstep::Error "<class> '<name>': config key '<key>' <why>".
  [[noreturn]] void fail(const std::string& key, const std::string& why) const;
  /// Fails on the first config key no get() read ("is not an option Lockstep supports").
  void finish() const;
  bool trainable() const { return trainable_; }  ///< The config's "trainable" (default true).

 private:
  std::string class_name_, name_;
  json config_;
  std::vector<std::string> read_;
  bool trainable_ = true;
};

}  // namespace lockstep
