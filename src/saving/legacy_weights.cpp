// Keras 2's legacy .h5 weights (the published keras.applications files) for Models: layer groups
// matched to model.layers by name (Keras's by_name=True) or in order, each layer's weights in
// Keras's legacy order (trainable first), with skip_mismatch. The file format itself is
// lockstep/io/keras_file.h's.
#include <cstdio>
#include <map>
#include <set>

#include "lockstep/io/keras_file.h"
#include "lockstep/saving/saving.h"

namespace lockstep {
namespace {

// Keras's _legacy_weights(layer): trainable_weights + non_trainable_weights.
std::vector<VariablePtr> legacy_order(const Layer& layer) {
  std::vector<VariablePtr> out;
  const Network* nested = nested_network(layer);
  if (nested && layer.trainable) out = nested->trainable_weights();
  if (!nested) out = layer.trainable_weights();
  std::set<const Variable*> first;
  for (auto& v : out) first.insert(v.get());
  for (auto& v : layer.weights())
    if (!first.count(v.get())) out.push_back(v);
  return out;
}

// "conv1/kernel:0" -> "conv1/kernel" (Keras 2 names carry TF's output index).
std::string without_index(const std::string& name) {
  auto colon = name.rfind(':');
  return colon == std::string::npos ? name : name.substr(0, colon);
}

// The variable each file weight goes to: by name when every file name ends in a distinct
// variable's name ("block1_conv/kernel:0" -> 'block1_conv/kernel'), else in legacy order (as
// Keras does). Counts must agree (checked by the caller).
std::vector<VariablePtr> match_weights(const std::vector<VariablePtr>& vars,
                                       const std::vector<io::NamedTensor>& file) {
  std::vector<VariablePtr> out;
  std::set<const Variable*> used;
  for (auto& t : file) {
    const std::string n = without_index(t.name);
    VariablePtr hit;
    for (auto& v : vars) {
      const bool ends =
          n == v->name || (n.size() > v->name.size() &&
                           n.compare(n.size() - v->name.size(), std::string::npos, v->name) == 0 &&
                           n[n.size() - v->name.size() - 1] == '/');
      if (ends && !used.count(v.get())) {
        hit = v;
        break;
      }
    }
    if (!hit) return vars;  // names do not tell: legacy order
    used.insert(hit.get());
    out.push_back(hit);
  }
  return out;
}

std::string shapes(const std::vector<VariablePtr>& vars) {
  std::string s;
  for (auto& v : vars) s += (s.empty() ? "" : ", ") + v->name + " " + v->value.shape().str();
  return s.empty() ? "none" : s;
}

std::string shapes(const std::vector<io::NamedTensor>& file) {
  std::string s;
  for (auto& t : file) s += (s.empty() ? "" : ", ") + t.name + " " + t.value.shape().str();
  return s.empty() ? "none" : s;
}

// Why the file's group does not fit `layer` ("" when it does); fills `to` on success.
std::string layer_mismatch(const Layer& layer, const io::LegacyLayerWeights& group,
                           const std::string& path, std::vector<VariablePtr>& to) {
  const auto vars = legacy_order(layer);
  const std::string who = "'" + path + "': " + layer.class_name() + " '" + layer.name() + "'";
  if (vars.size() != group.weights.size())
    return who + " has " + std::to_string(vars.size()) + " weight(s) (" + shapes(vars) +
           ") but the file's group '" + group.layer + "' holds " +
           std::to_string(group.weights.size()) + " (" + shapes(group.weights) + ")";
  to = match_weights(vars, group.weights);
  for (size_t i = 0; i < to.size(); ++i) {
    const Tensor& src = group.weights[i].value;
    if (src.shape() != to[i]->value.shape() || src.dtype() != to[i]->value.dtype())
      return who + ": weight '" + to[i]->name + "' has shape " + to[i]->value.shape().str() +
             " but the file's '" + group.layer + "/" + group.weights[i].name + "' has shape " +
             src.shape().str() +
             (src.dtype() != to[i]->value.dtype()
                  ? " (" + std::string(dtype_name(src.dtype())) + ")"
                  : "");
  }
  return "";
}

// Pairs of (model layer, file group): by name, or in order among those with weights.
std::vector<std::pair<LayerPtr, const io::LegacyLayerWeights*>> pair_layers(
    const Network& model, const io::LegacyWeightsFile& f, bool by_name, const std::string& path) {
  std::vector<std::pair<LayerPtr, const io::LegacyLayerWeights*>> pairs;
  const auto layers = keras_layer_order(model);
  if (by_name) {
    std::map<std::string, LayerPtr> index;
    for (auto& l : layers) index[l->name()] = l;
    for (auto& g : f.layers)
      if (auto it = index.find(g.layer); it != index.end()) pairs.push_back({it->second, &g});
    return pairs;
  }
  std::vector<LayerPtr> with_weights;
  for (auto& l : layers)
    if (!l->weights().empty()) with_weights.push_back(l);
  std::vector<const io::LegacyLayerWeights*> groups;
  for (auto& g : f.layers)
    if (!g.weights.empty()) groups.push_back(&g);
  LS_CHECK(with_weights.size() == groups.size(), "'", path, "': model '", model.name(), "' has ",
           with_weights.size(), " layers with weights but the file has ", groups.size(),
           " (load by name: load_weights(path, {.by_name = true}))");
  for (size_t i = 0; i < groups.size(); ++i) pairs.push_back({with_weights[i], groups[i]});
  return pairs;
}

std::string some_names(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 8; ++i) s += (i ? ", " : "") + names[i];
  return names.size() > 8 ? s + ", ... (" + std::to_string(names.size()) + " in all)" : s;
}

// Refuses a file that would load nothing into a model with weights (every weight would stay as
// initialised, silently).
void check_file_has_weights(const Network& model, const io::LegacyWeightsFile& f,
                            const std::string& path) {
  std::vector<std::string> model_names, all;
  for (auto& l : keras_layer_order(model))
    if (!l->weights().empty()) model_names.push_back(l->name());
  bool any = false;
  for (auto& g : f.layers) all.push_back(g.layer), any |= !g.weights.empty();
  LS_CHECK(any || model_names.empty(), "'", path,
           "': no weighted layer matched: the file holds no weights (its layer_names list ",
           all.empty() ? std::string("is empty")
                       : "names only layers without weights: " + some_names(all),
           ") while model '", model.name(), "' has weighted layers (", some_names(model_names),
           ")");
}

}  // namespace

