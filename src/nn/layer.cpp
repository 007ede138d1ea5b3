// Layer base: naming, weights, config, and the functional call that records LayerCalls.
#include "lockstep/nn/layer.h"

#include <functional>
#include <map>
#include <mutex>

#include "lockstep/nn/initializers.h"
#include "lockstep/nn/shapes_only.h"

namespace lockstep {

static uint64_t g_seed = 1337;
static std::map<std::string, int> g_names;
static std::mutex g_names_mu;

void set_random_seed(uint64_t seed) { g_seed = seed; }
uint64_t random_seed() { return g_seed; }

std::string unique_layer_name(const std::string& base) {
  std::lock_guard<std::mutex> lock(g_names_mu);
  int n = g_names[base]++;
  return n == 0 ? base : base + "_" + std::to_string(n);
}

void reset_layer_names() {
  std::lock_guard<std::mutex> lock(g_names_mu);
  g_names.clear();
}

const Shape& KTensor::shape() const { return call->outputs.at(index).shape; }
DType KTensor::dtype() const { return call->outputs.at(index).dtype; }
bool KTensor::masked() const { return index < int(call->masked.size()) && call->masked[index]; }

std::vector<Value> Layer::compute_mask(CallContext&, const std::vector<Value>&,
                                       const std::vector<Value>& masks, int num_outputs) {
  Value first = masks.empty() || !supports_masking() ? Value{} : masks[0];
  return std::vector<Value>(size_t(num_outputs), first);
}

Layer::Layer(std::string name)
    : name_(std::move(name)), policy_(mixed_precision::global_policy()) {}

Value CallContext::read(const VariablePtr& v) {
  Value x = graph.variable(v);
  if (autocast_variables && compute != DType::f32 && graph.type(x).dtype == DType::f32)
    x = graph.add(op::cast, {x}, Attrs{{"dtype", std::string(dtype_name(compute))}});
  return x;
}

std::vector<Value> Layer::invoke(CallContext& ctx, std::vector<Value> inputs) {
  const DType compute = compute_dtype();
  for (Value& x : inputs) {
    DType t = ctx.graph.type(x).dtype;
    if (is_float(t) && t != compute)
      x = ctx.graph.add(op::cast, {x}, Attrs{{"dtype", std::string(dtype_name(compute))}});
  }
  struct Restore {
    CallContext& c;
    DType compute;
    bool autocast;
    ~Restore() { c.compute = compute, c.autocast_variables = autocast; }
  } restore{ctx, ctx.compute, ctx.autocast_variables};
  ctx.compute = compute;
  ctx.autocast_variables = autocasts_variables();
  return call(ctx, inputs);
}

json Layer::config() const {
  json c = layer_config();
  c["name"] = name_;
  // A layer_config() with "trainable": null leaves the key out: Keras's SpatialDropout2D takes
  // no `trainable` argument and refuses a config that has one.
  if (c.contains("trainable") && c["trainable"].is_null())
    c.erase("trainable");
  else
    c["trainable"] = trainable;
  // Keras writes a DTypePolicy object; a plain "float32" reads the same and is what we wrote
  // before policies existed, so float32 layers keep it.
  // (a dtype layer_config() set stays: an integer InputLayer's "int32")
  if (c.contains("dtype")) return c;
  if (policy_.name == "float32")
    c["dtype"] = "float32";
  else
    c["dtype"] = {{"module", "keras"},
                  {"class_name", "DTypePolicy"},
                  {"config", {{"name", policy_.name}}},
                  {"registered_name", nullptr}};
  return c;
}

std::vector<VariablePtr> Layer::trainable_weights() const {
  std::vector<VariablePtr> v;
  if (!trainable) return v;
  for (auto& w : weights_)
    if (w->trainable) v.push_back(w);
  return v;
}

std::vector<VariablePtr> Layer::non_trainable_weights() const {
  std::vector<VariablePtr> v;
  for (auto& w : weights_)
    if (!w->trainable || !trainable) v.push_back(w);
  return v;
}

int64_t Layer::count_params() const {
  int64_t n = 0;
  for (auto& w : weights_) n += w->value.numel();
  return n;
}

void Layer::ensure_built(const std::vector<Shape>& input_shapes) {
  if (built_) return;
  seed_ = g_seed * 0x9E3779B97F4A7C15ull ^ std::hash<std::string>{}(name_);
  try {
    build(input_shapes);
  } catch (const Error& e) {
    LS_FAIL(class_name(), " '", name_, "': ", e.what());
  }
  built_ = true;
}

namespace {
thread_local bool shapes_only = false;  // ShapesOnlyScope (lockstep/nn/shapes_only.h)
}  // namespace

ShapesOnlyScope::ShapesOnlyScope() : previous_(shapes_only) { shapes_only = true; }
ShapesOnlyScope::~ShapesOnlyScope() { shapes_only = previous_; }

VariablePtr Layer::add_weight(const std::string& name, const Shape& shape,
                              const std::string& initializer, bool trainable_weight) {
  auto v = std::make_shared<Variable>();
  v->name = name_ + "/" + name;
  // Sizes from a config (Dense units 2^62) are checked, naming the weight, before allocating.
  checked_bytes(shape, dtype_size(DType::f32), "weight '" + name + "'");
  try {
    v->value = shapes_only ? Tensor::empty(shape) : Tensor::zeros(shape);  // empty: not touched
  } catch (const Error& e) {
    LS_FAIL("layer '", name_, "', weight '", name, "': ", e.what());
  }
  v->trainable = trainable_weight;
  if (!shapes_only) initialize(v->value, initializer, seed_ + weights_.size() * 7919);
  weights_.push_back(v);
  return v;
}

void Layer::add_l2(CallContext& ctx, const VariablePtr& w, double l2) {
  if (l2 <= 0 || !ctx.training) return;
  Graph& g = ctx.graph;
  Value x = g.variable(w);  // the penalty is computed on the f32 weight, as Keras does
  Value sq = g.add(op::square, {x});
  std::vector<int64_t> axes;
  for (int i = 0; i < w->value.rank(); ++i) axes.push_back(i);
  Value s = g.add(op::reduce_sum, {sq}, Attrs{{"axes", axes}, {"keepdims", false}});
  ctx.losses.push_back(g.add(op::scale_shift, {s}, Attrs{{"scale", l2}, {"shift", 0.0}}));
}

KTensors::operator KTensor() const {
  LS_CHECK(size() == 1, "this layer call has ", size(),
           " outputs; index them (outputs[i]) instead of converting to one KTensor");
  return front();
}

KTensors Layer::operator()(const std::vector<KTensor>& xs) {
  LS_CHECK(!xs.empty(), class_name(), " '", name_, "': called with no inputs");
  std::vector<Shape> shapes;
  for (auto& x : xs) {
    LS_CHECK(x.call, class_name(), " '", name_,
             "': input is not a symbolic tensor (use layers::Input)");
    shapes.push_back(x.shape());
  }
  ensure_built(shapes);
  // Shape inference (and early errors) by calling the layer on a throwaway symbolic graph.
  Graph g;
  std::vector<Value> ins;
  for (size_t i = 0; i < xs.size(); ++i)
    ins.push_back(g.input({xs[i].dtype(), xs[i].shape()}, "x"));
  CallContext ctx{g, false, 0, {}};
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!xs[i].masked()) continue;
    const Layer& from = *xs[i].call->layer;
    LS_CHECK(supports_masking(), class_name(), " '", name_, "' cannot take the mask that ",
             from.class_name(), " '", from.name(),
             "' produces (Keras masks, e.g. Embedding(mask_zero=True) or Masking): consume it "
             "first with a layer that takes masks (an RNN, GlobalAveragePooling1D, "
             "GlobalMaxPooling1D), or build the model without the mask");
    ctx.masks.resize(xs.size());
    const Shape& s = xs[i].shape();
    ctx.masks[i] = g.input({DType::f32, Shape{s[0], s.rank() > 1 ? s[1] : 1}}, "mask");
  }
  std::vector<Value> outs;
  std::vector<Value> out_masks;
  try {
    outs = invoke(ctx, ins);
    out_masks = compute_mask(ctx, ins, ctx.masks, int(outs.size()));
  } catch (const Error& e) {
    std::string msg = e.what();
    // Prefix unless an op error already names this layer (quoted, so "cat" in "concat" or
    // "dense" in "dense_1" does not count).
    if (msg.find("'" + name_ + "'") == std::string::npos)
      LS_FAIL(class_name(), " '", name_, "': ", msg);
    throw;
  }
  auto lc = std::make_shared<LayerCall>();
  lc->layer = shared_from_this();
  lc->inputs = xs;
  for (Value v : outs) lc->outputs.push_back(g.type(v));
  for (Value m : out_masks) lc->masked.push_back(m.valid());
  std::vector<KTensor> r;
  for (int i = 0; i < int(outs.size()); ++i) r.push_back({lc, i});
  return r;
}

KTensor Layer::operator()(const KTensor& x) { return (*this)(std::vector<KTensor>{x})[0]; }

}  // namespace lockstep
