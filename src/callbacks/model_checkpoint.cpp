// keras.callbacks.ModelCheckpoint: saves the model or its weights at epoch ends or every N
// batches, optionally only when the monitored value improved.
#include <cstdio>
#include <filesystem>

#include "callbacks/python_format.h"
#include "distribute/internal/strategy_runtime.h"
#include "lockstep/callbacks/callback.h"
#include "lockstep/core/error.h"
#include "lockstep/trainers/model.h"

namespace lockstep {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Keras's MonitorCallback direction for mode "auto": from the metric's name.
bool maximise_for(const std::string& monitor) {
  const std::string m = monitor.rfind("val_", 0) == 0 ? monitor.substr(4) : monitor;
  if (m == "loss" || m.find("loss") != std::string::npos || m.find("error") != std::string::npos ||
      m.find("crossentropy") != std::string::npos || m == "mse" || m == "mae" ||
      m == "kl_divergence")
    return false;
  for (const char* up : {"acc", "auc", "precision", "recall", "f1_score", "fbeta_score"})
    if (m.find(up) != std::string::npos) return true;
  LS_FAIL("ModelCheckpoint callback received monitor=", monitor,
          ", but Keras isn't able to automatically determine whether that metric should be "
          "maximized or minimized. Pass `mode='max'` in order to monitor based on the highest "
          "metric value, or pass `mode='min'` in order to use the lowest value.");
}

class ModelCheckpointCb : public Callback {
 public:
  ModelCheckpointCb(std::string filepath, ModelCheckpointOptions o)
      : filepath_(std::move(filepath)), o_(std::move(o)) {
    if (o_.initial_value_threshold) best_ = *o_.initial_value_threshold;
    if (auto* n = std::get_if<int64_t>(&o_.save_freq)) every_ = *n;
  }

  void on_train_begin(const Logs&) override {
    last_batch_seen_ = -1;
    check_pattern();
  }
  void on_epoch_begin(int epoch, const Logs&) override { epoch_ = epoch; }

  void on_train_batch_end(int batch, const Logs& logs) override {
    if (every_ <= 0) return;
    // Keras's _should_save_on_batch: batches counted across epochs (a batch index that does
    // not grow means a new epoch began).
    batches_since_save_ += batch <= last_batch_seen_ ? batch + 1 : batch - last_batch_seen_;
    last_batch_seen_ = batch;
    if (batches_since_save_ < every_) return;
    batches_since_save_ = 0;
    save(epoch_, batch, logs);
  }

  void on_epoch_end(int epoch, const Logs& logs) override {
    if (every_ <= 0) save(epoch, -1, logs);
  }

 private:
  bool chief() const { return !model->strategy() || model->strategy()->is_chief(); }

  std::string file_path(int epoch, int batch, const Logs& logs) const {
    std::map<std::string, train::FormatValue> values;
    for (auto& [k, v] : logs) values[k] = v;
    values["epoch"] = int64_t(epoch) + 1;
    if (batch >= 0 && !logs.count("batch")) values["batch"] = int64_t(batch) + 1;
    try {
      return train::python_format(filepath_, values);
    } catch (const train::MissingFormatKey& e) {
      std::string keys;
      for (auto& [k, v] : values) keys += (keys.empty() ? "" : ", ") + k;
      LS_FAIL("Failed to format this callback filepath: \"", filepath_, "\". Reason: '", e.key,
              "' (available: ", keys, ")");
    }
  }

  // The pattern formatted once before training, with the log keys the model will report (its
  // metrics, their val_ twins, learning_rate): an unknown key, a spec Python refuses or a name
  // too long for the filesystem is an error now, not after the first epoch's work.
  void check_pattern() const {
    if (!model) return;
    Logs sample = {{"loss", 0.0}, {"val_loss", 0.0}, {"learning_rate", 0.0}};
    for (const auto& name : model->metric_log_names())
      sample[name] = 0.0, sample["val_" + name] = 0.0;
    const std::string path = file_path(0, every_ > 0 ? 0 : -1, sample);
    LS_CHECK(path.size() < 4096, "ModelCheckpoint: the filepath pattern \"",
             filepath_.substr(0, 200), "\" makes a path of ", path.size(), " bytes (at most 4095)");
    for (const auto& part : std::filesystem::path(path))
      LS_CHECK(part.native().size() <= 255, "ModelCheckpoint: the filepath pattern \"",
               filepath_.substr(0, 200), "\" makes a file or folder name of ", part.native().size(),
               " bytes (at most 255)");
  }

