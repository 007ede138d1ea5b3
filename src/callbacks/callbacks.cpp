// Built-in callbacks with Keras semantics: EarlyStopping, LambdaCallback, TerminateOnNaN.
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

#include "lockstep/callbacks/callback.h"
#include "lockstep/trainers/model.h"

namespace lockstep {

namespace {

class EarlyStoppingCb : public EarlyStoppingCallback {
 public:
  explicit EarlyStoppingCb(EarlyStoppingOptions o)
      : o_(std::move(o)),
        monitor_(o_.monitor),
        patience_(o_.patience),
        min_delta_(std::fabs(o_.min_delta)),
        restore_(o_.restore_best_weights) {
    LS_CHECK(o_.mode == "auto" || o_.mode == "min" || o_.mode == "max",
             "EarlyStopping: mode must be \"auto\", \"min\" or \"max\", got '", o_.mode, "'");
    LS_CHECK(o_.start_from_epoch >= 0, "EarlyStopping: start_from_epoch must be >= 0, got ",
             o_.start_from_epoch);
    // mode "auto": accuracy-like metrics are maximised, everything else minimised.
    std::string m = monitor_.rfind("val_", 0) == 0 ? monitor_.substr(4) : monitor_;
    maximise_ = m.find("acc") != std::string::npos || m.find("auc") != std::string::npos ||
                m.find("precision") != std::string::npos || m.find("recall") != std::string::npos ||
                m.find("f1") != std::string::npos || m.find("fbeta") != std::string::npos;
    if (m.find("loss") != std::string::npos) maximise_ = false;
    if (o_.mode != "auto") maximise_ = o_.mode == "max";
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
    if (epoch < o_.start_from_epoch) return;  // Keras: not monitored during the warm-up
    if (restore_ && best_weights_.empty() && model) {
      best_weights_ = snapshot();  // the current weights are the best seen so far
      best_epoch_ = epoch;
    }
    ++wait_;
    if (is_improvement(current, has_best_ ? std::optional<double>(best_) : std::nullopt)) {
      best_ = current;
      has_best_ = true;
      best_epoch_ = epoch;
      if (restore_ && model) best_weights_ = snapshot();
      // With a baseline, only a value that also beats it resets the count (Keras).
      if (!o_.baseline || is_improvement(current, o_.baseline)) wait_ = 0;
      return;
    }
    if (wait_ >= patience_ && epoch > 0) {
      stopped_epoch_ = epoch;
      if (model) model->stop_training = true;
    }
  }

  void on_train_end(const Logs&) override {
    if (stopped_epoch_ > 0 && o_.verbose > 0)
      std::printf("Epoch %d: early stopping\n", stopped_epoch_ + 1);
    if (restore_ && model && !best_weights_.empty()) {
      if (o_.verbose > 0)
        std::printf("Restoring model weights from the end of the best epoch: %d.\n",
                    best_epoch_ + 1);
      model->set_weights(best_weights_);
    }
  }

  int stopped_epoch() const override { return stopped_epoch_; }
  int best_epoch() const override { return best_epoch_; }
  double best() const override { return best_; }
  int wait() const override { return wait_; }

 private:
  // Keras's _is_improvement: monitor_op(value - min_delta, reference), min_delta negated when
  // minimising; no reference: any (non-NaN) value improves.
  bool is_improvement(double v, std::optional<double> reference) const {
    if (!reference) return !std::isnan(v);
    return maximise_ ? v - min_delta_ > *reference : v + min_delta_ < *reference;
  }
  std::vector<Tensor> snapshot() const { return model->get_weights(); }  // copies

  EarlyStoppingOptions o_;
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
  explicit LambdaCb(LambdaHooks hooks) : h_(std::move(hooks)) {}
  void on_epoch_begin(int epoch, const Logs& logs) override {
    call(h_.on_epoch_begin, epoch, logs);
  }
  void on_epoch_end(int epoch, const Logs& logs) override { call(h_.on_epoch_end, epoch, logs); }
  void on_train_begin(const Logs& logs) override { call(h_.on_train_begin, logs); }
  void on_train_end(const Logs& logs) override { call(h_.on_train_end, logs); }
  void on_train_batch_begin(int batch, const Logs& logs) override {
    call(h_.on_train_batch_begin, batch, logs);
  }
  void on_train_batch_end(int batch, const Logs& logs) override {
    call(h_.on_train_batch_end, batch, logs);
  }
  void on_test_begin(const Logs& logs) override { call(h_.on_test_begin, logs); }
  void on_test_end(const Logs& logs) override { call(h_.on_test_end, logs); }
  void on_test_batch_begin(int batch, const Logs& logs) override {
    call(h_.on_test_batch_begin, batch, logs);
  }
  void on_test_batch_end(int batch, const Logs& logs) override {
    call(h_.on_test_batch_end, batch, logs);
  }
  void on_predict_begin(const Logs& logs) override { call(h_.on_predict_begin, logs); }
  void on_predict_end(const Logs& logs) override { call(h_.on_predict_end, logs); }
  void on_predict_batch_begin(int batch, const Logs& logs) override {
    call(h_.on_predict_batch_begin, batch, logs);
  }
  void on_predict_batch_end(int batch, const Logs& logs) override {
    call(h_.on_predict_batch_end, batch, logs);
  }

 private:
  template <class F, class... A>
  static void call(const F& f, const A&... args) {
    if (f) f(args...);
  }
  LambdaHooks h_;
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

CallbackPtr EarlyStopping(EarlyStoppingOptions options) {
  LS_CHECK(options.patience >= 0, "EarlyStopping: patience must be >= 0, got ", options.patience);
  return std::make_shared<EarlyStoppingCb>(std::move(options));
}

CallbackPtr EarlyStopping(const std::string& monitor, int patience, double min_delta,
                          bool restore_best_weights) {
  return EarlyStopping(EarlyStoppingOptions{.monitor = monitor,
                                            .min_delta = min_delta,
                                            .patience = patience,
                                            .restore_best_weights = restore_best_weights});
}

CallbackPtr LambdaCallback(LambdaHooks hooks) {
  return std::make_shared<LambdaCb>(std::move(hooks));
}

CallbackPtr LambdaCallback(std::function<void(int, const Logs&)> on_epoch_end,
                           std::function<void(int, const Logs&)> on_batch_end) {
  return LambdaCallback(LambdaHooks{.on_epoch_end = std::move(on_epoch_end),
                                    .on_train_batch_end = std::move(on_batch_end)});
}

CallbackPtr TerminateOnNaN() { return std::make_shared<TerminateOnNaNCb>(); }

}  // namespace callbacks

}  // namespace lockstep
