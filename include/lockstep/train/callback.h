// Callbacks (Keras hooks) and History. Logs are name -> value maps ("loss", "accuracy",
// "val_loss", ...).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace lockstep {

class Model;
/// A step's or an epoch's logs: name -> value ("loss", "accuracy", "val_loss", ...).
using Logs = std::map<std::string, double>;

/// A training callback (keras.callbacks.Callback): override the hooks you need; `model` points
/// at the model being trained. Epochs and batches count from 0.
class Callback {
 public:
  virtual ~Callback() = default;
  void set_model(Model* m) { model = m; }  ///< fit/evaluate/predict set it before the first hook
  virtual void on_train_begin(const Logs&) {}             ///< fit starts
  virtual void on_train_end(const Logs&) {}               ///< fit ends (the last epoch's logs)
  virtual void on_epoch_begin(int epoch, const Logs&) {}  ///< an epoch starts
  /// An epoch ends: its logs (training and validation; set model->stop_training to stop).
  virtual void on_epoch_end(int epoch, const Logs&) {}
  virtual void on_train_batch_begin(int batch, const Logs&) {}  ///< a training step starts
  /// A training step ended: the running loss and metrics of the epoch so far.
  virtual void on_train_batch_end(int batch, const Logs&) {}
  /// evaluate() (and fit's validation, which passes fit's callbacks): Keras's on_test_* hooks.
  /// The batch logs hold the running metrics; on_test_end gets the final ones.
  virtual void on_test_begin(const Logs&) {}
  virtual void on_test_end(const Logs&) {}  ///< evaluation ends: the final metrics
  virtual void on_test_batch_begin(int batch, const Logs&) {}  ///< an evaluation step starts
  virtual void on_test_batch_end(int batch, const Logs&) {}    ///< ... and ends (running metrics)
  /// predict(): Keras's on_predict_* hooks (the batch logs are empty).
  virtual void on_predict_begin(const Logs&) {}
  virtual void on_predict_end(const Logs&) {}                     ///< predict() ends
  virtual void on_predict_batch_begin(int batch, const Logs&) {}  ///< a predict step starts
  virtual void on_predict_batch_end(int batch, const Logs&) {}    ///< ... and ends
  /// Entries this callback adds to an epoch's logs (Keras callbacks write into the logs dict:
  /// ReduceLROnPlateau and LearningRateScheduler add "learning_rate"). fit() asks every callback
  /// before the History records the epoch and before any on_epoch_end.
  virtual void add_epoch_logs(int epoch, Logs& logs) {}
  /// fit() was asked to stop by SIGTERM or SIGINT (lockstep/train/preemption.h) after
  /// `steps_done` steps of `epoch`, and throws TrainingPreempted once every callback has run
  /// this hook. Returns what it saved for a restart ("" when nothing): BackupAndRestore writes
  /// its backup here, at that step.
  virtual std::string on_train_preempted(int epoch, int64_t steps_done) { return ""; }
  Model* model = nullptr;  ///< the model this callback serves (Keras's self.model)
};
/// A shared callback (what the factories return and FitConfig::callbacks holds).
using CallbackPtr = std::shared_ptr<Callback>;

/// What fit() returns: per-epoch logs.
struct History {
  /// Each log's value per epoch: history["loss"][e], history["val_accuracy"][e] (Keras's).
  std::map<std::string, std::vector<double>> history;
  std::vector<int> epoch;        ///< the epochs run (0-based; from initial_epoch)
  double compile_seconds = 0;    ///< time compiling programs during this fit
  double train_seconds = 0;      ///< time in fit's epochs (excludes compile)
  double images_per_second = 0;  ///< training samples / train_seconds
  int64_t samples = 0;           ///< training samples this process's replicas stepped on
  bool stopped_on_nan = false;   ///< training stopped because the loss became NaN or inf
  std::string stop_reason;       ///< why (epoch, step, replicas), when stopped_on_nan
  /// Time the training steps waited for their input (fetching the next batch and copying it
  /// into the step's buffers), in total and as a fraction of train_seconds. Also in the epoch
  /// logs as "input_wait_seconds" / "input_wait_fraction".
  ///@{
  double input_wait_seconds = 0;
  double input_wait_fraction = 0;
  ///@}
  /// Replicated training: seconds the gradient all-reduces were in flight (replica 0, summed
  /// over buckets) and the part of it the step spent blocked waiting; hidden fraction =
  /// 1 - allreduce_wait_seconds / allreduce_seconds.
  ///@{
  double allreduce_seconds = 0;
  double allreduce_wait_seconds = 0;
  ///@}
  int replicas = 1;  ///< replicas in sync
  int workers = 1;   ///< worker processes
  /// Thread replicas the train step ran as (lockstep/core/config.h set_thread_replicas; 1: one
  /// program splitting each kernel over the threads). Not replicas in sync: the step is one
  /// replica's, the batch split over the cores.
  int thread_replicas = 1;
};

