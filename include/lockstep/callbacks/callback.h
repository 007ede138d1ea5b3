// The callbacks (keras.callbacks): EarlyStopping, ModelCheckpoint, TensorBoard, CSVLogger, ...
// The Callback base class they derive from, Logs and History: lockstep/trainers/callback_base.h.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "lockstep/trainers/callback_base.h"

namespace lockstep {

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
/// With install_preemption_handler() (lockstep/trainers/preemption.h), a SIGTERM or SIGINT also
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
/// keras.callbacks.TensorBoard: event files (lockstep/callbacks/summary_writer.h) that
/// `tensorboard --logdir log_dir` reads. Per epoch, in log_dir/train: "epoch_<log>" for every
/// training log (epoch_loss, epoch_accuracy, ...) plus "epoch_learning_rate"; in
/// log_dir/validation: "epoch_<log>" for each val_<log> (val_ dropped) and
/// "evaluation_<log>_vs_iterations" at the optimizer's step; step = the epoch (from 0). Only
/// the chief writes under a multi-worker strategy.
CallbackPtr TensorBoard(TensorBoardOptions options = {});
}  // namespace callbacks

}  // namespace lockstep
