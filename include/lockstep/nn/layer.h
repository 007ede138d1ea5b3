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

// Handed to Layer::call: the graph being built and how.
struct CallContext {
  Graph& graph;
  bool training = false;
  uint64_t seed = 0;
  std::vector<Value> losses;  // extra losses (regularizers) added by layers in this call
  // Set when the step runs replicated under a strategy (training only): the id of the
  // strategy's cross-replica group and this local replica's index. Layers that need
  // cross-replica values (BatchNormalization(synchronized=true)) add "cross_replica_sum" ops
  // with these attributes; -1 = not replicated.
  int64_t replica_group = -1;
  int replica = 0;
  // The calling layer's compute dtype, and whether its variables are read in it (Keras's
  // AutoCastVariable): Layer::invoke sets both around call().
  DType compute = DType::f32;
  bool autocast_variables = false;
  // Reads a variable into this graph: f32 as stored, cast to the compute dtype of a
  // mixed-precision layer (its gradient comes back cast to f32).
  Value read(const VariablePtr& v);
};

class Layer;
struct LayerCall;

// A symbolic tensor: output `index` of one layer call. Shapes carry -1 for the batch.
struct KTensor {
  std::shared_ptr<LayerCall> call;
  int index = 0;
  const Shape& shape() const;
  DType dtype() const;
};

// The outputs of a multi-input call. Converts to a KTensor when there is exactly one, so
// `KTensor s = layers::Add()({a, b});` reads like Keras's `Add()([a, b])`.
struct KTensors : std::vector<KTensor> {
  using std::vector<KTensor>::vector;
  KTensors(std::vector<KTensor> v) : std::vector<KTensor>(std::move(v)) {}  // NOLINT
  operator KTensor() const;  // NOLINT: throws unless size() == 1
};

// One application of a layer to symbolic inputs (a node of the model's layer graph).
struct LayerCall {
  std::shared_ptr<Layer> layer;
  std::vector<KTensor> inputs;
  std::vector<TensorType> outputs;
};

class Layer : public std::enable_shared_from_this<Layer> {
 public:
  explicit Layer(std::string name = "");
  virtual ~Layer() = default;

  // Keras class name, e.g. "Conv2D".
  virtual std::string class_name() const = 0;
  // Keras config (without name/trainable/dtype, which config() adds).
  virtual json layer_config() const { return json::object(); }
  json config() const;

  // Creates the weights for these input shapes (dim 0 is the batch, -1). Called once.
  virtual void build(const std::vector<Shape>& input_shapes) {}
  // Adds the layer's computation to ctx.graph and returns its outputs.
  virtual std::vector<Value> call(CallContext& ctx, const std::vector<Value>& inputs) = 0;

  // call() with Keras's autocasting: float inputs are cast to the layer's compute dtype and
  // variables read through ctx.read() come in it. Models call layers through this.
  std::vector<Value> invoke(CallContext& ctx, std::vector<Value> inputs);

  // The dtype policy (lockstep/nn/mixed_precision.h): the global policy when the layer was
  // created, or the one set here or by the layer's config ("dtype").
  const mixed_precision::DTypePolicy& dtype_policy() const { return policy_; }
  void set_dtype_policy(const std::string& name) { policy_ = mixed_precision::make_policy(name); }
  // bf16 for a mixed_bfloat16 layer, f32 otherwise (and always for computes_in_f32 layers).
  DType compute_dtype() const { return computes_in_f32() ? DType::f32 : policy_.compute; }

  // Functional API: applies the layer to symbolic tensors (builds on first call).
  KTensor operator()(const KTensor& x);
  KTensors operator()(const std::vector<KTensor>& xs);

  const std::string& name() const { return name_; }
  void set_name(const std::string& n) { name_ = n; }
  bool built() const { return built_; }
  bool trainable = true;

  // Keras weight order: the order weights were added (e.g. kernel, bias; gamma, beta,
  // moving_mean, moving_variance).
  const std::vector<VariablePtr>& weights() const { return weights_; }
  std::vector<VariablePtr> trainable_weights() const;
  std::vector<VariablePtr> non_trainable_weights() const;
  int64_t count_params() const;

  // Used by Model::compile to replay; also by summary().
  void ensure_built(const std::vector<Shape>& input_shapes);

 protected:
  // Adds a weight named "<layer>/<name>" initialised by `initializer` (see initializers.h).
  VariablePtr add_weight(const std::string& name, const Shape& shape,
                         const std::string& initializer, bool trainable = true);
  // Layers whose ops have no bf16 form (image preprocessing and augmentation) compute in f32
  // whatever the policy: their float inputs are cast to f32.
  virtual bool computes_in_f32() const { return false; }
  // Whether ctx.read() casts this layer's variables to its compute dtype (BatchNormalization
  // reads its f32 parameters and statistics as they are).
  virtual bool autocasts_variables() const { return true; }
  // Appends an L2 penalty on `w` to ctx.losses when l2 > 0.
  void add_l2(CallContext& ctx, const VariablePtr& w, double l2);
  // Lists a variable another layer owns as this layer's too (a nested model's weights).
  void track_weight(VariablePtr v) { weights_.push_back(std::move(v)); }
  uint64_t seed_ = 0;  // initializer seed, derived from the global seed and the layer name

 private:
  std::string name_;
  mixed_precision::DTypePolicy policy_;
  bool built_ = false;
  std::vector<VariablePtr> weights_;
};

using LayerPtr = std::shared_ptr<Layer>;

// A layer handle with Keras's call syntax: `auto y = layers::Dense(10)(x);`.
class LayerHandle {
 public:
  LayerHandle() = default;
  LayerHandle(LayerPtr p) : p_(std::move(p)) {}  // NOLINT: implicit on purpose
  KTensor operator()(const KTensor& x) const { return (*p_)(x); }
  KTensors operator()(const std::vector<KTensor>& xs) const { return (*p_)(xs); }
  Layer* operator->() const { return p_.get(); }
  Layer& operator*() const { return *p_; }
  const LayerPtr& ptr() const { return p_; }
  operator LayerPtr() const { return p_; }  // NOLINT
  template <typename T>
  std::shared_ptr<T> as() const {
    return std::dynamic_pointer_cast<T>(p_);
  }

 private:
  LayerPtr p_;
};

// Global seed for weight initialisation (keras.utils.set_random_seed).
void set_random_seed(uint64_t seed);
uint64_t random_seed();
// Unique Keras-style default names: "conv2d", "conv2d_1", ...
std::string unique_layer_name(const std::string& base);
void reset_layer_names();

}  // namespace lockstep
