// keras.callbacks.TensorBoard: the epoch (and every-N-batch) logs, the learning rate, weight
// histograms and the model as event files in log_dir/train and log_dir/validation, with
// Keras 3's tag names.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "distribute/internal/strategy_runtime.h"
#include "lockstep/callbacks/callback.h"
#include "lockstep/callbacks/summary_writer.h"
#include "lockstep/trainers/model.h"

namespace lockstep {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool is_validation(const std::string& key) { return key.rfind("val_", 0) == 0; }

class TensorBoardCb : public Callback {
 public:
  explicit TensorBoardCb(TensorBoardOptions o) : o_(std::move(o)) {
    LS_CHECK(!o_.log_dir.empty(), "TensorBoard: log_dir is empty");
    LS_CHECK(o_.histogram_freq >= 0, "TensorBoard: histogram_freq must be >= 0, got ",
             o_.histogram_freq);
    if (auto* s = std::get_if<std::string>(&o_.update_freq)) {
      LS_CHECK(*s == "epoch" || *s == "batch", "TensorBoard: update_freq must be \"epoch\", ",
               "\"batch\" or a number of batches, got \"", *s, "\"");
      batch_every_ = *s == "batch" ? 1 : 0;
    } else {
      batch_every_ = std::get<int64_t>(o_.update_freq);
      LS_CHECK(batch_every_ >= 1, "TensorBoard: update_freq must be >= 1 batches, got ",
               batch_every_);
    }
  }

  void on_train_begin(const Logs&) override {
    LS_CHECK(model, "TensorBoard: not attached to a model (pass it in FitConfig::callbacks)");
    const auto& opt = model->compile_config().optimizer;
    train_step_ = opt ? int64_t(opt->iterations()->value.item()) : 0;
    last_batch_write_ = last_batch_end_step_ = train_step_;
    enabled_ = !model->strategy() || model->strategy()->is_chief();  // only the chief writes
    if (!enabled_) return;
    train_ = std::make_unique<tensorboard::SummaryWriter>(run_dir("train"));
    if (o_.write_graph) write_model();
    train_->flush();
  }

  void on_epoch_begin(int, const Logs&) override {
    epoch_start_ = Clock::now();
    epoch_first_step_ = train_step_;
  }

  void on_train_batch_begin(int, const Logs&) override {
    if (train_step_ == last_batch_end_step_) batch_start_ = Clock::now();
    ++train_step_;
  }

  void on_train_batch_end(int, const Logs& logs) override {
    const int64_t steps = train_step_ - last_batch_end_step_;
    const double seconds = seconds_since(batch_start_);
    last_batch_end_step_ = train_step_;
    if (!enabled_ || batch_every_ == 0) return;
    if (train_step_ / batch_every_ == last_batch_write_ / batch_every_) return;
    last_batch_write_ = train_step_;
    for (const auto& [name, value] : logs) train_->scalar("batch_" + name, value, train_step_);
    if (o_.write_steps_per_second && seconds > 0)
      train_->scalar("batch_steps_per_second", double(steps) / seconds, train_step_);
  }

  void on_epoch_end(int epoch, const Logs& logs) override {
    if (!enabled_) return;
    Logs train_logs, val_logs;
    for (const auto& [name, value] : logs)
      (is_validation(name) ? val_logs[name.substr(4)] : train_logs[name]) = value;
    const auto& opt = model->compile_config().optimizer;
    if (opt && !train_logs.count("learning_rate"))
      train_logs["learning_rate"] = opt->learning_rate();
    const double seconds = seconds_since(epoch_start_);
    if (o_.write_steps_per_second && seconds > 0)
      train_logs["steps_per_second"] = double(train_step_ - epoch_first_step_) / seconds;
    for (const auto& [name, value] : train_logs) train_->scalar("epoch_" + name, value, epoch);
    if (!val_logs.empty()) {
      if (!validation_)
        validation_ = std::make_unique<tensorboard::SummaryWriter>(run_dir("validation"));
      for (const auto& [name, value] : val_logs) {
        validation_->scalar("epoch_" + name, value, epoch);
        validation_->scalar("evaluation_" + name + "_vs_iterations", value, train_step_);
      }
      validation_->flush();
    }
    if (o_.histogram_freq > 0 && epoch % o_.histogram_freq == 0) write_histograms(epoch);
    train_->flush();
  }

  void on_train_end(const Logs&) override {
    if (train_) train_->flush();
    if (validation_) validation_->flush();
    train_.reset();
    validation_.reset();
  }

 private:
  std::string run_dir(const char* run) const {
    return (std::filesystem::path(o_.log_dir) / run).string();
  }

  void write_model() {
    train_->keras_model("keras", model->to_json(), 0);
    std::ostringstream summary;
    model->Network::summary(summary);  // Keras's table (no train step compiled for it)
    std::string text, line;            // a Markdown code block: four spaces before each line
    for (std::istringstream in(summary.str()); std::getline(in, line);)
      text += "    " + line + "\n";
    train_->text("model_summary", text, 0);
  }

  void write_histograms(int epoch) {
    for (const auto& layer : model->layers())
      for (const auto& w : layer->weights())
        train_->histogram(w->name + "/histogram", w->value.to_vector(), epoch);
  }

  TensorBoardOptions o_;
  int64_t batch_every_ = 0;  // 0: epoch only
  bool enabled_ = false;
  std::unique_ptr<tensorboard::SummaryWriter> train_, validation_;
  int64_t train_step_ = 0, last_batch_write_ = 0, last_batch_end_step_ = 0, epoch_first_step_ = 0;
  Clock::time_point epoch_start_ = Clock::now(), batch_start_ = Clock::now();
};

}  // namespace

namespace callbacks {

CallbackPtr TensorBoard(TensorBoardOptions options) {
  return std::make_shared<TensorBoardCb>(std::move(options));
}

}  // namespace callbacks
}  // namespace lockstep
