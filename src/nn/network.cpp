// Network: the layer-call graph (functional / Sequential), replay into step graphs, weights,
// config.
#include "lockstep/nn/network.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "lockstep/core/strings.h"
#include "lockstep/nn/config.h"
#include "lockstep/nn/layers.h"

namespace lockstep {

Network::Network(std::vector<KTensor> inputs, std::vector<KTensor> outputs, std::string name)
    : name_(name.empty() ? unique_layer_name("functional") : std::move(name)),
      inputs_(std::move(inputs)),
      outputs_(std::move(outputs)) {
  LS_CHECK(!inputs_.empty() && !outputs_.empty(), "Model '", name_, "': needs inputs and outputs");
  std::set<LayerCall*> input_calls;
  for (auto& t : inputs_) {
    LS_CHECK(t.call && t.call->inputs.empty(), "Model '", name_,
             "': every input must come from layers::Input()");
    input_calls.insert(t.call.get());
  }
  // Depth-first topological sort of the layer calls reachable from the outputs.
  std::set<LayerCall*> seen;
  std::function<void(const std::shared_ptr<LayerCall>&)> visit =
      [&](const std::shared_ptr<LayerCall>& c) {
        if (seen.count(c.get())) return;
        seen.insert(c.get());
        if (c->inputs.empty())
          LS_CHECK(input_calls.count(c.get()), "Model '", name_, "': output depends on Input '",
                   c->layer->name(), "' that is not in the model's inputs");
        for (auto& in : c->inputs) visit(in.call);
        calls_.push_back(c);
      };
  for (auto& t : outputs_) visit(t.call);
  std::set<Layer*> layer_seen;
  std::set<std::string> names;
  for (auto& c : calls_) {
    if (!layer_seen.insert(c->layer.get()).second) continue;
    layers_.push_back(c->layer);
    // Weights are saved and found by layer name: two layers of one name would collide.
    LS_CHECK(names.insert(c->layer->name()).second, "Model '", name_, "': two layers are named '",
             c->layer->name(), "'; layer names must be unique in a model (as in Keras)");
  }
  order_layers_by_depth();
}

// keras.src.ops.function.map_graph: node depths from the outputs (calls_ is the post-order of
// the traversal from the outputs, so reversed it visits every consumer before its inputs),
// layers by decreasing depth, ties by the pre-order index of that traversal. A chain keeps its
// order; in a branch the longer path comes first (ResNet's block: 1_conv ... 2_relu, then
// 0_conv, 3_conv, 0_bn, 3_bn), so model.layers() and weights() line up with Keras's by position.
void Network::order_layers_by_depth() {
  std::map<LayerCall*, int> node_depth;
  std::map<Layer*, int> layer_depth;
  for (auto it = calls_.rbegin(); it != calls_.rend(); ++it) {
    LayerCall* c = it->get();
    int d = std::max(node_depth[c], layer_depth[c->layer.get()]);
    layer_depth[c->layer.get()] = d;
    node_depth[c] = d;
    for (auto& in : c->inputs)
      node_depth[in.call.get()] = std::max(node_depth[in.call.get()], d + 1);
  }
  std::map<Layer*, int> pre_index;
  std::set<LayerCall*> done;
  std::function<void(const std::shared_ptr<LayerCall>&)> visit = [&](const auto& c) {
    if (done.count(c.get())) return;
    pre_index.emplace(c->layer.get(), int(pre_index.size()));
    for (auto& in : c->inputs) visit(in.call);
    done.insert(c.get());
  };
  for (auto& o : outputs_) visit(o.call);
  std::stable_sort(layers_.begin(), layers_.end(), [&](const LayerPtr& a, const LayerPtr& b) {
    int da = layer_depth[a.get()], db = layer_depth[b.get()];
    return da != db ? da > db : pre_index[a.get()] < pre_index[b.get()];
  });
}

Network Network::sequential(std::vector<SequentialItem> items, std::string name, bool exact_name) {
  LS_CHECK(!items.empty() && items[0].is_input, "Sequential '", name,
           "': the first item must be layers::Input({...}) so that shapes are known");
  KTensor x = items[0].input;
  KTensor in = x;
  for (size_t i = 1; i < items.size(); ++i) {
    LS_CHECK(!items[i].is_input, "Sequential '", name, "': Input may only be the first item");
    x = (*items[i].layer)(x);
  }
  Network net({in}, {x},
              name == "sequential" && !exact_name ? unique_layer_name("sequential") : name);
  net.sequential_ = true;
  return net;
}

std::vector<Value> Network::call(CallContext& ctx, const std::vector<Value>& inputs) const {
  LS_CHECK(inputs.size() == inputs_.size(), "Model '", name_, "': expected ", inputs_.size(),
           " inputs, got ", inputs.size());
  std::map<LayerCall*, std::vector<Value>> vals, masks;  // masks: Value{} where none
  for (size_t i = 0; i < inputs_.size(); ++i) vals[inputs_[i].call.get()] = {inputs[i]};
  auto mask_of = [&](const KTensor& t) {
    auto it = masks.find(t.call.get());
    return it == masks.end() ? Value{} : it->second.at(size_t(t.index));
  };
  for (auto& c : calls_) {
    if (c->inputs.empty()) continue;
    std::vector<Value> ins, in_masks;
    bool any_mask = false;
    for (auto& t : c->inputs) {
      ins.push_back(vals.at(t.call.get()).at(t.index));
      in_masks.push_back(mask_of(t));
      any_mask = any_mask || in_masks.back().valid();
    }
    // (a mask reaching a layer that cannot take it was refused when the model was built)
    ctx.masks = any_mask ? in_masks : std::vector<Value>{};
    try {
      std::vector<Value> outs = c->layer->invoke(ctx, ins);
      masks[c.get()] = c->layer->compute_mask(ctx, ins, ctx.masks, int(outs.size()));
      vals[c.get()] = std::move(outs);
    } catch (const Error& e) {
      std::string msg = e.what();
      if (msg.find(c->layer->name()) == std::string::npos)
        LS_FAIL(c->layer->class_name(), " '", c->layer->name(), "': ", msg);
      throw;
    }
  }
  ctx.masks.clear();
  std::vector<Value> out;
  ctx.output_masks.clear();
  for (auto& t : outputs_) {
    out.push_back(vals.at(t.call.get()).at(t.index));
    ctx.output_masks.push_back(mask_of(t));
  }
  return out;
}

LayerPtr Network::get_layer(const std::string& name) const {
  for (auto& l : layers_)
    if (l->name() == name) return l;
  std::vector<std::string> names;
  for (auto& l : layers_) names.push_back("'" + l->name() + "'");
  LS_FAIL("Model '", name_, "': no layer named '", name, "'; its layers are ", join(names));
}

std::vector<VariablePtr> Network::weights() const {
  if (residence_) residence_->host_changed();
  return collect_weights();
}

std::vector<VariablePtr> Network::collect_weights() const {
  std::vector<VariablePtr> w;
  for (auto& l : layers_)
    for (auto& v : l->weights()) w.push_back(v);
  return w;
}

namespace {

// The weights of `net` sorted three ways: trained, non-trainable but updated by training
// (moving statistics of trainable layers), and frozen (a frozen layer's, or any layer's inside
// a frozen nested model). `frozen`: an enclosing nested model is frozen.
struct WeightKinds {
  std::vector<VariablePtr> trained, updated, frozen;
};

void sort_weights(const Network& net, bool frozen, WeightKinds& out) {
  for (auto& l : net.layers()) {
    const bool layer_frozen = frozen || !l->trainable;
    if (const Network* nested = nested_network(*l)) {
      sort_weights(*nested, layer_frozen, out);
      continue;
    }
    for (auto& v : l->weights())
      (layer_frozen ? out.frozen : v->trainable ? out.trained : out.updated).push_back(v);
  }
}

WeightKinds weight_kinds(const Network& net) {
  WeightKinds k;
  sort_weights(net, false, k);
  return k;
}

}  // namespace

std::vector<VariablePtr> Network::trainable_weights() const {
  if (residence_) residence_->host_changed();  // the caller gets the variables themselves
  return weight_kinds(*this).trained;
}

std::vector<VariablePtr> Network::updated_non_trainable_weights() const {
  if (residence_) residence_->host_changed();
  return weight_kinds(*this).updated;
}

std::vector<VariablePtr> Network::non_trainable_weights() const {
  WeightKinds k = weight_kinds(*this);
  std::set<const Variable*> other;
  for (auto& v : k.updated) other.insert(v.get());
  for (auto& v : k.frozen) other.insert(v.get());
  std::vector<VariablePtr> out;  // in weights() order
  for (auto& v : weights())
    if (other.count(v.get())) out.push_back(v);
  return out;
}

// Every layer of `net` and of its nested models (shared layers: the network itself is const).
static void set_layers_trainable(const Network& net, bool value) {
  for (auto& l : net.layers()) {
    l->trainable = value;
    if (const Network* nested = nested_network(*l)) set_layers_trainable(*nested, value);
  }
}

void Network::set_trainable(bool value) {
  if (auto self = as_layer_.lock()) self->trainable = value;
  set_layers_trainable(*this, value);
}

std::vector<Tensor> Network::get_weights() const {
  if (residence_) residence_->to_host();
  std::vector<Tensor> out;
  for (auto& v : collect_weights()) out.push_back(v->value.clone());
  return out;
}

void Network::set_weights(const std::vector<Tensor>& values) {
  auto w = weights();  // (the device copies are stale from here)
  LS_CHECK(values.size() == w.size(), "set_weights: model '", name_, "' has ", w.size(),
           " weights, got ", values.size());
  for (size_t i = 0; i < w.size(); ++i) {
    LS_CHECK(values[i].shape() == w[i]->value.shape(), "set_weights: weight '", w[i]->name,
             "' has shape ", w[i]->value.shape().str(), ", got ", values[i].shape().str());
    w[i]->value.copy_from(values[i]);  // in place: compiled programs keep their views
  }
}

int64_t Network::count_params() const {
  int64_t n = 0;
  for (auto& l : layers_) n += l->count_params();
  return n;
}

// Network::get_config() is in src/nn/config.cpp, next to the layer registry.

// ---- nested models ------------------------------------------------------------------------
namespace {

// A Network as a layer: Keras's Sequential / Functional called inside another model.
class NetworkLayer : public Layer {
 public:
  explicit NetworkLayer(const Network& net) : Layer(net.name()), net_(net) {
    LS_CHECK(!net_.inputs().empty(), "Model '", net_.name(),
             "': an empty model cannot be used as a layer");
    // Keras's order: the nested model's layers as model.layers lists them.
    for (auto& l : keras_layer_order(net_))
      for (auto& v : l->weights()) track_weight(v);
  }
  std::string class_name() const override {
    return net_.is_sequential() ? "Sequential" : "Functional";
  }
  json layer_config() const override {
    json full = net_.get_config();
    json c = std::move(full.at("config"));
    if (!net_.is_sequential()) c.erase("dtype");  // Keras's Functional config has none
    return c;
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& inputs) override {
    const auto& ins = net_.inputs();
    LS_CHECK(inputs.size() == ins.size(), class_name(), " '", name(), "': expects ", ins.size(),
             " input(s), got ", inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Shape want = ins[i].shape(), got = ctx.graph.type(inputs[i]).shape;
      bool same = want.rank() == got.rank();
      for (int d = 1; same && d < want.rank(); ++d)
        same = want[d] < 0 || got[d] < 0 || want[d] == got[d];
      LS_CHECK(same, class_name(), " '", name(), "': input ", i, " has shape ", got.str(),
               " but the nested model takes ", want.str());
    }
    // A frozen nested model freezes its layers (Keras sets trainable on every sublayer).
    struct Restore {
      CallContext& c;
      bool frozen;
      ~Restore() { c.frozen = frozen; }
    } restore{ctx, ctx.frozen};
    ctx.frozen = ctx.frozen || !trainable;
    return net_.call(ctx, inputs);
  }
  const Network& network() const { return net_; }

 protected:
  bool computes_in_f32() const override { return true; }  // its own layers cast as they need
  bool autocasts_variables() const override { return false; }

 private:
  Network net_;
};

}  // namespace

LayerPtr Network::as_layer() const {
  if (auto l = as_layer_.lock()) return l;
  Network copy = *this;
  copy.as_layer_.reset();
  auto l = std::make_shared<NetworkLayer>(copy);
  as_layer_ = l;
  return l;
}

const Network* nested_network(const Layer& layer) {
  auto* n = dynamic_cast<const NetworkLayer*>(&layer);
  return n ? &n->network() : nullptr;
}

}  // namespace lockstep
