// Keras 3 files for Models: `.keras` archives and `.weights.h5` files, mapped onto io's files
// of named tensors (lockstep/io/keras_file.h); configs through lockstep/nn/config.h.
#include "lockstep/saving/saving.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>

#include "lockstep/io/keras_file.h"
#include "lockstep/nn/text_layers.h"
#include "saving/compile_config.h"

namespace lockstep {
namespace {

// The Keras 3 release whose file layout this follows (written as metadata "keras_version").
constexpr const char* kKerasVersion = "3.15.1";

// Keras's saving_lib layout, nested models included (lockstep/nn/config.h).
std::vector<KerasWeightSlot> weight_slots(const Network& net) { return keras_weight_slots(net); }

void weights_to_tensors(const Network& net, std::vector<io::NamedTensor>& tensors,
                        std::vector<std::string>& groups) {
  groups = {"vars", "layers"};
  for (auto& s : weight_slots(net)) {
    groups.push_back(s.path + "/vars");
    const auto& w = s.weights;
    for (size_t i = 0; i < w.size(); ++i)
      tensors.push_back({s.path + "/vars/" + std::to_string(i), w[i]->value});
  }
}

// Equal dtypes, or two integer ones: Keras on JAX stores its int64 counters (Normalization's
// count) as int32.
bool same_dtype_kind(const Tensor& a, const Tensor& b) {
  auto integer = [](DType t) { return t == DType::i32 || t == DType::i64; };
  return a.dtype() == b.dtype() || (integer(a.dtype()) && integer(b.dtype()));
}

void copy_weight(Tensor& dst, const Tensor& src) {
  if (dst.dtype() == src.dtype()) return dst.copy_from(src);
  for (int64_t i = 0; i < dst.numel(); ++i) {  // i32 <-> i64
    const int64_t v = src.dtype() == DType::i32 ? src.data<int32_t>()[i] : src.data<int64_t>()[i];
    if (dst.dtype() == DType::i32)
      dst.data<int32_t>()[i] = int32_t(v);
    else
      dst.data<int64_t>()[i] = v;
  }
}

// The slot's tensors in the file, or why they do not fit its layer ("" when they do).
std::string slot_mismatch(const KerasWeightSlot& s,
                          const std::map<std::string, const Tensor*>& by_name,
                          const std::string& file) {
  const auto& w = s.weights;
  size_t in_file = 0;
  const std::string prefix = s.path + "/vars/";
  for (auto it = by_name.lower_bound(prefix);
       it != by_name.end() && it->first.rfind(prefix, 0) == 0; ++it)
    ++in_file;
  const std::string layer = s.layer->class_name() + " '" + s.layer->name() + "'";
  if (in_file != w.size())
    return "'" + file + "': " + layer + " has " + std::to_string(w.size()) +
           " weights but the file's '" + s.path + "/vars' holds " + std::to_string(in_file) +
           " (a different architecture?)";
  for (size_t i = 0; i < w.size(); ++i) {
    auto it = by_name.find(prefix + std::to_string(i));
    if (it == by_name.end()) return "'" + file + "': " + prefix + std::to_string(i) + " is missing";
    const Tensor& src = *it->second;
    if (src.shape() != w[i]->value.shape() || !same_dtype_kind(src, w[i]->value))
      return "'" + file + "': " + prefix + std::to_string(i) + " is " + dtype_name(src.dtype()) +
             src.shape().str() + " but " + layer + " weight '" + w[i]->name + "' is " +
             dtype_name(w[i]->value.dtype()) + w[i]->value.shape().str();
  }
  return "";
}

LoadWeightsReport tensors_to_weights(Network& net, const std::vector<io::NamedTensor>& tensors,
                                     const std::string& file, bool skip_mismatch = false,
                                     const std::string& hint = "") {
  std::map<std::string, const Tensor*> by_name;
  for (auto& t : tensors) by_name[t.name] = &t.value;
  LoadWeightsReport report;
  std::vector<const KerasWeightSlot*> load;
  const auto slots = weight_slots(net);
  for (auto& s : slots) {
    const std::string why = slot_mismatch(s, by_name, file);
    if (why.empty()) {
      load.push_back(&s);
      if (!s.weights.empty()) report.loaded.push_back(s.layer->name());
      continue;
    }
    LS_CHECK(skip_mismatch, why, hint);
    std::fprintf(stderr, "load_weights: skipping %s\n", why.c_str());
    report.skipped.push_back(s.layer->name() + ": " + why);
  }
  // All checked: now copy (in place, so compiled programs keep their views).
  for (auto* s : load) {
    const auto& w = s->weights;
    for (size_t i = 0; i < w.size(); ++i)
      copy_weight(w[i]->value, *by_name.at(s->path + "/vars/" + std::to_string(i)));
  }
  return report;
}

std::string now_string() {
  std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d@%H:%M:%S", std::gmtime(&t));
  return buf;
}

// The most bytes of tensors a .keras file of `net` holds: its weights and an optimizer's
// iteration, learning rate and at most two slots per weight (Adam's m and v), with slack.
uint64_t weights_budget(const Network& net) {
  uint64_t bytes = 0;
  for (auto& w : net.weights()) bytes += uint64_t(w->value.nbytes());
  return 3 * bytes + (1u << 20);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Model model_from_config(const json& config) { return Model(network_from_config(config)); }
Model model_from_json(const std::string& json_text) { return Model(network_from_json(json_text)); }

bool is_keras_weights_path(const std::string& path) {
  return ends_with(path, ".h5") || ends_with(path, ".hdf5");
}

void save_keras_weights(const Network& model, const std::string& path) {
  if (!ends_with(path, ".weights.h5")) return save_legacy_weights(model, path);
  std::vector<io::NamedTensor> tensors;
  std::vector<std::string> groups;
  weights_to_tensors(model, tensors, groups);
  io::write_h5_tensors(path, tensors, groups);
}

LoadWeightsReport load_keras_weights(Network& model, const std::string& path,
                                     const LoadWeightsOptions& options) {
  if (io::is_legacy_h5(path)) return load_legacy_weights(model, path, options);
  return tensors_to_weights(model, io::read_h5_tensors(path), path, options.skip_mismatch,
                            " (load_weights(path, {.skip_mismatch = true}) leaves it as it is)");
}

void save_model(const Model& model, const std::string& path, const SaveOptions& options) {
  LS_CHECK(ends_with(path, ".keras"), "save_model: '", path,
           "' must end in .keras (use save_weights for .weights.h5 or checkpoints)");
  LS_CHECK(options.metadata.is_object(), "save_model: options.metadata must be a JSON object");
  io::KerasArchive a;
  a.config = model.get_config();
  a.metadata = options.metadata;
  a.metadata["keras_version"] = kKerasVersion;
  a.metadata["date_saved"] = now_string();
  a.metadata["producer"] = "lockstep";
  weights_to_tensors(model, a.weights, a.groups);
  if (model.host_preprocessing()) a.assets = model.host_preprocessing()->assets();
  const auto& compiled = model.compile_config();
  if (options.include_optimizer && (compiled.optimizer || compiled.loss)) {
    a.config["compile_config"] = train::compile_config_json(compiled);
    if (compiled.optimizer) {
      a.groups.push_back("optimizer");
      a.groups.push_back("optimizer/vars");
      for (auto& t : train::optimizer_state(model)) a.weights.push_back(t);
    }
  }
  io::write_keras_archive(path, a);
}

// Compiles `m` from the file's compile_config and loads the optimizer's variables.
static void restore_compiled(Model& m, const io::KerasArchive& a, const std::string& path) {
  try {
    m.compile(train::compile_config_from_json(a.config["compile_config"]));
  } catch (const Error& e) {
    LS_FAIL("'", path, "': config.json: compile_config: ", e.what(),
            " (load_model(path, /*compile=*/false) loads the model uncompiled)");
  }
  bool has_state = false;
  for (auto& t : a.weights) has_state |= t.name.rfind("optimizer/vars/", 0) == 0;
  if (has_state && m.compile_config().optimizer)
    train::load_optimizer_state(m, a.weights, "'" + path + "': model.weights.h5");
}

Model load_model(const std::string& path, bool compile) {
  LS_CHECK(ends_with(path, ".keras"), "load_model: '", path,
           "' is not a .keras file (load_weights reads .weights.h5 and checkpoints)");
  Model m;
  // The model is built from config.json before the weights are read: what they may decode to
  // is bounded by what it can use.
  io::KerasArchive a = io::read_keras_archive(path, [&](const json& file_config) {
    try {
      json config = file_config;
      config.erase("compile_config");
      m = model_from_config(config);
    } catch (const Error& e) {
      LS_FAIL("'", path, "': config.json: ", e.what());
    }
    return weights_budget(m);
  });
  tensors_to_weights(m, a.weights, path + ": model.weights.h5");
  if (m.host_preprocessing()) m.host_preprocessing()->load_assets(a.assets, path);
  if (compile && a.config.contains("compile_config") && !a.config["compile_config"].is_null())
    restore_compiled(m, a, path);
  return m;
}

json load_model_metadata(const std::string& path) {
  LS_CHECK(ends_with(path, ".keras"), "load_model_metadata: '", path, "' is not a .keras file");
  json meta = io::read_keras_archive(path).metadata;  // an object (read_keras_archive checks)
  // The entries Lockstep's tools read, with the types Keras and `lockstep train` write them in.
  for (const char* key : {"keras_version", "date_saved", "producer"})
    LS_CHECK(!meta.contains(key) || meta[key].is_string(), "'", path, "': metadata.json: '", key,
             "' is a JSON ", meta[key].type_name(), ", not a string");
  if (meta.contains("class_names")) {
    const json& names = meta["class_names"];
    LS_CHECK(names.is_array(), "'", path, "': metadata.json: 'class_names' is a JSON ",
             names.type_name(), ", not a list of strings");
    for (size_t i = 0; i < names.size(); ++i)
      LS_CHECK(names[i].is_string(), "'", path, "': metadata.json: 'class_names'[", i,
               "] is a JSON ", names[i].type_name(), ", not a string");
  }
  return meta;
}

}  // namespace lockstep
