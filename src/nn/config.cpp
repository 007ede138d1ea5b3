// Keras configs: the layer registry, KerasConfigReader, Network::get_config (Keras 3 model
// configs) and network_from_config. The built-in layers' factories are in
// src/nn/layers/layer_configs.cpp.
#include "lockstep/nn/config.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <regex>
#include <set>

#include "lockstep/nn/initializers.h"
#include "lockstep/nn/layers.h"
#include "lockstep/nn/text_layers.h"
#include "nn/internal/keras_variable_order.h"
#include "nn/layers/keras_calls.h"
#include "nn/layers/keras_layer_hooks.h"
#include "nn/layers/recurrent_slots.h"

namespace lockstep {

// ---- registry ---------------------------------------------------------------------------
namespace {
std::map<std::string, LayerFactory>& registry() {
  static std::map<std::string, LayerFactory> r;
  return r;
}
std::mutex& registry_mu() {
  static std::mutex m;
  return m;
}
}  // namespace

void register_layer(const std::string& class_name, LayerFactory factory) {
  std::lock_guard<std::mutex> lock(registry_mu());
  registry()[class_name] = std::move(factory);
}

bool is_layer_registered(const std::string& class_name) {
  std::lock_guard<std::mutex> lock(registry_mu());
  return registry().count(class_name) > 0;
}

std::vector<std::string> registered_layers() {
  std::lock_guard<std::mutex> lock(registry_mu());
  std::vector<std::string> r;
  for (auto& [k, v] : registry()) r.push_back(k);
  return r;
}

// KerasHub's classes (module "keras_hub.src...", registered_name "keras_hub>TransformerEncoder")
// are registered under their registered name; Keras's own ReversibleEmbedding stays apart from
// KerasHub's.
static bool is_keras_hub_entry(const json& layer) {
  const json r = layer.value("registered_name", json());
  const json m = layer.value("module", json());
  return (r.is_string() && r.get<std::string>().rfind("keras_hub>", 0) == 0) ||
         (m.is_string() && m.get<std::string>().rfind("keras_hub", 0) == 0);
}

static std::string keras_hub_key(const json& layer) {
  const json r = layer.value("registered_name", json());
  if (r.is_string() && r.get<std::string>().rfind("keras_hub>", 0) == 0) return r;
  return "keras_hub>" + layer.value("class_name", std::string("?"));
}

[[noreturn]] static void refuse_keras_hub_class(const std::string& key, const std::string& name) {
  std::string known;
  for (auto& k : registered_layers())
    if (k.rfind("keras_hub>", 0) == 0) known += (known.empty() ? "" : ", ") + k.substr(10);
  const std::string cls = key.substr(10);
  const bool text =
      cls.find("Tokenizer") != std::string::npos || cls.find("Preprocessor") != std::string::npos;
  LS_FAIL("layer '", name, "': KerasHub class '", cls, "' (registered_name '", key,
          "') is not supported by Lockstep",
          text ? " (KerasHub's tokenizers and preprocessors need their vocabulary files and run "
                 "in Python; load the backbone and tokenize outside Lockstep)"
               : "",
          "; the KerasHub classes Lockstep loads: ", known);
}

static std::string name_in(const json& cfg) {
  auto it = cfg.find("name");
  return it != cfg.end() && it->is_string() ? it->get<std::string>() : "?";
}

LayerPtr layer_from_config(const json& layer) {
  LS_CHECK(layer.is_object() && layer.contains("class_name") && layer["class_name"].is_string() &&
               (!layer.contains("config") || layer["config"].is_object()),
           "layer config: expected {\"class_name\": \"...\", \"config\": {...}}, got ",
           layer.dump().substr(0, 200));
  std::string cls = layer["class_name"].get<std::string>();
  static const json kEmpty = json::object();
  const json& cfg = layer.contains("config") ? layer["config"] : kEmpty;  // not copied: a nested
                                                                          // model's is its subtree
  if (is_keras_hub_entry(layer)) cls = keras_hub_key(layer);
  LayerFactory f;
  {
    std::lock_guard<std::mutex> lock(registry_mu());
    auto it = registry().find(cls);
    if (it != registry().end()) f = it->second;
  }
  if (!f && cls.rfind("keras_hub>", 0) == 0) refuse_keras_hub_class(cls, name_in(cfg));
  if (!f) {
    std::string known;
    for (auto& k : registered_layers()) known += (known.empty() ? "" : ", ") + k;
    LS_FAIL("layer '", name_in(cfg), "': unknown layer class '", cls, "' (Lockstep knows: ", known,
            "; register_layer() adds your own)");
  }
  LayerPtr l;
  try {
    l = f(cfg);
  } catch (const json::exception& e) {
    LS_FAIL(cls, " '", name_in(cfg), "': unexpected config structure: ", e.what());
  }
  if (cfg.contains("trainable") && cfg["trainable"].is_boolean()) l->trainable = cfg["trainable"];
  // The layer's dtype policy (checked by its KerasConfigReader); absent = the global policy.
  if (const json d = cfg.value("dtype", json()); d.is_string() || d.is_object())
    l->set_dtype_policy(d.is_string() ? d.get<std::string>()
                                      : d.value("config", json::object()).value("name", "float32"));
  return l;
}

std::string keras_snake_case(const std::string& class_name) {
  std::string s = std::regex_replace(class_name, std::regex("\\W+"), "");
  s = std::regex_replace(s, std::regex("(.)([A-Z][a-z]+)"), "$1_$2");
  s = std::regex_replace(s, std::regex("([a-z])([A-Z])"), "$1_$2");
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// ---- KerasConfigReader ------------------------------------------------------------------
KerasConfigReader::KerasConfigReader(std::string class_name, const json& config)
    : class_name_(std::move(class_name)), config_(config) {
  LS_CHECK(config_.is_object(), class_name_, ": config must be an object, got ",
           config_.dump().substr(0, 200));
  name_ = config_.value("name", std::string());
  read_ = {"name", "trainable"};
  if (config_.contains("trainable") && config_["trainable"].is_boolean())
    trainable_ = config_["trainable"];
  // dtype: "float32" or a DTypePolicy {"config": {"name": "float32"}}.
  if (has("dtype")) {
    const json& d = get("dtype");
    std::string dt = d.is_string()   ? d.get<std::string>()
                     : d.is_object() ? d.value("config", json::object()).value("name", "")
                                     : "float32";
    if (!d.is_null() && dt != "float32" && dt != "mixed_bfloat16")
      fail("dtype", "is '" + dt + "'; Lockstep layers take the policies 'float32' and " +
                        "'mixed_bfloat16'");
  }
}

bool KerasConfigReader::has(const std::string& key) const { return config_.contains(key); }

const json& KerasConfigReader::get(const std::string& key) {
  read_.push_back(key);
  static const json null_json;
  auto it = config_.find(key);
  return it == config_.end() ? null_json : *it;
}

std::vector<int64_t> KerasConfigReader::ints(const std::string& key, std::vector<int64_t> fb) {
  const json& v = get(key);
  if (v.is_null()) return fb;
  if (v.is_number_integer()) return {v.get<int64_t>()};
  try {
    return v.get<std::vector<int64_t>>();
  } catch (const std::exception&) {
    fail(key, "must be an int or a list of ints, got " + v.dump());
  }
}

void KerasConfigReader::expect(const std::string& key, std::vector<json> allowed) {
  const json& v = get(key);
  if (v.is_null()) return;
  for (auto& a : allowed)
    if (v == a) return;
  fail(key, "is " + v.dump() + ", which Lockstep cannot represent");
}

// keras.initializers.VarianceScaling's config as "variance_scaling:<scale>:<mode>:<dist>".
static std::string variance_scaling(const KerasConfigReader& r, const std::string& key,
                                    const json& c) {
  for (auto& [k, val] : c.items())
    if (k != "scale" && k != "mode" && k != "distribution" && !val.is_null())
      r.fail(key, "has VarianceScaling option '" + k + "' = " + val.dump() +
                      ", which Lockstep's initializers do not take");
  char scale[64];
  std::snprintf(scale, sizeof scale, "%.17g", c.value("scale", 1.0));
  std::string n = std::string("variance_scaling:") + scale + ":" + c.value("mode", "fan_in") + ":" +
                  c.value("distribution", "truncated_normal");
  try {
    check_initializer(n);
  } catch (const Error& e) {
    r.fail(key, std::string("is not a VarianceScaling Lockstep can build: ") + e.what());
  }
  return n;
}

std::string KerasConfigReader::initializer(const std::string& key, const std::string& fb) {
  const json& v = get(key);
  if (v.is_null()) return fb;
  if (v.is_string()) return v.get<std::string>();
  std::string cls = v.value("class_name", "");
  json c = v.value("config", json::object());
  if (cls == "Constant") return "constant:" + std::to_string(c.value("value", 0.0));
  if (cls == "VarianceScaling") return variance_scaling(*this, key, c);
  for (auto& [k, val] : c.items()) {
    bool keras_default = val.is_null() || (k == "mean" && val == 0.0) ||
                         (k == "stddev" && val == 0.05) || (k == "minval" && val == -0.05) ||
                         (k == "maxval" && val == 0.05) || (k == "gain" && val == 1.0);
    if (!keras_default)
      fail(key, "has " + cls + " option '" + k + "' = " + val.dump() +
                    ", which Lockstep's initializers do not take");
  }
  std::string n = keras_snake_case(cls);
  try {
    check_initializer(n);
  } catch (const Error& e) {
    fail(key, std::string("names initializer '") + cls + "': " + e.what());
  }
  return n;
}

double KerasConfigReader::l2_regularizer(const std::string& key) {
  const json& v = get(key);
  if (v.is_null()) return 0.0;
  std::string cls = v.is_object() ? v.value("class_name", "") : "";
  if (cls == "L2") return v.value("config", json::object()).value("l2", 0.01);
  fail(key, "is " + v.dump() + "; Lockstep supports only L2 regularizers");
}

void KerasConfigReader::fail(const std::string& key, const std::string& why) const {
  LS_FAIL(class_name_, " '", name_, "': config key '", key, "' ", why);
}

void KerasConfigReader::finish() const {
  for (auto& [k, v] : config_.items())
    if (std::find(read_.begin(), read_.end(), k) == read_.end())
      fail(k, "(= " + v.dump().substr(0, 80) + ") is not an option Lockstep supports");
}

// ---- layer order and get_config ----------------------------------------------------------
std::vector<LayerPtr> keras_layer_order(const Network& net) {
  if (net.is_sequential()) {
    std::vector<LayerPtr> r;
    for (auto& l : net.layers())
      if (l->class_name() != "InputLayer") r.push_back(l);
    return r;
  }
  return net.layers();  // the constructor ordered them as map_graph does (Network::layers)
}

namespace {

json shape_json(const Shape& s) {
  json a = json::array();
  for (int i = 0; i < s.rank(); ++i) a.push_back(s[i] < 0 ? json(nullptr) : json(s[i]));
  return a;
}

// A model config's fields around "config" (module, class_name, registered_name, build_config,
// compile_config), as Keras writes them.
json model_envelope(const Network& net) {
  if (net.is_sequential()) {
    const json input_shape = shape_json(net.inputs().at(0).shape());
    return {{"module", "keras"},
            {"class_name", "Sequential"},
            {"registered_name", nullptr},
            {"build_config", {{"input_shape", input_shape}}},
            {"compile_config", nullptr}};
  }
  return {{"module", "keras.src.models.functional"},
          {"class_name", "Functional"},
          {"registered_name", "Functional"},
          {"build_config", {{"input_shape", nullptr}}},
          {"compile_config", nullptr}};
}

json layer_entry(const Layer& l) {
  json cfg = l.config();
  if (const Network* nested = nested_network(l)) {  // as Keras writes a model in a model
    // The envelope only: nested->get_config() would build the nested config a second time
    // (l.config() built it), doubling the work per level of nesting.
    json e = model_envelope(*nested);
    e.erase("compile_config");
    if (!nested->is_sequential()) cfg.erase("dtype");
    e["config"] = std::move(cfg);
    return e;
  }
  if (l.class_name() == "InputLayer") cfg.erase("trainable");  // as Keras writes it
  if (const KerasLayerHooks* h = keras_hooks(l))  // KerasHub's: its module and registered name
    return {
        {"module", h->keras_module()},
        {"class_name", l.class_name()},
        {"config", cfg},
        {"registered_name",
         h->keras_registered_name().empty() ? json(nullptr) : json(h->keras_registered_name())}};
  return {{"module", "keras.layers"},
          {"class_name", l.class_name()},
          {"config", cfg},
          {"registered_name", nullptr}};
}

// Node index of each call = its position among its layer's calls in the network.
std::map<LayerCall*, int> node_indices(const Network& net) {
  std::map<LayerCall*, int> idx;
  std::map<Layer*, int> count;
  for (auto& c : net.calls()) idx[c.get()] = count[c->layer.get()]++;
  return idx;
}

json history(const KTensor& t, const std::map<LayerCall*, int>& idx) {
  auto it = idx.find(t.call.get());
  LS_CHECK(it != idx.end(), "get_config: the output of layer '", t.call->layer->name(),
           "' is not connected to the model's outputs, so Keras's config cannot refer to it (an ",
           "input the outputs do not use? remove it from the model's inputs)");
  return json::array({t.call->layer->name(), it->second, t.index});
}

json keras_tensor(const KTensor& t, const std::map<LayerCall*, int>& idx) {
  return {
      {"class_name", "__keras_tensor__"},
      {"config",
       {{"shape", shape_json(t.shape())},
        {"dtype", dtype_name(t.dtype()) == std::string("f32") ? "float32" : dtype_name(t.dtype())},
        {"keras_history", history(t, idx)}}}};
}

// One inbound node: the call's inputs as Keras's args (one tensor, or a list of several) or,
// for a layer with KerasLayerHooks, as the positional and keyword arguments it names.
json inbound_node(const LayerCall& c, const std::map<LayerCall*, int>& idx) {
  json args = json::array();
  const KerasLayerHooks* h = keras_hooks(*c.layer);
  if (!h) {
    for (auto& in : c.inputs) args.push_back(keras_tensor(in, idx));
    if (const KerasCallConvention* conv = call_convention(c.layer->class_name()))
      return conv->write(*c.layer, std::vector<json>(args.begin(), args.end()));
    return {{"args", c.inputs.size() == 1 ? args : json::array({args})},
            {"kwargs", json::object()}};
  }
  const KerasLayerHooks::CallSpec spec = h->call_spec(c);
  LS_CHECK(spec.num_args + spec.tensor_kwargs.size() == c.inputs.size(), c.layer->class_name(),
           " '", c.layer->name(), "': its call spec names ",
           spec.num_args + spec.tensor_kwargs.size(), " inputs, the call has ", c.inputs.size());
  for (size_t i = 0; i < spec.num_args; ++i) args.push_back(keras_tensor(c.inputs[i], idx));
  json kwargs = spec.kwargs;
  for (size_t i = 0; i < spec.tensor_kwargs.size(); ++i)
    kwargs[spec.tensor_kwargs[i]] = keras_tensor(c.inputs[spec.num_args + i], idx);
  return {{"args", args}, {"kwargs", kwargs}};
}

json functional_config(const Network& net) {
  auto idx = node_indices(net);
  json layers = json::array();
  for (auto& l : keras_layer_order(net)) {
    json e = layer_entry(*l);
    e["name"] = l->name();
    json nodes = json::array();
    for (auto& c : net.calls())
      if (c->layer == l && !c->inputs.empty()) nodes.push_back(inbound_node(*c, idx));
    e["inbound_nodes"] = nodes;
    layers.push_back(e);
  }
  json ins = json::array(), outs = json::array();
  for (auto& t : net.inputs()) ins.push_back(history(t, idx));
  for (auto& t : net.outputs()) outs.push_back(history(t, idx));
  json e = model_envelope(net);
  e["config"] = {{"name", net.name()},
                 {"trainable", true},
                 {"layers", std::move(layers)},
                 {"input_layers", ins},
                 {"output_layers", outs}};
  return e;
}

json sequential_config(const Network& net) {
  json layers = json::array();
  json input_shape = shape_json(net.inputs().at(0).shape());
  layers.push_back(layer_entry(*net.inputs().at(0).call->layer));
  for (auto& l : keras_layer_order(net)) layers.push_back(layer_entry(*l));
  json e = model_envelope(net);
  e["config"] = {{"name", net.name()},
                 {"trainable", true},
                 {"dtype", "float32"},
                 {"layers", std::move(layers)},
                 {"build_input_shape", input_shape}};
  return e;
}

}  // namespace

// A layer whose weights Keras keeps under sublayer paths (KerasLayerHooks::sublayer_weights):
// its own slot holds the rest, then one slot per sublayer. Empty for other layers.
static std::vector<KerasWeightSlot> keras_sublayer_slots(const LayerPtr& l,
                                                         const std::string& path) {
  const KerasLayerHooks* h = keras_hooks(*l);
  if (!h) return {};
  auto subs = h->sublayer_weights();
  if (subs.empty()) return {};
  std::set<const Variable*> in_sub;
  for (auto& [p, ws] : subs)
    for (auto& w : ws) in_sub.insert(w.get());
  std::vector<VariablePtr> own;
  for (auto& w : l->weights())
    if (!in_sub.count(w.get())) own.push_back(w);
  std::vector<KerasWeightSlot> slots{{path, l, own}};
  for (auto& [p, ws] : subs) slots.push_back({path + "/" + p, l, ws});
  return slots;
}

std::vector<VariablePtr> keras_variable_order(const Layer& layer) {
  const KerasLayerHooks* hooks = keras_hooks(layer);
  const auto subs = hooks ? hooks->sublayer_weights()
                          : std::vector<std::pair<std::string, std::vector<VariablePtr>>>{};
  if (subs.empty()) return layer.weights();
  std::set<const Variable*> in_sub;
  for (auto& [path, ws] : subs)
    for (auto& w : ws) in_sub.insert(w.get());
  std::vector<VariablePtr> out;
  for (auto& w : layer.weights())
    if (!in_sub.count(w.get())) out.push_back(w);
  for (auto& [path, ws] : subs) out.insert(out.end(), ws.begin(), ws.end());
  return out;
}

std::vector<KerasWeightSlot> keras_weight_slots(const Network& net, const std::string& prefix) {
  std::vector<KerasWeightSlot> slots;
  std::map<std::string, int> used;  // per container, as Keras's saving_lib names them
  for (auto& l : keras_layer_order(net)) {
    std::string base = keras_snake_case(l->class_name());
    auto it = used.find(base);
    std::string name = base;
    if (it == used.end())
      used[base] = 0;
    else
      name = base + "_" + std::to_string(++it->second);
    const std::string path = prefix + "layers/" + name;
    if (const Network* nested = nested_network(*l)) {
      slots.push_back({path, l, {}});  // its own "vars" group is empty
      for (auto& s : keras_weight_slots(*nested, path + "/")) slots.push_back(std::move(s));
    } else if (const WeightSlotsFn* f = weight_slots_of(l->class_name())) {
      for (auto& s : (*f)(l, path)) slots.push_back(std::move(s));
    } else if (auto cells = recurrent_weight_slots(l, path); !cells.empty()) {
      for (auto& s : cells) slots.push_back(std::move(s));
    } else if (auto subs = keras_sublayer_slots(l, path); !subs.empty()) {
      for (auto& s : subs) slots.push_back(std::move(s));
    } else if (l->class_name() == "TimeDistributed") {
      // A wrapper's own "vars" is empty; Keras's saving_lib keeps the wrapped layer's weights
      // (which are all of TimeDistributed's) under its `layer` attribute.
      slots.push_back({path, l, {}});
      slots.push_back({path + "/layer", l, l->weights()});
    } else {
      slots.push_back({path, l, l->weights()});
    }
  }
  return slots;
}

json Network::get_config() const {
  if (inputs_.empty()) return json::object();
  if (auto hub = keras_hub_model_config(*this)) return *hub;  // a KerasHub backbone
  json c = sequential_ ? sequential_config(*this) : functional_config(*this);
  return host_ ? host_->wrap_config(std::move(c)) : c;  // string inputs: the host layers first
}

// ---- from config ---------------------------------------------------------------------------
namespace {

// A model inside a model: Keras writes it as a layer entry whose class is the model's.
Network model_from_config(const std::string& cls, const json& c);

LayerPtr nested_from_config(const std::string& cls, const json& cfg) {
  return model_from_config(cls, cfg).as_layer();
}

const bool kNestedModelsRegistered = [] {
  for (const char* cls : {"Sequential", "Functional", "Model"})
    register_layer(cls,
                   [cls = std::string(cls)](const json& c) { return nested_from_config(cls, c); });
  return true;
}();

KTensor input_from_config(const json& config) {
  // An integer input (token ids: keras.Input(dtype="int32")) carries its dtype, not a policy.
  json cfg = config;
  DType dtype = DType::f32;
  if (cfg.contains("dtype") && cfg["dtype"].is_string()) {
    const std::string d = cfg["dtype"];
    if (d == "int32" || d == "int64" || d == "uint8") {
      dtype = dtype_from_name(d);
      cfg.erase("dtype");
    }
  }
  KerasConfigReader r("InputLayer", cfg);
  std::vector<int64_t> shape;
  json bs = r.has("batch_shape") ? r.get("batch_shape") : r.get("batch_input_shape");
  if (bs.is_null() && r.has("shape")) {
    bs = json::array({nullptr});
    for (auto& d : r.get("shape")) bs.push_back(d);
  }
  LS_CHECK(bs.is_array() && bs.size() >= 2, "InputLayer '", r.name(),
           "': config key 'batch_shape' must be [null, dims...], got ", bs.dump());
  for (size_t i = 1; i < bs.size(); ++i) {
    if (bs[i].is_null())
      r.fail("batch_shape", "has an unknown dimension (None) at " + std::to_string(i) +
                                "; Lockstep needs static shapes");
    shape.push_back(bs[i].get<int64_t>());
  }
  r.expect("sparse", {false});
  r.expect("ragged", {false});
  r.expect("optional", {false});
  r.get("batch_shape");
  r.get("batch_input_shape");
  r.get("shape");
  r.finish();
  return layers::Input(shape, r.name(), dtype);
}

// The tensors a node's args refer to ([layer, node, index] histories, nested lists).
void collect_args(const json& a, std::vector<json>& out) {
  if (a.is_object() && a.value("class_name", "") == "__keras_tensor__") {
    out.push_back(a.at("config").at("keras_history"));  // at(): a missing key throws (fuzz)
  } else if (a.is_array() && (a.size() == 3 || (a.size() == 4 && a[3].is_object())) &&
             a[0].is_string() && a[1].is_number()) {
    out.push_back(a);  // legacy [name, node, index, kwargs?] (Keras 2 writes the kwargs {})
  } else if (a.is_array()) {
    for (auto& x : a) collect_args(x, out);
  }
}

// The tensors one inbound node passes: a registered call convention's (the attention layers'),
// or its args' and, for a layer with KerasLayerHooks, those of the keyword arguments it takes
// (padding_mask=...), after them.
std::vector<json> node_tensors(Layer& layer, const json& node) {
  const KerasCallConvention* conv = call_convention(layer.class_name());
  if (conv && node.is_object())  // the attention layers' (src/nn/layers/keras_calls.h)
    return conv->read(layer, node.value("args", json::array()),
                      node.value("kwargs", json::object()));
  std::vector<json> hist;
  collect_args(node.is_object() ? node.value("args", json::array()) : node, hist);
  auto* h = dynamic_cast<KerasLayerHooks*>(&layer);
  if (!h) return hist;
  const json kwargs = node.is_object() ? node.value("kwargs", json::object()) : json::object();
  LS_CHECK(kwargs.is_object(), layer.class_name(), " '", layer.name(),
           "': an inbound node's kwargs must be an object, got ", kwargs.dump().substr(0, 100));
  const size_t num_args = hist.size();
  for (const std::string& k : h->bind_call_kwargs(kwargs, num_args)) {
    std::vector<json> one;
    collect_args(kwargs.at(k), one);
    LS_CHECK(one.size() == 1, layer.class_name(), " '", layer.name(), "': call argument '", k,
             "' must be one tensor, got ", kwargs.at(k).dump().substr(0, 100));
    hist.push_back(one[0]);
  }
  return hist;
}

using NodeOutputs = std::map<std::string, std::vector<std::vector<KTensor>>>;

// A [layer, node, index] history's tensor. The indices are checked as the JSON numbers they are
// (a -1 or a 4294967295 read as int once indexed out of range).
const KTensor& lookup(const NodeOutputs& outs, const json& h, const std::string& where) {
  LS_CHECK(h.is_array() && h.size() >= 3 && h[0].is_string(), where,
           ": a tensor reference must be [layer_name, node_index, tensor_index], got ",
           h.dump().substr(0, 100));
  const std::string n = h[0].get<std::string>();
  auto it = outs.find(n);
  LS_CHECK(it != outs.end(), where, ": refers to layer '", n,
           "', which the config does not define");
  auto index = [&](const json& v, size_t size, const char* what, const char* counted) {
    LS_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), where,
             ": ", what, " ", v.dump(), " in ", h.dump(), " must be a non-negative integer");
    const uint64_t i = v.get<uint64_t>();
    LS_CHECK(i < size, where, ": ", h.dump(), " has ", what, " ", i, ", but layer '", n, "' has ",
             size, " ", counted, " (indices start at 0)");
    return size_t(i);
  };
  const size_t node = index(h[1], it->second.size(), "node index", "node(s)");
  const size_t idx = index(h[2], it->second[node].size(), "tensor index", "output(s) there");
  return it->second[node][idx];
}

// Keras rejects a model whose layers share a name ("All operation names should be unique");
// here a second "dense" would merge its nodes into the first's and drop a layer silently.
void check_unique_layer_names(const json& layers, const std::string& model) {
  std::set<std::string> seen;
  for (auto& e : layers) {
    const json& cfg = e.contains("config") && e["config"].is_object() ? e["config"] : e;
    const json* name = cfg.contains("name") ? &cfg["name"]
                       : e.contains("name") ? &e["name"]
                                            : nullptr;
    if (!name || !name->is_string()) continue;
    LS_CHECK(seen.insert(name->get<std::string>()).second, "model '", model, "': the name '",
             name->get<std::string>(), "' is used by more than one layer; layer names must be ",
             "unique (Keras rejects this config too)");
  }
}

// Layers in one model config, nested models' included: each is an object built and kept, so a
// small file could otherwise ask for millions. Keras's largest applications have about 1,000.
constexpr size_t kMaxLayers = 10000;
thread_local size_t t_layers_seen = 0;  // in the config being read (model_from_config resets it)

void count_layers(const json& layers, const std::string& model) {
  t_layers_seen += layers.size();
  LS_CHECK(t_layers_seen <= kMaxLayers, "model '", model, "': the config has more than ",
           kMaxLayers, " layers (", t_layers_seen,
           " so far, nested models' included; the limit, kMaxLayers)");
}

Network functional_from_config(const json& c) {
  std::string name = c.value("name", std::string("functional"));
  count_layers(c.at("layers"), name);
  check_unique_layer_names(c.at("layers"), name);
  NodeOutputs outs;
  std::vector<std::pair<LayerPtr, const json*>> pending;  // layer, its inbound nodes
  static const json kNoNodes = json::array();
  for (auto& e : c.at("layers")) {
    std::string cls = e.at("class_name");
    const json* nodes = e.contains("inbound_nodes") ? &e["inbound_nodes"] : &kNoNodes;
    LS_CHECK(nodes->is_array(), "model '", name, "': inbound_nodes must be a list");
    if (!e.contains("config") || !e["config"].contains("name")) {  // a small copy: name added
      json cfg = e.value("config", json::object());
      if (e.contains("name")) cfg["name"] = e["name"];
      if (cls == "InputLayer")
        outs[cfg.value("name", "")].push_back({input_from_config(cfg)});
      else
        pending.push_back({layer_from_config({{"class_name", cls}, {"config", cfg}}), nodes});
      continue;
    }
    if (cls == "InputLayer") {
      outs[e["config"].value("name", "")].push_back({input_from_config(e["config"])});
      continue;
    }
    pending.push_back({layer_from_config(e), nodes});
  }
  std::vector<size_t> next(pending.size(), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t i = 0; i < pending.size(); ++i) {
      auto& [layer, node_list] = pending[i];
      const json& nodes = *node_list;
      while (next[i] < nodes.size()) {
        std::vector<json> hist = node_tensors(*layer, nodes[next[i]]);
        bool ready = true;
        for (auto& h : hist) {
          auto it = outs.find(h.at(0).get<std::string>());
          const json& node = h.at(1);  // a negative or non-integer one fails in lookup()
          ready = ready && it != outs.end() &&
                  (!node.is_number_integer() || node.get<int64_t>() < 0 ||
                   node.get<uint64_t>() < it->second.size());
        }
        if (!ready) break;
        std::vector<KTensor> ins;
        for (auto& h : hist) ins.push_back(lookup(outs, h, "layer '" + layer->name() + "'"));
        outs[layer->name()].push_back((*layer)(ins));
        ++next[i];
        progress = true;
      }
    }
  }
  for (size_t i = 0; i < pending.size(); ++i)
    LS_CHECK(next[i] == pending[i].second->size(), "model '", name, "': layer '",
             pending[i].first->name(), "' has inbound nodes whose inputs are never defined");
  auto tensors = [&](const json& spec, const char* what) {
    std::vector<KTensor> r;
    json list = spec.size() == 3 && spec[0].is_string() ? json::array({spec}) : spec;
    for (auto& h : list) r.push_back(lookup(outs, h, "model '" + name + "' " + what));
    return r;
  };
  return Network(tensors(c.at("input_layers"), "input_layers"),
                 tensors(c.at("output_layers"), "output_layers"), name);
}

