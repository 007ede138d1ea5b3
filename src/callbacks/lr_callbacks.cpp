// Callbacks that change the optimizer's live learning rate (Keras semantics):
// ReduceLROnPlateau and LearningRateScheduler.
#include <cmath>
#include <cstdio>
#include <limits>

#include "lockstep/callbacks/callback.h"
#include "lockstep/trainers/model.h"

namespace lockstep {

namespace {

Optimizer& optimizer_of(Model* model, const char* callback) {
  LS_CHECK(model, callback, ": not attached to a model (pass it in FitConfig::callbacks)");
  const OptimizerPtr& opt = model->compile_config().optimizer;
  LS_CHECK(opt, callback, ": the model has no optimizer (compile() it with one)");
  return *opt;
}

class ReduceLROnPlateauCb : public Callback {
 public:
  ReduceLROnPlateauCb(std::string monitor, double factor, int patience, int verbose,
                      std::string mode, double min_delta, int cooldown, double min_lr)
      : monitor_(std::move(monitor)),
        factor_(factor),
        patience_(patience),
        verbose_(verbose),
        min_delta_(min_delta),
        cooldown_(cooldown),
        min_lr_(min_lr) {
    if (mode != "auto" && mode != "min" && mode != "max") {
      std::fprintf(stderr,
                   "Warning: ReduceLROnPlateau mode %s is unknown, fallback to auto mode.\n",
                   mode.c_str());
      mode = "auto";
    }
    minimise_ = mode == "min" || (mode == "auto" && monitor_.find("acc") == std::string::npos);
  }

  void on_train_begin(const Logs&) override {
    best_ = minimise_ ? std::numeric_limits<double>::infinity()
                      : -std::numeric_limits<double>::infinity();
    cooldown_counter_ = 0;
    wait_ = 0;
  }

  void add_epoch_logs(int, Logs& logs) override {
    logs["learning_rate"] = optimizer_of(model, "ReduceLROnPlateau").learning_rate();
  }

  // keras.callbacks.ReduceLROnPlateau.on_epoch_end, step for step.
  void on_epoch_end(int epoch, const Logs& logs) override {
    auto it = logs.find(monitor_);
    if (it == logs.end()) {
      std::fprintf(stderr,
                   "Warning: Learning rate reduction is conditioned on metric `%s` which is not "
                   "available. Available metrics are: %s\n",
                   monitor_.c_str(), available(logs).c_str());
      return;
    }
    const double current = it->second;
    if (cooldown_counter_ > 0) {
      --cooldown_counter_;
      wait_ = 0;
    }
    if (improved(current)) {
      best_ = current;
      wait_ = 0;
    } else if (cooldown_counter_ == 0 && ++wait_ >= patience_) {
      reduce(epoch);
    }
  }

 private:
  bool improved(double current) const {
    return minimise_ ? current < best_ - min_delta_ : current > best_ + min_delta_;
  }

  void reduce(int epoch) {
    Optimizer& opt = optimizer_of(model, "ReduceLROnPlateau");
    const double old_rate = opt.learning_rate();
    if (!(old_rate > double(float(min_lr_)))) return;
    const double new_rate = std::max(old_rate * factor_, min_lr_);
    opt.set_learning_rate(new_rate);
    if (verbose_ > 0)
      std::printf("\nEpoch %d: ReduceLROnPlateau reducing learning rate to %g.\n", epoch + 1,
                  new_rate);
    cooldown_counter_ = cooldown_;
    wait_ = 0;
  }

  static std::string available(const Logs& logs) {
    std::string names;
    for (auto& [name, value] : logs) names += (names.empty() ? "" : ",") + name;
    return names;
  }

  std::string monitor_;
  double factor_;
  int patience_, verbose_;
  double min_delta_;
  int cooldown_;
  double min_lr_;
  bool minimise_ = true;
  double best_ = 0;
  int cooldown_counter_ = 0, wait_ = 0;
};

class LearningRateSchedulerCb : public Callback {
 public:
  LearningRateSchedulerCb(std::function<double(int, double)> schedule, int verbose)
      : schedule_(std::move(schedule)), verbose_(verbose) {}

  void on_epoch_begin(int epoch, const Logs&) override {
    Optimizer& opt = optimizer_of(model, "LearningRateScheduler");
    const double rate = schedule_(epoch, opt.learning_rate());
    LS_CHECK(std::isfinite(rate), "LearningRateScheduler: the schedule returned ", rate,
             " for epoch ", epoch, "; it must return a finite rate");
    opt.set_learning_rate(rate);
    if (verbose_ > 0)
      std::printf("\nEpoch %d: LearningRateScheduler setting learning rate to %g.\n", epoch + 1,
                  rate);
  }

  void add_epoch_logs(int, Logs& logs) override {
    logs["learning_rate"] = optimizer_of(model, "LearningRateScheduler").learning_rate();
  }

 private:
  std::function<double(int, double)> schedule_;
  int verbose_;
};

}  // namespace

namespace callbacks {

CallbackPtr ReduceLROnPlateau(const std::string& monitor, double factor, int patience, int verbose,
                              const std::string& mode, double min_delta, int cooldown,
                              double min_lr) {
  LS_CHECK(factor < 1.0, "ReduceLROnPlateau does not support a factor >= 1.0, got ", factor);
  LS_CHECK(patience >= 0 && cooldown >= 0, "ReduceLROnPlateau: patience and cooldown must be >= 0");
  return std::make_shared<ReduceLROnPlateauCb>(monitor, factor, patience, verbose, mode, min_delta,
                                               cooldown, min_lr);
}

CallbackPtr LearningRateScheduler(std::function<double(int, double)> schedule, int verbose) {
  LS_CHECK(bool(schedule), "LearningRateScheduler: the schedule function is empty");
  return std::make_shared<LearningRateSchedulerCb>(std::move(schedule), verbose);
}

}  // namespace callbacks

}  // namespace lockstep
