// Model: a Network plus its training configuration and compiled programs.
#include "lockstep/train/model.h"

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

namespace {

// Keras's CompileMetrics.result() naming: a weighted metric whose name is taken is logged as
// "weighted_<name>", then "weighted_<name>_1", ...
std::vector<std::string> unique_log_names(const std::vector<MetricPtr>& plain,
                                          const std::vector<MetricPtr>& weighted) {
  std::map<std::string, int> counters{{"loss", 1}};
  std::vector<std::string> names{"loss"};
  auto take = [&](std::string name) {
    auto [it, fresh] = counters.try_emplace(name, 1);
    if (!fresh) name += "_" + std::to_string(it->second++);
    names.push_back(name);
  };
  for (auto& m : plain) take(m->name());
  for (auto& m : weighted) {
    if (!counters.count(m->name())) {
      counters[m->name()] = 1, names.push_back(m->name());
      continue;
    }
    take("weighted_" + m->name());
  }
  return names;
}

}  // namespace

void Model::compile(CompileConfig config) {
  LS_CHECK(config.steps_per_execution >= 1, "compile: steps_per_execution must be >= 1, got ",
           config.steps_per_execution);
  LS_CHECK(is_known_backend(config.backend), "compile: unknown backend '", config.backend,
           "' (expected one of ", known_backend_names(), ")");
  config_ = std::move(config);
  programs_.clear();
  if (auto current = distribute::Strategy::current()) strategy_ = current;  // compiled in a scope
  replication_ = strategy_ ? std::make_unique<Replication>(strategy_) : nullptr;
  loss_tracker_ = metrics::Mean("loss");
  metrics_.clear();
  std::string loss_name = config_.loss ? config_.loss->name() : "";
  for (auto& m : config_.metrics) metrics_.push_back(metrics::get(m, loss_name));
  for (auto& m : config_.metric_objects) metrics_.push_back(m);
  weighted_metrics_.clear();
  for (auto& m : config_.weighted_metrics) weighted_metrics_.push_back(metrics::get(m, loss_name));
  for (auto& m : config_.weighted_metric_objects) weighted_metrics_.push_back(m);
  for (auto& m : weighted_metrics_)
    for (auto& other : metrics_)
      LS_CHECK(m != other, "compile: metric '", m->name(),
               "' is in both metric_objects and weighted_metric_objects (pass two objects)");
  metric_log_names_ = unique_log_names(metrics_, weighted_metrics_);
  compiled_ = true;
}

Program& Model::program(const std::string& kind, int64_t batch, int replica, bool weighted) {
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
