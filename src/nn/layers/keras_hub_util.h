// Shared by KerasHub's layers (src/nn/layers/keras_hub_*.cpp): the base class that gives them
// KerasHub's module and registered name and reads the keyword arguments of their calls, and the
// small graph helpers they compose.
#pragma once
#include <string>
#include <vector>

#include "lockstep/nn/config.h"
#include "nn/layers/keras_layer_hooks.h"
#include "nn/layers/layer_util.h"

namespace lockstep::keras_hub_detail {

/// A KerasHub layer: saved as module "keras_hub.src.layers.modeling.<file>" and registered name
/// "keras_hub>" + class_name(). Its calls take one positional tensor and the keyword arguments
/// `start_index` (an int, when takes_start_index()) and `training`; tensor_kwargs() names the
/// tensor keywords it takes after that (padding_mask, ...), bound once per layer.
class HubLayer : public Layer, public KerasLayerHooks {
 public:
  HubLayer(std::string name, std::string module_file)
      : Layer(std::move(name)), module_file_(std::move(module_file)) {}
  std::string keras_module() const override {
    return keras_core_ ? "keras.layers" : "keras_hub.src.layers.modeling." + module_file_;
  }
  std::string keras_registered_name() const override {
    return keras_core_ ? "" : "keras_hub>" + class_name();
  }
  /// Loaded as Keras's own class of the same name (keras.layers.ReversibleEmbedding): saved back
  /// as that, not as KerasHub's.
  bool keras_core_ = false;
  std::vector<std::string> bind_call_kwargs(const json& kwargs, size_t num_args) override;
  CallSpec call_spec(const LayerCall& call) const override;

 protected:
  /// Throws "<Class> '<name>': call argument '<key>' <why>".
  [[noreturn]] void fail_arg(const std::string& key, const std::string& why) const;
  /// Whether the call takes `start_index` (the position embeddings do).
  virtual bool takes_start_index() const { return false; }
  /// The tensor keyword arguments the call takes, in the order they follow the positional input
  /// (a call from C++ with more inputs than one passes the first of them, in this order).
  virtual std::vector<std::string> tensor_kwargs() const { return {}; }
  /// How many positional tensors a call takes; the second is tensor_kwargs()[0]
  /// (TransformerDecoder's encoder_sequence).
  virtual size_t max_positional() const { return 1; }
  /// Reads one non-tensor keyword argument other than start_index and training; false: not one
  /// this layer takes (bind_call_kwargs then refuses it).
  virtual bool bind_scalar_kwarg(const std::string& key, const json& value) { return false; }
  /// The non-tensor keyword arguments of `call` to save (start_index is added when nonzero).
  virtual json scalar_kwargs(const LayerCall& call) const { return json::object(); }
  /// The names of inputs 1.. of a call with `num_inputs` inputs: the keywords a loaded config
  /// bound, or else the first tensor_kwargs().
  std::vector<std::string> binding(size_t num_inputs) const;
  /// The input bound to keyword `key` (binding()), or Value{} when the call has none.
  Value kwarg_input(const std::vector<Value>& in, const std::string& key) const;
  /// Its index in the inputs, or -1.
  int kwarg_index(size_t num_inputs, const std::string& key) const;
  int64_t start_index_ = 0;  ///< KerasHub's start_index (positions start there)

 private:
  std::string module_file_;
  std::vector<std::string> bound_;
  bool bound_once_ = false;
};

/// A fixed table the graph reads (not a weight: Keras's layer has none): a non-trainable
/// variable named "<layer>/<what>".
VariablePtr fixed_table(const std::string& name, Tensor value);
/// zeros_like(x) + table (broadcast numpy-style): the table in x's shape and dtype.
Value broadcast_like(Graph& g, Value x, Value table, const std::string& name);
/// x cast to `dtype` when it is not already.
Value cast_to(Graph& g, Value x, DType dtype, const std::string& name);
/// An initializer from a KerasHub config: Lockstep's name for it, or, for one Lockstep cannot
/// build exactly (TruncatedNormal(stddev=0.02), as BERT's), its class with Keras's default
/// parameters; the config's own object is kept in *original for saving it back.
std::string hub_initializer(KerasConfigReader& r, const std::string& key,
                            const std::string& fallback, json* original);
/// The Keras JSON of an initializer: `original` when set, else initializer_json(name).
json initializer_or_original(const std::string& name, const json& original);

/// The factories of KerasHub's layers from their Keras configs (register_keras_hub_layers
/// registers them under "keras_hub>" + the class).
///@{
LayerPtr position_embedding_from_config(const json& c);
LayerPtr reversible_embedding_from_config(const json& c);
LayerPtr token_and_position_embedding_from_config(const json& c);
LayerPtr sine_position_encoding_from_config(const json& c);
LayerPtr rotary_embedding_from_config(const json& c);
LayerPtr transformer_from_config(const std::string& cls, const json& c);
///@}

}  // namespace lockstep::keras_hub_detail