/// EarlyStopping's state (Keras attributes stopped_epoch, best_epoch, best); wait counts
/// epochs without improvement. callbacks::EarlyStopping returns one of these.
class EarlyStoppingCallback : public Callback {
 public:
  virtual int stopped_epoch() const = 0;  ///< 0 when training was not stopped
  virtual int best_epoch() const = 0;     ///< the epoch with the best monitored value
  virtual double best() const = 0;        ///< that value
  virtual int wait() const = 0;           ///< epochs since the last improvement
};

/// keras.callbacks.ModelCheckpoint's options (Keras's names and defaults).
struct ModelCheckpointOptions {
  std::string monitor = "val_loss";  ///< the log compared for save_best_only
  int verbose = 0;  ///< 1: a line per save decision ("Epoch 3: val_loss improved from ...")
  /// Save only when `monitor` improved on the best value so far (strictly; the first value
  /// always improves unless initial_value_threshold is set). A missing monitor: save anyway.
  bool save_best_only = false;
  /// model.save_weights(filepath) instead of model.save(filepath).
  bool save_weights_only = false;
  /// "min", "max", or "auto": min for loss, max for accuracy / auc / precision / recall / f1
  /// / fbeta; any other name in auto mode is an error (as in Keras).
  std::string mode = "auto";
  /// "epoch": at every epoch end; N: every N training batches (counted across epochs).
  std::variant<std::string, int64_t> save_freq = std::string("epoch");
  /// The best value to beat from the start (Keras's initial_value_threshold; none by default).
  std::optional<double> initial_value_threshold;
};

/// keras.callbacks.TensorBoard's options (Keras's names and defaults; write_images,
/// profile_batch and embeddings are not supported).
struct TensorBoardOptions {
  std::string log_dir = "logs";  ///< runs go to log_dir/train and log_dir/validation
  /// Every N epochs, a histogram of each weight ("<layer>/<weight>/histogram"); 0: none.
  int histogram_freq = 0;
  /// The model at the start of training: its Keras config under the tag "keras" (TensorBoard's
  /// Graphs dashboard) and model.summary() as text ("model_summary").
  bool write_graph = true;
  bool write_steps_per_second = false;  ///< "epoch_steps_per_second" / "batch_steps_per_second"
  /// "epoch": scalars per epoch only; "batch" or N: also "batch_<log>" every N training steps
  /// (step = the optimizer's iteration count).
  std::variant<std::string, int64_t> update_freq = std::string("epoch");
};

/// keras.callbacks.EarlyStopping's options (Keras's names and defaults).
struct EarlyStoppingOptions {
  std::string monitor = "val_loss";  ///< the log watched
  double min_delta = 0.0;            ///< a change smaller than |min_delta| is no improvement
  int patience = 0;                  ///< epochs without improvement before stopping
  int verbose = 0;                   ///< 1: "Epoch N: early stopping" and the restore line
  /// "min", "max", or "auto": max for accuracy, auc, precision, recall (and f1/fbeta), else min.
  std::string mode = "auto";
  /// An improvement resets the patience count only when it also beats the baseline, so training
  /// stops after `patience` epochs that never beat it.
  std::optional<double> baseline;
  bool restore_best_weights = false;  ///< at the end, the weights of the best epoch
  int start_from_epoch = 0;           ///< epochs before this one are not monitored (warm-up)
};

/// Every hook of Callback as an optional function (keras.callbacks.LambdaCallback; Keras's
/// on_batch_begin/end are on_train_batch_begin/end).
struct LambdaHooks {
  ///@{
  /// The Callback hook of the same name; empty ones are not called.
  std::function<void(int, const Logs&)> on_epoch_begin, on_epoch_end;
  std::function<void(const Logs&)> on_train_begin, on_train_end;
  std::function<void(int, const Logs&)> on_train_batch_begin, on_train_batch_end;
  std::function<void(const Logs&)> on_test_begin, on_test_end;
  std::function<void(int, const Logs&)> on_test_batch_begin, on_test_batch_end;
  std::function<void(const Logs&)> on_predict_begin, on_predict_end;
  std::function<void(int, const Logs&)> on_predict_batch_begin, on_predict_batch_end;
  ///@}
};

