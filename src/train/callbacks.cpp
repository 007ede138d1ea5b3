// Built-in callbacks with Keras semantics: EarlyStopping, LambdaCallback, TerminateOnNaN.
#include <cmath>
#include <cstdio>
#include <limits>

#include "lockstep/train/callback.h"
#include "lockstep/train/model.h"

namespace lockstep {

namespace {

class EarlyStoppingCb : public EarlyStoppingCallback {
 public:
  EarlyStoppingCb(std::string monitor, int patience, double min_delta, bool restore)
      : monitor_(std::move(monitor)),
        patience_(patience),
        min_delta_(std::fabs(min_delta)),
        restore_(restore) {
    // mode "auto": accuracy-like metrics are maximised, everything else minimised.
    std::string m = monitor_.rfind("val_", 0) == 0 ? monitor_.substr(4) : monitor_;
    maximise_ = m.find("acc") != std::string::npos || m.find("auc") != std::string::npos ||
                m.find("precision") != std::string::npos || m.find("recall") != std::string::npos;
    if (m.find("loss") != std::string::npos) maximise_ = false;
  }

  void on_train_begin(const Logs&) override {
    wait_ = 0;
    stopped_epoch_ = 0;
    has_best_ = false;
    best_weights_.clear();
    best_epoch_ = 0;
  }

  void on_epoch_end(int epoch, const Logs& logs) override {
    auto it = logs.find(monitor_);
    if (it == logs.end()) {
      if (!warned_) {
        std::string avail;
        for (auto& [k, v] : logs) avail += (avail.empty() ? "" : ",") + k;
        std::fprintf(stderr,
                     "Warning: Early stopping conditioned on metric `%s` which is not available. "
                     "Available metrics are: %s\n",
                     monitor_.c_str(), avail.c_str());
        warned_ = true;
      }
      return;
    }
    double current = it->second;
    if (restore_ && best_weights_.empty() && model) {
      best_weights_ = snapshot();  // the current weights are the best seen so far
      best_epoch_ = epoch;
    }
    ++wait_;
    if (is_improvement(current)) {
      best_ = current;
      has_best_ = true;
      best_epoch_ = epoch;
      if (restore_ && model) best_weights_ = snapshot();
      wait_ = 0;
      return;
    }
    if (wait_ >= patience_ && epoch > 0) {
      stopped_epoch_ = epoch;
      if (model) model->stop_training = true;
    }
  }

  void on_train_end(const Logs&) override {
    if (restore_ && model && !best_weights_.empty()) model->set_weights(best_weights_);
  }

  int stopped_epoch() const override { return stopped_epoch_; }
  int best_epoch() const override { return best_epoch_; }
  double best() const override { return best_; }
  int wait() const override { return wait_; }

 private:
  bool is_improvement(double v) const {
    if (!has_best_) return !std::isnan(v);
    return maximise_ ? v - min_delta_ > best_ : v + min_delta_ < best_;
  }
  std::vector<Tensor> snapshot() const { return model->get_weights(); }  // copies

  std::string monitor_;
  int patience_;
  double min_delta_;
  bool restore_, maximise_ = false, has_best_ = false, warned_ = false;
  double best_ = 0;
  int wait_ = 0, stopped_epoch_ = 0, best_epoch_ = 0;
  std::vector<Tensor> best_weights_;
};

class LambdaCb : public Callback {
 public:
  LambdaCb(std::function<void(int, const Logs&)> epoch_end,
           std::function<void(int, const Logs&)> batch_end)
      : epoch_end_(std::move(epoch_end)), batch_end_(std::move(batch_end)) {}
  void on_epoch_end(int epoch, const Logs& logs) override {
    if (epoch_end_) epoch_end_(epoch, logs);
  }
  void on_train_batch_end(int batch, const Logs& logs) override {
    if (batch_end_) batch_end_(batch, logs);
  }

 private:
  std::function<void(int, const Logs&)> epoch_end_, batch_end_;
};

class TerminateOnNaNCb : public Callback {
 public:
  void on_train_batch_end(int batch, const Logs& logs) override {
    auto it = logs.find("loss");
    if (it == logs.end() || std::isfinite(it->second)) return;
    std::printf("Batch %d: Invalid loss, terminating training\n", batch);
    std::fflush(stdout);
    if (model) model->stop_training = true;
  }
};

}  // namespace

namespace callbacks {

CallbackPtr EarlyStopping(const std::string& monitor, int patience, double min_delta,
                          bool restore_best_weights) {
  LS_CHECK(patience >= 0, "EarlyStopping: patience must be >= 0, got ", patience);
  return std::make_shared<EarlyStoppingCb>(monitor, patience, min_delta, restore_best_weights);
}

CallbackPtr LambdaCallback(std::function<void(int, const Logs&)> on_epoch_end,
                           std::function<void(int, const Logs&)> on_batch_end) {
  return std::make_shared<LambdaCb>(std::move(on_epoch_end), std::move(on_batch_end));
}

CallbackPtr TerminateOnNaN() { return std::make_shared<TerminateOnNaNCb>(); }

}  // namespace callbacks

}  // namespace lockstep
