// compile()'s resolution of a CompileConfig (src/trainers/compile_resolution.h).
#include "trainers/compile_resolution.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "lockstep/core/strings.h"
#include "lockstep/graph/backends.h"

namespace lockstep {

namespace {

// The model and its outputs, as the errors name them.
struct Outputs {
  const std::string& model;
  const std::vector<std::string>& names;
  std::string listed;  // "reg, cls"
  size_t count() const { return names.size(); }
};

// A per-output argument in its list form, in the output order: a dict's entries by name (an
// output left out gets `missing`; with `required`, an error instead; a key that is no output is
// an error), a list as it is once its length is checked.
template <typename T>
std::vector<T> as_list(const PerOutput<T>& arg, const T& missing, bool required,
                       const Outputs& outs, const char* what) {
  if (!arg.keyed()) {
    const size_t given = arg.list().size();
    LS_CHECK(given == 0 || given == outs.count(), "compile: ", what, " has ", given,
             " entries but model '", outs.model, "' has ", outs.count(), " output",
             outs.count() > 1 ? "s" : "", " (", outs.listed,
             "); pass one per output, in the model's output order, or a dict keyed by output "
             "name");
    return arg.list();
  }
  for (auto& [key, value] : arg.dict())
    LS_CHECK(std::find(outs.names.begin(), outs.names.end(), key) != outs.names.end(),
             "compile: ", what, " has key '", key, "', which is not an output of model '",
             outs.model, "' (outputs: ", outs.listed, ")");
  std::vector<T> list;
  for (auto& name : outs.names) {
    auto it = arg.dict().find(name);
    LS_CHECK(it != arg.dict().end() || !required, "compile: ", what, " has no entry for output '",
             name, "' of model '", outs.model, "' (outputs: ", outs.listed,
             "; every output needs one)");
    list.push_back(it != arg.dict().end() ? it->second : missing);
  }
  return list;
}

// The configuration with every per-output argument in its list form, checked against the
// outputs.
CompileConfig list_forms(const CompileConfig& config, const Outputs& outs) {
  LS_CHECK(config.losses.empty() || !config.loss, "compile: pass `loss` (one loss for every ",
           "output) or `losses` (one per output), not both");
  CompileConfig c = config;
  c.losses = as_list(config.losses, LossPtr(), true, outs, "losses");
  c.loss_weights = as_list(config.loss_weights, 1.0, false, outs, "loss_weights");
  c.output_metrics = as_list(config.output_metrics, {}, false, outs, "output_metrics");
  c.output_metric_objects =
      as_list(config.output_metric_objects, {}, false, outs, "output_metric_objects");
  c.output_weighted_metrics =
      as_list(config.output_weighted_metrics, {}, false, outs, "output_weighted_metrics");
  LS_CHECK(outs.count() <= 1 || (c.metrics.empty() && c.metric_objects.empty() &&
                                 c.weighted_metrics.empty() && c.weighted_metric_objects.empty()),
           "compile: model '", outs.model, "' has ", outs.count(), " outputs (", outs.listed,
           "): give each output its metrics with output_metrics / output_metric_objects / "
           "output_weighted_metrics (one list per output, as Keras's list of lists)");
  return c;
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

// Each output's loss and loss weight, and the loss trackers.
void resolve_losses(ResolvedCompile& r, const Outputs& outs) {
  const CompileConfig& c = r.config;
  for (size_t o = 0; o < outs.count(); ++o) {
    LossPtr loss = c.losses.empty() ? c.loss : c.losses.list()[o];
    LS_CHECK(loss || c.losses.empty(), "compile: losses[", o, "] (output '", outs.names[o],
             "') is null; every output needs a loss");
    r.output_losses.push_back(loss);
  }
  r.loss_weights.assign(outs.count(), 1.0);
  const std::vector<double>& weights = c.loss_weights.list();
  for (size_t o = 0; o < weights.size(); ++o) {
    LS_CHECK(std::isfinite(weights[o]), "compile: loss_weights[", o, "] is ", weights[o],
             " (must be finite)");
    r.loss_weights[o] = weights[o];
  }
  r.loss_tracker = metrics::Mean("loss");
  if (outs.count() > 1)
    for (auto& name : outs.names) r.output_loss_trackers.push_back(metrics::Mean(name + "_loss"));
}

// The metrics (by name, each output's loss picks the variant: "accuracy" of a sparse loss is
// sparse_categorical_accuracy) and the output each one watches.
void resolve_metrics(ResolvedCompile& r, const Outputs& outs) {
  const CompileConfig& c = r.config;
  auto loss_name = [&](size_t o) {
    return o < r.output_losses.size() && r.output_losses[o] ? r.output_losses[o]->name() : "";
  };
  auto add = [&](std::vector<MetricPtr>& to, std::vector<int>& outputs,
                 const std::vector<std::string>& names, const std::vector<MetricPtr>& objects,
                 size_t o) {
    for (auto& m : names) to.push_back(metrics::get(m, loss_name(o))), outputs.push_back(int(o));
    for (auto& m : objects) to.push_back(m), outputs.push_back(int(o));
  };
  add(r.metrics, r.metric_outputs, c.metrics, c.metric_objects, 0);
  for (size_t o = 0; o < c.output_metrics.size(); ++o)
    add(r.metrics, r.metric_outputs, c.output_metrics.list()[o], {}, o);
  for (size_t o = 0; o < c.output_metric_objects.size(); ++o)
    add(r.metrics, r.metric_outputs, {}, c.output_metric_objects.list()[o], o);
  add(r.weighted_metrics, r.weighted_metric_outputs, c.weighted_metrics, c.weighted_metric_objects,
      0);
  for (size_t o = 0; o < c.output_weighted_metrics.size(); ++o)
    add(r.weighted_metrics, r.weighted_metric_outputs, c.output_weighted_metrics.list()[o], {}, o);
  for (auto& m : r.weighted_metrics)
    for (auto& other : r.metrics)
      LS_CHECK(m != other, "compile: metric '", m->name(),
               "' is in both metric_objects and weighted_metric_objects (pass two objects)");
  std::vector<std::string> loss_names;
  for (auto& t : r.output_loss_trackers) loss_names.push_back(t->name());
  const bool several = outs.count() > 1;
  auto prefix = [&](const std::vector<int>& of) {
    return [&, several](size_t i) { return several ? outs.names[size_t(of[i])] + "_" : ""; };
  };
  r.metric_log_names =
      unique_log_names(r.metrics, r.weighted_metrics, loss_names, prefix(r.metric_outputs),
                       prefix(r.weighted_metric_outputs));
}

}  // namespace

std::vector<MetricPtr> ResolvedCompile::all_metrics() const {
  std::vector<MetricPtr> m;
  if (loss_tracker) m.push_back(loss_tracker);
  m.insert(m.end(), output_loss_trackers.begin(), output_loss_trackers.end());
  m.insert(m.end(), metrics.begin(), metrics.end());
  m.insert(m.end(), weighted_metrics.begin(), weighted_metrics.end());
  return m;
}

ResolvedCompile resolve_compile(const CompileConfig& config, const std::string& model_name,
                                const std::vector<std::string>& output_names) {
  LS_CHECK(config.steps_per_execution >= 1, "compile: steps_per_execution must be >= 1, got ",
           config.steps_per_execution);
  LS_CHECK(is_known_backend(config.backend), "compile: unknown backend '", config.backend,
           "' (expected one of ", known_backend_names(), ")");
  const Outputs outs{model_name, output_names, join(output_names)};
  ResolvedCompile r;
  r.config = list_forms(config, outs);
  resolve_losses(r, outs);
  resolve_metrics(r, outs);
  return r;
}

}  // namespace lockstep
