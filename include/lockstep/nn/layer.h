// Layer: the Keras building block. A layer owns its weights (Variables), knows its Keras
// config, and adds its ops to a graph when called. Models record which layer was called on
// which symbolic tensor (KTensor) and replay those calls into a fresh graph whenever they
// compile a program (train / evaluate / predict, per batch size).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "lockstep/core/json.h"
#include "lockstep/graph/graph.h"
#include "lockstep/nn/mixed_precision.h"

namespace lockstep {

/// Handed to Layer::call: the graph being built and how.
struct CallContext {
  Graph& graph;               ///< the graph the layer adds its ops to
  bool training = false;      ///< the training program (dropout and augmentation act)
  uint64_t seed = 0;          ///< the step's seed for random ops
  std::vector<Value> losses;  ///< extra losses (regularizers) added by layers in this call
  /// Set when the step runs replicated under a strategy (training only): the id of the
  /// strategy's cross-replica group and this local replica's index. Layers that need
  /// cross-replica values (BatchNormalization(synchronized=true)) add "cross_replica_sum" ops
  /// with these attributes; -1 = not replicated.
  ///@{
  int64_t replica_group = -1;
  int replica = 0;
  ///@}
  /// The replicas of the group are threads of this process on the cpu backend: synchronized
  /// statistics are batch_norm_train's own "group" attribute (lockstep/graph/replica_exchange.h),
  /// not cross_replica_sum ops.
  bool replicas_in_process = false;
  /// Every BatchNormalization in training pools its statistics over the group, as if it were
  /// synchronized (thread replicas: one batch split over the cores, lockstep/core/config.h).
  bool synchronize_batch_norm = false;
  /// Inside a frozen nested model (a Network layer with trainable = false): Keras freezes
  /// every layer of a frozen model, so BatchNormalization runs in inference mode there too.
  bool frozen = false;
  /// The calling layer's compute dtype, and whether its variables are read in it (Keras's
  /// AutoCastVariable): Layer::invoke sets both around call().
  ///@{
  DType compute = DType::f32;
  bool autocast_variables = false;
  ///@}
  /// Reads a variable into this graph: f32 as stored, cast to the compute dtype of a
  /// mixed-precision layer (its gradient comes back cast to f32).
  Value read(const VariablePtr& v);
  /// Keras masks (see "Masks" at Layer::supports_masking): while a layer's call() runs, the
  /// mask of each of its inputs, in input order: a float32 (batch, time) tensor, 1 where a
  /// step is kept and 0 where it is masked; an invalid Value (Value{}) for an input without one.
  /// Empty when no input has a mask. Layers read it; Network and Layer::operator() set it.
  std::vector<Value> masks;
  /// After Network::call: the mask of each model output (Value{} for none), for the losses and
  /// metrics, which weight each step by it as Keras does.
  std::vector<Value> output_masks;
};

class Layer;
struct LayerCall;

/// A symbolic tensor: output `index` of one layer call. Shapes carry -1 for the batch.
struct KTensor {
  std::shared_ptr<LayerCall> call;  ///< the layer call that produces it
  int index = 0;                    ///< which of the call's outputs
  const Shape& shape() const;       ///< with -1 for the batch: (-1, 28, 28, 1)
  DType dtype() const;              ///< its dtype (the producing layer's compute dtype)
  bool masked() const;              ///< whether it carries a Keras mask (Layer::compute_mask)
};

/// The outputs of a multi-input call. Converts to a KTensor when there is exactly one, so
/// `KTensor s = layers::Add()({a, b});` reads like Keras's `Add()([a, b])`.
struct KTensors : std::vector<KTensor> {
  using std::vector<KTensor>::vector;
  /// From a vector of KTensors.
  KTensors(std::vector<KTensor> v) : std::vector<KTensor>(std::move(v)) {}  // NOLINT
  /// The only output; throws unless size() == 1.
  operator KTensor() const;  // NOLINT
};

/// One application of a layer to symbolic inputs (a node of the model's layer graph).
struct LayerCall {
  std::shared_ptr<Layer> layer;     ///< the layer called
  std::vector<KTensor> inputs;      ///< its symbolic inputs
  std::vector<TensorType> outputs;  ///< its outputs' dtypes and shapes
  std::vector<bool> masked;         ///< per output: whether it carries a Keras mask
};

/// A Keras layer (keras.layers.Layer): it owns its weights, knows its Keras config, and adds
/// its ops to the graph a model compiles. Subclass it for your own (docs/extending.md).
class Layer : public std::enable_shared_from_this<Layer> {
 public:
  /// A layer named `name` (the layers' factories pick unique Keras-style defaults).
  explicit Layer(std::string name = "");
  virtual ~Layer() = default;

  /// Keras class name, e.g. "Conv2D".
  virtual std::string class_name() const = 0;
  /// Keras config (without name/trainable/dtype, which config() adds).
  virtual json layer_config() const { return json::object(); }
  json config() const;  ///< layer_config() plus name, trainable and dtype

  /// Creates the weights for these input shapes (dim 0 is the batch, -1). Called once.
  virtual void build(const std::vector<Shape>& input_shapes) {}
  /// Adds the layer's computation to ctx.graph and returns its outputs.
  virtual std::vector<Value> call(CallContext& ctx, const std::vector<Value>& inputs) = 0;

  /// call() with Keras's autocasting: float inputs are cast to the layer's compute dtype and
  /// variables read through ctx.read() come in it. Models call layers through this.
  std::vector<Value> invoke(CallContext& ctx, std::vector<Value> inputs);

