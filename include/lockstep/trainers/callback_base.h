// The Callback base class (Keras hooks), the Logs they get, and History, what fit() returns:
// the interface fit, evaluate and predict call. The callbacks themselves (EarlyStopping,
// ModelCheckpoint, TensorBoard, ...): lockstep/callbacks/callback.h.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
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
  /// fit() was asked to stop by SIGTERM or SIGINT (lockstep/trainers/preemption.h) after
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

}  // namespace lockstep