namespace callbacks {
/// keras.callbacks.EarlyStopping with every option (EarlyStoppingOptions).
CallbackPtr EarlyStopping(EarlyStoppingOptions options);
/// keras.callbacks.LambdaCallback with any of the hooks.
CallbackPtr LambdaCallback(LambdaHooks hooks);
/// Stops when `monitor` has not improved by min_delta for `patience` epochs.
CallbackPtr EarlyStopping(const std::string& monitor = "val_loss", int patience = 0,
                          double min_delta = 0.0, bool restore_best_weights = false);
/// Calls the given functions (any may be empty).
CallbackPtr LambdaCallback(std::function<void(int, const Logs&)> on_epoch_end,
                           std::function<void(int, const Logs&)> on_batch_end = {});
/// Stops training (with a message) when the loss becomes NaN or inf. fit() also checks.
CallbackPtr TerminateOnNaN();
/// Fault tolerance (keras.callbacks.BackupAndRestore): saves weights, optimizer state and the
/// position (epoch, step) to backup_dir/checkpoint.lsckpt at every epoch end, and every
/// save_freq steps when save_freq is a number. A fit() that starts with a backup present
/// restores it and resumes where it stopped (same shuffle order, dataset position and
/// dropout stream), so an interrupted and resumed run ends with the same weights as an
/// uninterrupted one. The backup is deleted when fit() completes (delete_checkpoint). Under a
/// multi-worker strategy only the chief writes; every worker reads (backup_dir must be shared).
/// With install_preemption_handler() (lockstep/train/preemption.h), a SIGTERM or SIGINT also
/// writes the backup after the step that is running, mid-epoch, before fit throws
/// TrainingPreempted.
CallbackPtr BackupAndRestore(const std::string& backup_dir,
                             std::variant<std::string, int64_t> save_freq = std::string("epoch"),
                             bool delete_checkpoint = true);
/// keras.callbacks.ReduceLROnPlateau: when `monitor` has not improved (by more than min_delta;
/// mode "min", "max", or "auto" = max when the name contains "acc") for `patience` epochs,
/// multiplies the optimizer's rate by factor (< 1), not below min_lr, then waits `cooldown`
/// epochs before counting again. Adds "learning_rate" (the epoch's rate) to the epoch logs.
/// The optimizer must have a settable rate (no schedule).
CallbackPtr ReduceLROnPlateau(const std::string& monitor = "val_loss", double factor = 0.1,
                              int patience = 10, int verbose = 0, const std::string& mode = "auto",
                              double min_delta = 1e-4, int cooldown = 0, double min_lr = 0.0);
/// keras.callbacks.LearningRateScheduler: at each epoch's start sets the optimizer's rate to
/// schedule(epoch, current_rate) (epoch counts from 0). Adds "learning_rate" to the epoch logs.
CallbackPtr LearningRateScheduler(std::function<double(int epoch, double learning_rate)> schedule,
                                  int verbose = 0);
/// keras.callbacks.CSVLogger: one row per epoch, columns "epoch" then the log keys sorted (with
/// "val_" twins, written "NA", when the first epoch has no validation keys), values separated
/// by `separator`. append: keep an existing file's rows (and write the header only when the
/// file is empty).
CallbackPtr CSVLogger(const std::string& filename, const std::string& separator = ",",
                      bool append = false);
/// keras.callbacks.ModelCheckpoint: saves the model (model.save, a .keras file with the
/// optimizer) or its weights (save_weights_only: .weights.h5, or a Lockstep .lsckpt) to
/// `filepath` formatted as Python's str.format with epoch (from 1), batch (from 1, batch-level
/// saves) and every log value: "ckpt/{epoch:02d}-{val_loss:.2f}.keras". Like Keras 3, filepath
/// must end in .keras (full model) or .weights.h5 (weights only). Writes are atomic (temporary
/// file + rename) and only the chief writes under a multi-worker strategy; the folder is
/// created when missing.
CallbackPtr ModelCheckpoint(const std::string& filepath, ModelCheckpointOptions options = {});
/// keras.callbacks.TensorBoard: event files (lockstep/train/summary_writer.h) that
/// `tensorboard --logdir log_dir` reads. Per epoch, in log_dir/train: "epoch_<log>" for every
/// training log (epoch_loss, epoch_accuracy, ...) plus "epoch_learning_rate"; in
/// log_dir/validation: "epoch_<log>" for each val_<log> (val_ dropped) and
/// "evaluation_<log>_vs_iterations" at the optimizer's step; step = the epoch (from 0). Only
/// the chief writes under a multi-worker strategy.
CallbackPtr TensorBoard(TensorBoardOptions options = {});
}  // namespace callbacks

}  // namespace lockstep
