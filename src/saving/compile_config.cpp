// Keras 3's compile_config and optimizer state (src/saving/compile_config.h).
#include "saving/compile_config.h"

#include <algorithm>
#include <map>

#include "lockstep/nn/config.h"

namespace lockstep::train {
namespace {

json keras_object(const std::string& module, const std::string& class_name, json config) {
  return {{"module", module},
          {"class_name", class_name},
          {"config", std::move(config)},
          {"registered_name", nullptr}};
}

const std::map<std::string, std::string>& optimizer_classes() {  // Lockstep name -> Keras class
  static const std::map<std::string, std::string> m = {
      {"SGD", "SGD"}, {"adam", "Adam"}, {"adamw", "AdamW"}, {"rmsprop", "RMSprop"}};
  return m;
}

double number(const json& cfg, const std::string& key, double fallback, const std::string& what) {
  if (!cfg.contains(key) || cfg[key].is_null()) return fallback;
  LS_CHECK(cfg[key].is_number(), what, ": '", key, "' must be a number, got ", cfg[key].dump());
  return cfg[key].get<double>();
}

bool flag(const json& cfg, const std::string& key, bool fallback) {
  return cfg.contains(key) && cfg[key].is_boolean() ? cfg[key].get<bool>() : fallback;
}

// Options Lockstep's optimizers do not have must keep Keras's defaults.
void require_default(const json& cfg, const std::string& key, const json& expected,
                     const std::string& what) {
  if (!cfg.contains(key)) return;
  const json& v = cfg[key];
  const bool same = v == expected || (expected.is_null() && v.is_null());
  LS_CHECK(same, what, ": '", key, "' = ", v.dump(), " is not supported by Lockstep (only ",
           expected.dump(), ")");
}

SchedulePtr schedule_from_config(const json& s) {
  LS_CHECK(s.is_object() && s.contains("class_name") && s.contains("config"),
           "learning_rate: expected a number or a schedule {\"class_name\", \"config\"}, got ",
           s.dump());
  const std::string c = s["class_name"].get<std::string>();
  const json& k = s["config"];
  const std::string w = "learning-rate schedule " + c;
  auto num = [&](const char* key, double d) { return number(k, key, d, w); };
  auto steps = [&](const char* key) { return int64_t(number(k, key, 0, w)); };
  if (c == "ExponentialDecay")
    return schedules::ExponentialDecay(num("initial_learning_rate", 0), steps("decay_steps"),
                                       num("decay_rate", 0), flag(k, "staircase", false));
  if (c == "CosineDecay")
    return schedules::CosineDecay(num("initial_learning_rate", 0), steps("decay_steps"),
                                  num("alpha", 0), num("warmup_target", -1), steps("warmup_steps"));
  if (c == "PiecewiseConstantDecay")
    return schedules::PiecewiseConstantDecay(k.at("boundaries").get<std::vector<int64_t>>(),
                                             k.at("values").get<std::vector<double>>());
  if (c == "PolynomialDecay")
    return schedules::PolynomialDecay(num("initial_learning_rate", 0), steps("decay_steps"),
                                      num("end_learning_rate", 1e-4), num("power", 1),
                                      flag(k, "cycle", false));
  if (c == "InverseTimeDecay")
    return schedules::InverseTimeDecay(num("initial_learning_rate", 0), steps("decay_steps"),
                                       num("decay_rate", 0), flag(k, "staircase", false));
  if (c == "CosineDecayRestarts")
    return schedules::CosineDecayRestarts(num("initial_learning_rate", 0),
                                          steps("first_decay_steps"), num("t_mul", 2),
                                          num("m_mul", 1), num("alpha", 0));
  LS_FAIL("unknown learning-rate schedule class '", c,
          "' (known: ExponentialDecay, CosineDecay, PiecewiseConstantDecay, PolynomialDecay, "
          "InverseTimeDecay, CosineDecayRestarts)");
}

OptimizerOptions common_options(const json& k, const std::string& w) {
  OptimizerOptions o;
  if (k.contains("learning_rate") && k["learning_rate"].is_object())
    o.schedule = schedule_from_config(k["learning_rate"]);
  else
    o.learning_rate = number(k, "learning_rate", 0.001, w);
  o.weight_decay = number(k, "weight_decay", 0, w);
  o.clipnorm = number(k, "clipnorm", 0, w);
  o.global_clipnorm = number(k, "global_clipnorm", 0, w);
  for (const char* key :
       {"clipvalue", "ema_overwrite_frequency", "loss_scale_factor", "gradient_accumulation_steps"})
    require_default(k, key, nullptr, w);
  require_default(k, "use_ema", false, w);
  return o;
}

}  // namespace

OptimizerPtr optimizer_from_config(const json& optimizer) {
  if (optimizer.is_string()) return optimizers::get(optimizer.get<std::string>());
  LS_CHECK(optimizer.is_object() && optimizer.contains("class_name"),
           "optimizer: expected {\"class_name\", \"config\"}, got ", optimizer.dump());
  const std::string c = optimizer["class_name"].get<std::string>();
  const json k = optimizer.value("config", json::object());
  const std::string w = "optimizer " + c;
  OptimizerOptions o = common_options(k, w);
  auto num = [&](const char* key, double d) { return number(k, key, d, w); };
  if (c == "SGD")
    return optimizers::SGD(o.learning_rate, num("momentum", 0), flag(k, "nesterov", false), o);
  if (c == "Adam" || c == "AdamW") {
    require_default(k, "amsgrad", false, w);
    if (c == "AdamW")
      return optimizers::AdamW(o.learning_rate, num("weight_decay", 0.004), num("beta_1", 0.9),
                               num("beta_2", 0.999), num("epsilon", 1e-7), o);
    return optimizers::Adam(o.learning_rate, num("beta_1", 0.9), num("beta_2", 0.999),
                            num("epsilon", 1e-7), o);
  }
  if (c == "RMSprop") {
    require_default(k, "centered", false, w);
    return optimizers::RMSprop(o.learning_rate, num("rho", 0.9), num("momentum", 0),
                               num("epsilon", 1e-7), o);
  }
  LS_FAIL("unknown optimizer class '", c, "' (Lockstep has SGD, Adam, AdamW, RMSprop)");
}

LossPtr loss_from_config(const json& loss) {
  if (loss.is_string()) return losses::get(loss.get<std::string>());
  LS_CHECK(loss.is_object() && loss.contains("class_name"),
           "loss: expected a name or {\"class_name\", \"config\"}, got ", loss.dump());
  const std::string c = loss["class_name"].get<std::string>();
  const json k = loss.value("config", json::object());
  const std::string w = "loss " + c;
  require_default(k, "reduction", "sum_over_batch_size", w);
  require_default(k, "ignore_class", nullptr, w);
  require_default(k, "axis", -1, w);
  losses::CrossentropyOptions ce{flag(k, "from_logits", false), number(k, "label_smoothing", 0, w)};
  losses::FocalOptions focal{flag(k, "apply_class_balancing", false), number(k, "alpha", 0.25, w),
                             number(k, "gamma", 2, w), ce.from_logits, ce.label_smoothing};
  if (c == "SparseCategoricalCrossentropy") return losses::SparseCategoricalCrossentropy(ce);
  if (c == "CategoricalCrossentropy") return losses::CategoricalCrossentropy(ce);
  if (c == "BinaryCrossentropy") return losses::BinaryCrossentropy(ce);
  if (c == "BinaryFocalCrossentropy") return losses::BinaryFocalCrossentropy(focal);
  if (c == "CategoricalFocalCrossentropy") return losses::CategoricalFocalCrossentropy(focal);
  if (c == "Huber") return losses::Huber(number(k, "delta", 1, w));
  return losses::get(c);  // MeanSquaredError, MeanAbsoluteError, KLDivergence (or the error)
}

json compile_config_json(const CompileConfig& config) {
  json c;
  c["optimizer"] = nullptr;
  if (config.optimizer) {
    auto it = optimizer_classes().find(config.optimizer->name());
    LS_CHECK(it != optimizer_classes().end(), "optimizer '", config.optimizer->name(),
             "' has no Keras class");
    c["optimizer"] = keras_object("keras.optimizers", it->second, config.optimizer->get_config());
  }
  c["loss"] = config.loss
                  ? keras_object("keras.losses", config.loss->name(), config.loss->get_config())
                  : json(nullptr);
  c["loss_weights"] = nullptr;
  json metrics = json::array();
  for (auto& m : config.metrics) metrics.push_back(m);
  for (auto& m : config.metric_objects) metrics.push_back(m->name());
  c["metrics"] = metrics.empty() ? json(nullptr) : metrics;
  c["weighted_metrics"] = nullptr;
  // Several outputs: Keras's list forms (a loss, a weight and a metric list per output).
  // (Model::compile_config() holds them in the list form.)
  if (!config.losses.empty()) {
    c["loss"] = json::array();
    for (auto& l : config.losses.list())
      c["loss"].push_back(l ? keras_object("keras.losses", l->name(), l->get_config()) : json());
  }
  if (!config.loss_weights.empty()) c["loss_weights"] = config.loss_weights.list();
  auto per_output = [](const std::vector<std::vector<std::string>>& names,
                       const std::vector<std::vector<MetricPtr>>& objects) {
    json lists = json::array();
    for (size_t o = 0; o < std::max(names.size(), objects.size()); ++o) {
      json list = json::array();
      if (o < names.size())
        for (auto& m : names[o]) list.push_back(m);
      if (o < objects.size())
        for (auto& m : objects[o]) list.push_back(m->name());
      lists.push_back(list);
    }
    return lists;
  };
  if (!config.output_metrics.empty() || !config.output_metric_objects.empty())
    c["metrics"] = per_output(config.output_metrics.list(), config.output_metric_objects.list());
  if (!config.output_weighted_metrics.empty())
    c["weighted_metrics"] = per_output(config.output_weighted_metrics.list(), {});
  c["run_eagerly"] = config.run_eagerly;
  c["steps_per_execution"] = config.steps_per_execution;
  c["jit_compile"] = "auto";
  return c;
}

CompileConfig compile_config_from_json(const json& cc) {
  LS_CHECK(cc.is_object(), "compile_config must be an object, got ", cc.dump());
  CompileConfig c;
  if (cc.contains("optimizer") && !cc["optimizer"].is_null())
    c.optimizer = optimizer_from_config(cc["optimizer"]);
  // Several outputs: a list of losses, of loss weights, of metric lists (Keras's list forms).
  if (cc.contains("loss") && cc["loss"].is_array()) {
    std::vector<LossPtr> losses;
    for (auto& l : cc["loss"]) losses.push_back(loss_from_config(l));
    c.losses = std::move(losses);
  } else if (cc.contains("loss") && !cc["loss"].is_null()) {
    c.loss = loss_from_config(cc["loss"]);
  }
  if (cc.contains("loss_weights") && cc["loss_weights"].is_array()) {
    std::vector<double> weights;
    for (auto& w : cc["loss_weights"]) {
      LS_CHECK(w.is_number(), "compile_config: loss_weights must be numbers, got ", w.dump());
      weights.push_back(w.get<double>());
    }
    c.loss_weights = std::move(weights);
  } else {
    require_default(cc, "loss_weights", nullptr, "compile_config");
  }
  auto metric_name = [](const json& m) {
    if (m.is_string()) return m.get<std::string>();
    LS_CHECK(m.is_object() && m.contains("config") && m["config"].contains("name"),
             "compile_config: metric ", m.dump(), " is neither a name nor a Keras metric");
    return m["config"]["name"].get<std::string>();
  };
  auto lists = [&](const json& v) {
    std::vector<std::vector<std::string>> out;
    for (auto& list : v) {
      out.emplace_back();
      if (list.is_array())
        for (auto& m : list) out.back().push_back(metric_name(m));
      else if (!list.is_null())
        out.back().push_back(metric_name(list));
    }
    return out;
  };
  const bool nested_metrics = cc.contains("metrics") && cc["metrics"].is_array() &&
                              !cc["metrics"].empty() && cc["metrics"][0].is_array();
  if (nested_metrics) c.output_metrics = lists(cc["metrics"]);
  if (cc.contains("weighted_metrics") && cc["weighted_metrics"].is_array() &&
      !cc["weighted_metrics"].empty() && cc["weighted_metrics"][0].is_array())
    c.output_weighted_metrics = lists(cc["weighted_metrics"]);
  else
    require_default(cc, "weighted_metrics", nullptr, "compile_config");
  if (!nested_metrics && cc.contains("metrics") && cc["metrics"].is_array())
    for (auto& m : cc["metrics"]) c.metrics.push_back(metric_name(m));
  c.run_eagerly = flag(cc, "run_eagerly", false);
  if (cc.contains("steps_per_execution") && cc["steps_per_execution"].is_number_integer())
    c.steps_per_execution = cc["steps_per_execution"].get<int>();
  return c;
}

}  // namespace lockstep::train