LoadWeightsReport load_legacy_weights(Network& model, const std::string& path,
                                      const LoadWeightsOptions& options) {
  const io::LegacyWeightsFile f = io::read_legacy_h5(path);
  check_file_has_weights(model, f, path);
  const auto pairs = pair_layers(model, f, options.by_name, path);
  LoadWeightsReport report;
  std::vector<std::pair<std::vector<VariablePtr>, const io::LegacyLayerWeights*>> load;
  std::set<const Layer*> matched;
  for (auto& [layer, group] : pairs) {
    matched.insert(layer.get());
    std::vector<VariablePtr> to;
    const std::string why = layer_mismatch(*layer, *group, path, to);
    if (why.empty()) {
      if (!to.empty()) report.loaded.push_back(layer->name()), load.push_back({to, group});
      continue;
    }
    LS_CHECK(options.skip_mismatch, why,
             " (load_weights(path, {.skip_mismatch = true}) leaves the layer as it is)");
    std::fprintf(stderr, "load_weights: skipping %s\n", why.c_str());
    report.skipped.push_back(layer->name() + ": " + why);
  }
  std::vector<std::string> model_names, file_names;
  for (auto& l : keras_layer_order(model)) {
    if (l->weights().empty()) continue;
    model_names.push_back(l->name());
    if (!matched.count(l.get())) report.not_in_file.push_back(l->name());
  }
  for (auto& g : f.layers)
    if (!g.weights.empty()) file_names.push_back(g.layer);
  LS_CHECK(!report.loaded.empty() || !report.skipped.empty() || model_names.empty(), "'", path,
           "': no weighted layer matched: no layer of model '", model.name(),
           "' has a name in the file (the file's layers: ", some_names(file_names),
           "; the model's: ", some_names(model_names),
           "); build the model with the file's layer names");
  // All checked: now copy (in place, so compiled programs keep their views).
  for (auto& [to, group] : load)
    for (size_t i = 0; i < to.size(); ++i) to[i]->value.copy_from(group->weights[i].value);
  note_variable_host_write();  // compiled programs refresh their weight caches
  return report;
}

void save_legacy_weights(const Network& model, const std::string& path) {
  io::LegacyWeightsFile f;
  f.keras_version = "3.15.1";  // the Keras release whose layout this follows (saving.cpp)
  f.backend = "lockstep";
  for (auto& l : keras_layer_order(model)) {
    io::LegacyLayerWeights g{l->name(), {}};
    for (auto& v : legacy_order(*l)) g.weights.push_back({v->name, v->value});
    f.layers.push_back(std::move(g));
  }
  io::write_legacy_h5(path, f);
}

}  // namespace lockstep
