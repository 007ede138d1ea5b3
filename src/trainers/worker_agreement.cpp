// Agreement before the first step (see worker_agreement.h).
#include "trainers/worker_agreement.h"

#include <algorithm>

#include "distribute/internal/strategy_runtime.h"
#include "lockstep/core/config.h"
#include "lockstep/core/error.h"
#include "lockstep/trainers/preemption.h"

#ifndef LOCKSTEP_VERSION
#define LOCKSTEP_VERSION "unknown"
#endif

namespace lockstep {

namespace {

// Leaf values of a JSON tree as ("prefix.key[i]", value) in document order. Layer and model
// "name"s are left out: auto-generated names count the layers a process made before, which
// need not match, and names take no part in the collectives.
void flatten(const json& value, const std::string& path, Fingerprint& out) {
  if (value.is_object()) {
    for (auto it = value.begin(); it != value.end(); ++it)
      if (it.key() != "name") flatten(it.value(), path + "." + it.key(), out);
  } else if (value.is_array() && !value.empty() && (value[0].is_object() || value[0].is_array())) {
    out.emplace_back(path + ".length", std::to_string(value.size()));
    for (size_t i = 0; i < value.size(); ++i)
      flatten(value[i], path + "[" + std::to_string(i) + "]", out);
  } else {
    out.emplace_back(path, value.dump());
  }
}

void add_strategy_fields(const distribute::StrategyImpl& strategy, Fingerprint& out) {
  out.emplace_back("num_workers", std::to_string(strategy.num_workers));
  out.emplace_back("strategy", json(strategy.name).dump());
  out.emplace_back("replicas_per_worker", std::to_string(strategy.local_replicas));
  const auto& communication = strategy.options.communication;
  out.emplace_back("communication.implementation",
                   json(distribute::to_string(communication.implementation)).dump());
  out.emplace_back("communication.timeout_ms", std::to_string(communication.timeout.count()));
  out.emplace_back("bytes_per_pack", std::to_string(strategy.options.bytes_per_pack));
  out.emplace_back("all_reduce_dtype", json(dtype_name(strategy.options.all_reduce_dtype)).dump());
  // Op determinism's gradient shards fix the reduction's structure (lockstep/core/config.h).
  out.emplace_back(
      "deterministic_shards",
      std::to_string(config::op_determinism_enabled() ? config::op_determinism_shards() : -1));
}

void add_model_fields(const Model& model, Fingerprint& out) {
  flatten(model.get_config(), "model", out);
  const auto weights = model.weights();
  out.emplace_back("weights.length", std::to_string(weights.size()));
  for (size_t i = 0; i < weights.size(); ++i) {
    const Tensor& value = weights[i]->value;
    out.emplace_back("weights[" + std::to_string(i) + "]",
                     json(value.shape().str() + " " + dtype_name(value.dtype())).dump());
  }
  const CompileConfig& compiled = model.compile_config();
  if (compiled.optimizer) {
    out.emplace_back("optimizer", json(compiled.optimizer->name()).dump());
    flatten(compiled.optimizer->get_config(), "optimizer", out);
  }
  if (compiled.loss) flatten(compiled.loss->get_config(), "loss", out);
  json metrics = json::array();
  for (auto& metric : model.metrics()) metrics.push_back(metric->name());
  out.emplace_back("metrics", metrics.dump());
  out.emplace_back("steps_per_execution", std::to_string(compiled.steps_per_execution));
}

void add_fit_fields(const FitConfig& config, const FitData& data, Fingerprint& out) {
  out.emplace_back("data", json(data.kind).dump());
  out.emplace_back("global_batch_size", data.global_batch);
  if (!data.element_spec.empty()) out.emplace_back("element_spec", json(data.element_spec).dump());
  out.emplace_back("epochs", std::to_string(config.epochs));
  out.emplace_back("initial_epoch", std::to_string(config.initial_epoch));
  out.emplace_back("steps_per_epoch", std::to_string(config.steps_per_epoch));
  // Installed on one worker only, its between-step check would be a collective the others
  // never join.
  out.emplace_back("preemption_handler", preemption_handler_installed() ? "true" : "false");
  if (data.kind == "arrays") {  // every worker must walk the same permutation
    // The same arrays: 96 and 95 samples make the same 6 batches of 16, and the shorter
    // worker's last share would be one row short.
    if (!data.samples.empty()) out.emplace_back("samples", data.samples);
    out.emplace_back("shuffle", config.shuffle ? "true" : "false");
    out.emplace_back("seed", std::to_string(config.seed));
  }
}

std::string shorten(const std::string& text) {
  return text.size() <= 160 ? text : text.substr(0, 157) + "...";
}

}  // namespace

Fingerprint fit_fingerprint(const Model& model, const FitConfig& config, const FitData& data) {
  Fingerprint out;
  out.emplace_back("lockstep_version", json(LOCKSTEP_VERSION).dump());
  if (model.strategy()) add_strategy_fields(*model.strategy(), out);
  add_model_fields(model, out);
  add_fit_fields(config, data, out);
  return out;
}

std::string encode_fingerprint(const Fingerprint& fingerprint) {
  json fields = json::array();
  for (auto& [name, value] : fingerprint) fields.push_back({name, value});
  return json{{"lockstep_fit_fingerprint", fields}}.dump();
}

Fingerprint decode_fingerprint(const std::string& bytes, int worker) {
  Fingerprint out;
  try {
    const json parsed = json::parse(bytes);  // named: a range-for over a temporary's member dangles
    for (auto& field : parsed.at("lockstep_fit_fingerprint"))
      out.emplace_back(field.at(0).get<std::string>(), field.at(1).get<std::string>());
  } catch (const json::exception&) {
    throw Error("fit: worker " + std::to_string(worker) +
                " sent a fingerprint this worker cannot read (a different Lockstep version?): " +
                shorten(bytes));
  }
  return out;
}

void check_fingerprints_agree(const std::vector<Fingerprint>& per_worker) {
  size_t longest = 0;
  for (auto& fingerprint : per_worker) longest = std::max(longest, fingerprint.size());
  for (size_t i = 0; i < longest; ++i)
    for (size_t worker = 1; worker < per_worker.size(); ++worker) {
      const Fingerprint &chief = per_worker[0], &other = per_worker[worker];
      if (i < chief.size() && i < other.size() && chief[i] == other[i]) continue;
      const std::string field = i < chief.size() ? chief[i].first : other[i].first;
      auto value_of = [&](const Fingerprint& f) {
        if (i >= f.size()) return std::string("nothing (its fingerprint ends earlier)");
        if (f[i].first != field) return "no " + field + " (it has " + f[i].first + ")";
        return shorten(f[i].second);
      };
      throw Error("fit: workers disagree on " + field + ": worker 0 has " + value_of(chief) +
                  ", worker " + std::to_string(worker) + " has " + value_of(other) +
                  " (every worker must build the same model, compile it the same way and call "
                  "fit with the same data, global batch and options)");
    }
}

void agree_before_fit(const Model& model, const FitConfig& config, const FitData& data) {
  distribute::StrategyImpl* strategy = model.strategy().get();
  if (!strategy || strategy->num_workers < 2) return;
  const auto all =
      strategy->allgather_workers(encode_fingerprint(fit_fingerprint(model, config, data)));
  std::vector<Fingerprint> per_worker;
  for (size_t worker = 0; worker < all.size(); ++worker)
    per_worker.push_back(decode_fingerprint(all[worker], int(worker)));
  check_fingerprints_agree(per_worker);
}

}  // namespace lockstep
