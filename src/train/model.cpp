// Model: a Network plus its training configuration and compiled programs.
#include "lockstep/train/model.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "distribute/internal/strategy_runtime.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/graph/backends.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/saving.h"
#include "train/program.h"

namespace lockstep {

Model::Model() = default;
Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

Model::Model(std::vector<KTensor> inputs, std::vector<KTensor> outputs, std::string name)
    : Network(std::move(inputs), std::move(outputs), std::move(name)),
      strategy_(distribute::Strategy::current()) {}

Model::Model(Network network)
    : Network(std::move(network)), strategy_(distribute::Strategy::current()) {}

Model Sequential(std::vector<SequentialItem> items, std::string name) {
  return Model(Network::sequential(std::move(items), std::move(name)));
}

std::vector<MetricPtr> Model::metrics() const {
  std::vector<MetricPtr> m;
  if (loss_tracker_) m.push_back(loss_tracker_);
  m.insert(m.end(), output_loss_trackers_.begin(), output_loss_trackers_.end());
  m.insert(m.end(), metrics_.begin(), metrics_.end());
  m.insert(m.end(), weighted_metrics_.begin(), weighted_metrics_.end());
  return m;
}

std::vector<std::string> Model::metric_log_names() const {
  if (!metric_log_names_.empty() || !loss_tracker_) return metric_log_names_;
  std::vector<std::string> names;
  for (auto& m : metrics()) names.push_back(m->name());
  return names;
}

std::vector<std::string> Model::output_names() const {
  std::vector<std::string> names;
  for (auto& o : outputs_) names.push_back(o.call && o.call->layer ? o.call->layer->name() : "");
  return names;
}

std::vector<std::string> Model::input_names() const {
  std::vector<std::string> names;
  for (auto& i : inputs_) names.push_back(i.call && i.call->layer ? i.call->layer->name() : "");
  return names;
}

namespace {

// A compile() argument in Keras's dict form (keyed by output name) as its list form, in the
// output order: an output left out gets `missing` (required: an error instead); a key that
// is no output, or both forms given, is an error. The dict is cleared (compile_config() then
// holds the list form, which compiles again as it is).
template <typename T>
void dict_to_list(std::map<std::string, T>& dict, std::vector<T>& list, const T& missing,
                  bool required, const std::vector<std::string>& names, const char* dict_name,
                  const char* list_name, const std::string& model, const std::string& listed) {
  if (dict.empty()) return;
  LS_CHECK(list.empty(), "compile: pass ", list_name, " (a list) or ", dict_name,
           " (keyed by output name), not both");
  for (auto& [key, value] : dict)
    LS_CHECK(std::find(names.begin(), names.end(), key) != names.end(), "compile: ", dict_name,
             " has key '", key, "', which is not an output of model '", model,
             "' (outputs: ", listed, ")");
  for (auto& name : names) {
    auto it = dict.find(name);
    LS_CHECK(it != dict.end() || !required, "compile: ", dict_name, " has no entry for output '",
             name, "' of model '", model, "' (outputs: ", listed, "; every output needs one)");
    list.push_back(it != dict.end() ? it->second : missing);
  }
  dict.clear();
}

// Keras's CompileMetrics.result() naming: a weighted metric whose name is taken is logged as
// "weighted_<name>", then "weighted_<name>_1", ... prefix(i) / weighted_prefix(i): the
// "<output>_" of a multi-output model's metric (empty for one output); output_losses: the
// "<output>_loss" names, logged after "loss".
std::vector<std::string> unique_log_names(
    const std::vector<MetricPtr>& plain, const std::vector<MetricPtr>& weighted,
    const std::vector<std::string>& output_losses, const std::function<std::string(size_t)>& prefix,
    const std::function<std::string(size_t)>& weighted_prefix) {
  std::map<std::string, int> counters{{"loss", 1}};
  std::vector<std::string> names{"loss"};
  names.insert(names.end(), output_losses.begin(), output_losses.end());
  auto take = [&](std::string name) {
    auto [it, fresh] = counters.try_emplace(name, 1);
    if (!fresh) name.append("_").append(std::to_string(it->second++));
    names.push_back(name);
  };
  for (size_t i = 0; i < plain.size(); ++i) take(prefix(i) + plain[i]->name());
  for (size_t i = 0; i < weighted.size(); ++i) {
    const std::string name = weighted_prefix(i) + weighted[i]->name();
    if (!counters.count(name)) {
      counters[name] = 1, names.push_back(name);
      continue;
    }
    take(weighted_prefix(i) + "weighted_" + weighted[i]->name());
  }
  return names;
}

}  // namespace

// compile()'s per-output part: each output's loss and weight, the loss trackers, and the
// metrics with the output each one watches (Keras's list forms, checked against the outputs).
void Model::resolve_outputs() {
  const size_t outputs = outputs_.size();
  const bool several = outputs > 1;
  const std::vector<std::string> names = output_names();
  std::string listed;
  for (size_t o = 0; o < names.size(); ++o) listed += (o ? ", " : "") + names[o];
  auto check_count = [&](size_t given, const char* what) {
    LS_CHECK(given == 0 || given == outputs, "compile: ", what, " has ", given,
             " entries but model '", name_, "' has ", outputs, " output", several ? "s" : "", " (",
             listed, "); pass one per output, in the model's output order");
  };
  const std::string model_name = name_;
  LS_CHECK(config_.loss_by_output.empty() || !config_.loss,
           "compile: pass `loss` (one loss for every output) or `loss_by_output`, not both");
  dict_to_list(config_.loss_by_output, config_.losses, LossPtr(), true, names, "loss_by_output",
               "losses", model_name, listed);
  dict_to_list(config_.loss_weight_by_output, config_.loss_weights, 1.0, false, names,
               "loss_weight_by_output", "loss_weights", model_name, listed);
  dict_to_list(config_.metrics_by_output, config_.output_metrics, {}, false, names,
               "metrics_by_output", "output_metrics", model_name, listed);
  dict_to_list(config_.metric_objects_by_output, config_.output_metric_objects, {}, false, names,
               "metric_objects_by_output", "output_metric_objects", model_name, listed);
  dict_to_list(config_.weighted_metrics_by_output, config_.output_weighted_metrics, {}, false,
               names, "weighted_metrics_by_output", "output_weighted_metrics", model_name, listed);
  check_count(config_.losses.size(), "losses");
  check_count(config_.loss_weights.size(), "loss_weights");
  check_count(config_.output_metrics.size(), "output_metrics");
  check_count(config_.output_metric_objects.size(), "output_metric_objects");
  check_count(config_.output_weighted_metrics.size(), "output_weighted_metrics");
  LS_CHECK(config_.losses.empty() || !config_.loss, "compile: pass `loss` (one loss for every ",
           "output) or `losses` (one per output), not both");
  LS_CHECK(
      !several || (config_.metrics.empty() && config_.metric_objects.empty() &&
                   config_.weighted_metrics.empty() && config_.weighted_metric_objects.empty()),
      "compile: model '", name_, "' has ", outputs, " outputs (", listed,
      "): give each output its metrics with output_metrics / output_metric_objects / "
      "output_weighted_metrics (one list per output, as Keras's list of lists)");
  output_losses_.clear();
  for (size_t o = 0; o < outputs; ++o) {
    LossPtr loss = config_.losses.empty() ? config_.loss : config_.losses[o];
    LS_CHECK(loss || !config_.losses.size(), "compile: losses[", o, "] (output '", names[o],
             "') is null; every output needs a loss");
    output_losses_.push_back(loss);
  }
  loss_weights_.assign(outputs, 1.0);
  for (size_t o = 0; o < config_.loss_weights.size(); ++o) {
    LS_CHECK(std::isfinite(config_.loss_weights[o]), "compile: loss_weights[", o, "] is ",
             config_.loss_weights[o], " (must be finite)");
    loss_weights_[o] = config_.loss_weights[o];
  }
  loss_tracker_ = metrics::Mean("loss");
  output_loss_trackers_.clear();
  if (several)
    for (size_t o = 0; o < outputs; ++o)
      output_loss_trackers_.push_back(metrics::Mean(names[o] + "_loss"));
  metrics_.clear(), metric_outputs_.clear();
  weighted_metrics_.clear(), weighted_metric_outputs_.clear();
  auto loss_name = [&](size_t o) {
    return o < output_losses_.size() && output_losses_[o] ? output_losses_[o]->name() : "";
  };
  for (auto& m : config_.metrics) metrics_.push_back(metrics::get(m, loss_name(0)));
  for (auto& m : config_.metric_objects) metrics_.push_back(m);
  metric_outputs_.assign(metrics_.size(), 0);
  for (size_t o = 0; o < config_.output_metrics.size(); ++o)
    for (auto& m : config_.output_metrics[o])
      metrics_.push_back(metrics::get(m, loss_name(o))), metric_outputs_.push_back(int(o));
  for (size_t o = 0; o < config_.output_metric_objects.size(); ++o)
    for (auto& m : config_.output_metric_objects[o])
      metrics_.push_back(m), metric_outputs_.push_back(int(o));
  for (auto& m : config_.weighted_metrics)
    weighted_metrics_.push_back(metrics::get(m, loss_name(0)));
  for (auto& m : config_.weighted_metric_objects) weighted_metrics_.push_back(m);
  weighted_metric_outputs_.assign(weighted_metrics_.size(), 0);
  for (size_t o = 0; o < config_.output_weighted_metrics.size(); ++o)
    for (auto& m : config_.output_weighted_metrics[o])
      weighted_metrics_.push_back(metrics::get(m, loss_name(o))),
          weighted_metric_outputs_.push_back(int(o));
  for (auto& m : weighted_metrics_)
    for (auto& other : metrics_)
      LS_CHECK(m != other, "compile: metric '", m->name(),
               "' is in both metric_objects and weighted_metric_objects (pass two objects)");
  std::vector<std::string> loss_names;
  for (auto& t : output_loss_trackers_) loss_names.push_back(t->name());
  auto prefix = [&](const std::vector<int>& outs) {
    return [&, several](size_t i) { return several ? names[size_t(outs[i])] + "_" : ""; };
  };
  metric_log_names_ = unique_log_names(metrics_, weighted_metrics_, loss_names,
                                       prefix(metric_outputs_), prefix(weighted_metric_outputs_));
}

void Model::compile(CompileConfig config) {
  LS_CHECK(config.steps_per_execution >= 1, "compile: steps_per_execution must be >= 1, got ",
           config.steps_per_execution);
  LS_CHECK(is_known_backend(config.backend), "compile: unknown backend '", config.backend,
           "' (expected one of ", known_backend_names(), ")");
  config_ = std::move(config);
  programs_.clear();
  if (auto current = distribute::Strategy::current()) strategy_ = current;  // compiled in a scope
  replication_ = strategy_ ? std::make_unique<Replication>(strategy_) : nullptr;
  resolve_outputs();
  compiled_ = true;
}

Program& Model::program(const std::string& kind, int64_t batch, int replica, int weighted) {
  LS_CHECK(compiled_ || kind == "predict", "Model '", name_, "': call compile() before ",
           kind == "train" ? "fit" : "evaluate");
  auto key = std::make_tuple(kind, batch, replica, weighted);
  auto it = programs_.find(key);
  if (it != programs_.end()) return *it->second;
  if (!compiled_) config_ = CompileConfig{};
  auto p = std::make_unique<Program>(
      *this, program_kind(kind), batch, loss_tracker_ ? loss_tracker_ : metrics::Mean("loss"),
      metrics_, weighted_metrics_, replication_.get(), replica, weighted);
  compile_seconds_ += p->compile_seconds();
  return *(programs_[key] = std::move(p));
}

}  // namespace lockstep

namespace lockstep {

void Model::save_weights(const std::string& path) const {
  if (is_keras_weights_path(path)) {
    if (!strategy_ || strategy_->is_chief()) save_keras_weights(*this, path);
    return;
  }
  train::save_weights(*this, path);
}
void Model::load_weights(const std::string& path) {
  if (is_keras_weights_path(path)) return load_keras_weights(*this, path);
  train::load_weights(*this, path);
}
void Model::save(const std::string& path) const {
  if (!strategy_ || strategy_->is_chief()) save_model(*this, path);
}

}  // namespace lockstep