Network sequential_from_config(const json& c) {
  std::string name = c.value("name", std::string("sequential"));
  std::vector<SequentialItem> items;
  const json& ls = c.at("layers");
  count_layers(ls, name);
  check_unique_layer_names(ls, name);
  size_t first = 0;
  if (!ls.empty() && ls[0].value("class_name", "") == "InputLayer") {
    items.push_back(input_from_config(ls[0].value("config", json::object())));
    first = 1;
  } else {
    json bs = c.value("build_input_shape", json(nullptr));
    LS_CHECK(bs.is_array(), "Sequential '", name,
             "': no InputLayer and no build_input_shape: Lockstep needs the input shape");
    items.push_back(input_from_config({{"batch_shape", bs}}));
  }
  for (size_t i = first; i < ls.size(); ++i) items.push_back(layer_from_config(ls[i]));
  return Network::sequential(std::move(items), name, /*exact_name=*/true);
}

// Models nested in models: each level recurses (and the stack holds its frames), so the depth
// is limited; Keras models nest a few levels.
constexpr int kMaxModelNesting = 100;
thread_local int t_model_nesting = 0;

// The config (with or without the {"class_name", "config"} wrapper) as a Network; `cls` is the
// wrapper's class, or empty.
Network model_from_config(const std::string& wrapper_class, const json& config) {
  LS_CHECK(config.is_object(), "model config: expected a JSON object, got ",
           config.dump().substr(0, 100));
  struct Depth {
    Depth() { ++t_model_nesting; }
    ~Depth() { --t_model_nesting; }
  } depth;
  LS_CHECK(t_model_nesting <= kMaxModelNesting, "model config: models nested more than ",
           kMaxModelNesting, " levels deep (the limit, kMaxModelNesting)");
  if (t_model_nesting == 1) t_layers_seen = 0;                // a new config
  if (wrapper_class.empty() && is_keras_hub_entry(config)) {  // BertBackbone, GPT2Backbone
    if (auto n = keras_hub_model_from_config(config)) return std::move(*n);
    refuse_keras_hub_class(keras_hub_key(config), name_in(config.value("config", json::object())));
  }
  const json* c = &config;
  std::string cls = wrapper_class.empty() ? config.value("class_name", "") : wrapper_class;
  if (wrapper_class.empty() && c->contains("config") && (*c)["config"].is_object() &&
      !c->contains("layers"))
    c = &(*c)["config"];
  else if (cls.empty())
    cls = c->contains("input_layers") ? "Functional" : "Sequential";
  if (cls == "Sequential") return sequential_from_config(*c);
  LS_CHECK(cls == "Functional" || cls == "Model", "model config: class '", cls,
           "' is not a model Lockstep can build (Functional, Model, Sequential)");
  return functional_from_config(*c);
}

}  // namespace

Network network_from_config(const json& config) {
  // A key of the wrong JSON type deep in a layer's config is nlohmann's exception; the caller
  // gets a lockstep::Error naming the config.
  try {
    // String inputs and the host layers after them (TextVectorization, ...) stay outside.
    auto [body, host] = split_host_preprocessing(config);
    Network n = model_from_config("", body);
    n.set_host_preprocessing(host);
    return n;
  } catch (const json::exception& e) {
    LS_FAIL("model config: unexpected structure: ", e.what());
  }
}

Network network_from_json(const std::string& text) {
  return network_from_config(parse_json(text, "model JSON"));
}

}  // namespace lockstep