  /// The dtype policy (lockstep/nn/mixed_precision.h): the global policy when the layer was
  /// created, or the one set here or by the layer's config ("dtype").
  const mixed_precision::DTypePolicy& dtype_policy() const { return policy_; }
  /// Sets the layer's own policy ("float32", "mixed_bfloat16"); Keras's `dtype=` argument.
  void set_dtype_policy(const std::string& name) { policy_ = mixed_precision::make_policy(name); }
  /// bf16 for a mixed_bfloat16 layer, f32 otherwise (and always for computes_in_f32 layers).
  DType compute_dtype() const { return computes_in_f32() ? DType::f32 : policy_.compute; }

  /// Functional API: applies the layer to symbolic tensors (builds on first call).
  KTensor operator()(const KTensor& x);
  /// The same for several inputs (Add, Concatenate, ...).
  KTensors operator()(const std::vector<KTensor>& xs);

  const std::string& name() const { return name_; }   ///< unique in its model: "dense_1"
  void set_name(const std::string& n) { name_ = n; }  ///< renames it
  bool built() const { return built_; }               ///< build() has run
  /// false: the layer is frozen (keras `layer.trainable = False`): fit neither differentiates
  /// nor updates its weights (nor all-reduces them under a strategy), a frozen
  /// BatchNormalization normalises with its moving statistics and leaves them as they are, and
  /// a frozen nested model freezes all of its layers. Takes effect at the next compile() (as in
  /// Keras: change it, then compile again).
  bool trainable = true;

  /// Keras weight order: the order weights were added (e.g. kernel, bias; gamma, beta,
  /// moving_mean, moving_variance). The caller may write them (note_variable_host_write()).
  const std::vector<VariablePtr>& weights() const {
    note_variable_host_write();
    return weights_;
  }
  std::vector<VariablePtr> trainable_weights() const;      ///< weights() fit updates
  std::vector<VariablePtr> non_trainable_weights() const;  ///< the others (moving statistics)
  int64_t count_params() const;                            ///< the number of weight elements

  /// Used by Model::compile to replay; also by summary().
  void ensure_built(const std::vector<Shape>& input_shapes);

  /// Masks, as Keras propagates them. A layer such as Embedding(mask_zero=true) or Masking
  /// produces a mask (compute_mask); each layer it reaches must take it (supports_masking), or
  /// the model is refused when it is built, naming both layers. A layer that takes masks reads
  /// them from ctx.masks in call() (recurrent layers skip masked steps, global pooling ignores
  /// them) and says what mask its outputs carry through compute_mask: by default, a layer that
  /// supports masking passes its first input's mask to every output (Dense, Dropout,
  /// Activation), and other layers produce none.
  ///@{
  /// Whether call() accepts inputs that carry a mask (Keras's `supports_masking`).
  virtual bool supports_masking() const { return false; }
  /// The mask of each output, given the inputs and their masks (`masks` as ctx.masks holds
  /// them; Keras's `compute_mask`). Value{} for an output without one.
  virtual std::vector<Value> compute_mask(CallContext& ctx, const std::vector<Value>& inputs,
                                          const std::vector<Value>& masks, int num_outputs);
  ///@}

 protected:
  /// Adds a weight named "<layer>/<name>" initialised by `initializer` (see initializers.h).
  VariablePtr add_weight(const std::string& name, const Shape& shape,
                         const std::string& initializer, bool trainable = true);
  /// Layers whose ops have no bf16 form (image preprocessing and augmentation) compute in f32
  /// whatever the policy: their float inputs are cast to f32.
  virtual bool computes_in_f32() const { return false; }
  /// Whether ctx.read() casts this layer's variables to its compute dtype (BatchNormalization
  /// reads its f32 parameters and statistics as they are).
  virtual bool autocasts_variables() const { return true; }
  /// Appends an L2 penalty on `w` to ctx.losses when l2 > 0.
  void add_l2(CallContext& ctx, const VariablePtr& w, double l2);
  /// Lists a variable another layer owns as this layer's too (a nested model's weights).
  void track_weight(VariablePtr v) { weights_.push_back(std::move(v)); }
  uint64_t seed_ = 0;  ///< initializer seed, derived from the global seed and the layer name

 private:
  std::string name_;
  mixed_precision::DTypePolicy policy_;
  bool built_ = false;
  std::vector<VariablePtr> weights_;
};

/// A shared layer.
using LayerPtr = std::shared_ptr<Layer>;

/// A layer handle with Keras's call syntax: `auto y = layers::Dense(10)(x);`.
class LayerHandle {
 public:
  LayerHandle() = default;  ///< no layer
  /// Wraps a layer.
  LayerHandle(LayerPtr p) : p_(std::move(p)) {}  // NOLINT: implicit on purpose
  /// Calls the layer on a symbolic tensor (builds it on the first call).
  KTensor operator()(const KTensor& x) const { return (*p_)(x); }
  /// Calls the layer on several symbolic tensors.
  KTensors operator()(const std::vector<KTensor>& xs) const { return (*p_)(xs); }
  Layer* operator->() const { return p_.get(); }  ///< the layer's members
  Layer& operator*() const { return *p_; }        ///< the layer
  const LayerPtr& ptr() const { return p_; }      ///< the shared layer
  /// The shared layer.
  operator LayerPtr() const { return p_; }  // NOLINT
  /// The layer as its concrete class T (nullptr when it is not one).
  template <typename T>
  std::shared_ptr<T> as() const {
    return std::dynamic_pointer_cast<T>(p_);
  }

 private:
  LayerPtr p_;
};

/// Global seed for weight initialisation (keras.utils.set_random_seed).
void set_random_seed(uint64_t seed);
uint64_t random_seed();  ///< the global seed (set_random_seed's)
/// Unique Keras-style default names: "conv2d", "conv2d_1", ...
std::string unique_layer_name(const std::string& base);
/// Restarts the default names ("conv2d" again; Keras's clear_session()).
void reset_layer_names();

}  // namespace lockstep