  bool improved(double current) {
    if (!maximise_) maximise_ = o_.mode == "max" || (o_.mode == "auto" && maximise_for(o_.monitor));
    if (!best_) return true;
    return *maximise_ ? current > *best_ : current < *best_;
  }

  // Keras's _should_save_model (with its messages when verbose).
  bool should_save(int epoch, const Logs& logs, const std::string& path) {
    const bool talk = o_.verbose > 0 && chief();
    if (!o_.save_best_only) {
      if (talk) std::printf("\nEpoch %d: saving model to %s\n", epoch + 1, path.c_str());
      return true;
    }
    auto it = logs.find(o_.monitor);
    if (it == logs.end()) {
      if (chief())
        std::fprintf(stderr, "Warning: Can save best model only with %s available.\n",
                     o_.monitor.c_str());
      return true;
    }
    char best[64] = "None";
    if (best_) std::snprintf(best, sizeof best, "%.5f", *best_);
    if (improved(it->second)) {
      if (talk)
        std::printf("\nEpoch %d: %s improved from %s to %.5f, saving model to %s\n", epoch + 1,
                    o_.monitor.c_str(), best, it->second, path.c_str());
      best_ = it->second;
      return true;
    }
    if (talk)
      std::printf("\nEpoch %d: %s did not improve from %s\n", epoch + 1, o_.monitor.c_str(), best);
    return false;
  }

  void save(int epoch, int batch, const Logs& logs) {
    if (!model) return;
    const std::string path = file_path(epoch, batch, logs);
    if (!should_save(epoch, logs, path)) return;
    std::fflush(stdout);
    if (!chief()) return;  // Model::save / save_weights write nothing there either
    LS_CHECK(!std::filesystem::is_directory(path),
             "Please specify a non-directory filepath for ModelCheckpoint. Filepath used is an "
             "existing directory: ",
             path);
    const auto dir = std::filesystem::path(path).parent_path();
    if (!dir.empty()) std::filesystem::create_directories(dir);
    if (o_.save_weights_only)
      model->save_weights(path);
    else
      model->save(path);
    if (o_.verbose > 0)
      std::printf("\nEpoch %d: finished saving model to %s\n", epoch + 1, path.c_str());
    std::fflush(stdout);
  }

  std::string filepath_;
  ModelCheckpointOptions o_;
  int64_t every_ = 0;
  int epoch_ = 0;
  int last_batch_seen_ = -1;
  int64_t batches_since_save_ = 0;
  std::optional<double> best_;
  std::optional<bool> maximise_;
};

}  // namespace

namespace callbacks {

CallbackPtr ModelCheckpoint(const std::string& filepath, ModelCheckpointOptions o) {
  if (auto* s = std::get_if<std::string>(&o.save_freq))
    LS_CHECK(*s == "epoch", "ModelCheckpoint: Unrecognized save_freq: ", *s,
             ". Expected save_freq are 'epoch' or integer values");
  else
    LS_CHECK(std::get<int64_t>(o.save_freq) > 0, "ModelCheckpoint: save_freq must be 'epoch' or ",
             "a number of batches > 0, got ", std::get<int64_t>(o.save_freq));
  if (o.save_weights_only)
    LS_CHECK(ends_with(filepath, ".weights.h5") || ends_with(filepath, ".lsckpt"),
             "When using `save_weights_only=True` in `ModelCheckpoint`, the filepath provided "
             "must end in `.weights.h5` (Keras weights format) or `.lsckpt` (a Lockstep "
             "checkpoint). Received: filepath=",
             filepath);
  else
    LS_CHECK(ends_with(filepath, ".keras"),
             "The filepath provided must end in `.keras` (Keras model format). Received: "
             "filepath=",
             filepath,
             ends_with(filepath, ".h5") ? " (the legacy whole-model .h5 format is not supported; "
                                          "use .keras, or save_weights_only with .weights.h5)"
                                        : "");
  if (o.mode != "auto" && o.mode != "min" && o.mode != "max") {
    std::fprintf(stderr, "Warning: ModelCheckpoint mode '%s' is unknown, fallback to auto mode.\n",
                 o.mode.c_str());
    o.mode = "auto";
  }
  return std::make_shared<ModelCheckpointCb>(filepath, std::move(o));
}

}  // namespace callbacks

}  // namespace lockstep
