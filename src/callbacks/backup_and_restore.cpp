// BackupAndRestore (keras.callbacks.BackupAndRestore): periodic training checkpoints and
// resume-on-restart. A backup holds the weights, the optimizer's state (its iteration count
// keys the step's random ops), the position (epoch, step of that epoch) and the model seed
// (the other key of the random ops); fit rebuilds the input pipeline for that epoch and
// fast-forwards it to the position, which replays the same batches when its shuffles are
// seeded (required under op determinism, lockstep/core/config.h).
#include <cstdio>
#include <filesystem>

#include "distribute/internal/strategy_runtime.h"
#include "lockstep/callbacks/callback.h"
#include "lockstep/core/config.h"
#include "lockstep/saving/checkpoint.h"
#include "lockstep/trainers/model.h"

namespace lockstep {

namespace {

class BackupAndRestoreCb : public Callback {
 public:
  BackupAndRestoreCb(std::string dir, int64_t every_steps, bool delete_checkpoint)
      : dir_(std::move(dir)), every_(every_steps), delete_(delete_checkpoint) {}

  std::string path() const { return (std::filesystem::path(dir_) / "checkpoint.lsckpt").string(); }

  void on_train_begin(const Logs&) override {
    if (!model) return;
    if (std::filesystem::exists(path())) {
      io::TrainingProgress p = train::Checkpoint(*model).restore(path());
      check_seed(p);
      model->set_resume_point(p.epoch, p.step);
      std::printf("BackupAndRestore: resuming from %s at epoch %d, step %lld\n", path().c_str(),
                  p.epoch + 1, (long long)p.step);
      std::fflush(stdout);
    }
  }

  void on_epoch_begin(int epoch, const Logs&) override {
    epoch_ = epoch;
    last_saved_ = 0;
  }

  void on_train_batch_end(int batch, const Logs&) override {
    if (every_ <= 0 || !model) return;
    const int64_t done = int64_t(batch) + 1;  // steps of this epoch completed
    if (done / every_ > last_saved_ / every_) save(epoch_, done);
  }

  void on_epoch_end(int epoch, const Logs&) override {
    if (model) save(epoch + 1, 0);
  }

  // A preemption signal (lockstep/trainers/preemption.h): the position after the last step.
  std::string on_train_preempted(int epoch, int64_t steps_done) override {
    if (!model) return "";
    save(epoch, steps_done);
    return detail::concat("BackupAndRestore wrote ", path(), " (epoch ", epoch + 1, ", step ",
                          steps_done, ")");
  }

  void on_train_end(const Logs&) override {
    if (!delete_ || !model) return;
    if (model->strategy() && !model->strategy()->is_chief()) return;  // the chief deletes
    std::error_code ec;
    std::filesystem::remove(path(), ec);
  }

 private:
  void save(int epoch, int64_t step) {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    io::TrainingProgress progress{epoch, step};
    progress.extra = {{"random_seed", random_seed()},
                      {"op_determinism", config::op_determinism_enabled()}};
    train::Checkpoint(*model).save(path(), progress);
    last_saved_ = step;
  }
  // The random ops are keyed by the model seed: a different one would resume with other
  // dropout masks and augmentations than the interrupted run's (an error under op
  // determinism, a warning otherwise).
  void check_seed(const io::TrainingProgress& p) const {
    if (!p.extra.contains("random_seed")) return;  // a backup from an older version
    const uint64_t saved = p.extra["random_seed"].get<uint64_t>(), now = random_seed();
    if (saved == now) return;
    const std::string what = detail::concat(
        "BackupAndRestore: the backup ", path(), " was written by a run with random seed ", saved,
        " but this run's is ", now, "; call set_random_seed(", saved,
        ") before building the model, or the resumed run's dropout and augmentation draws differ "
        "from the interrupted run's");
    LS_CHECK(!config::op_determinism_enabled(), what, " (op determinism is enabled)");
    std::fprintf(stderr, "%s\n", what.c_str());
  }
  std::string dir_;
  int64_t every_;
  bool delete_;
  int epoch_ = 0;
  int64_t last_saved_ = 0;
};

}  // namespace

namespace callbacks {

CallbackPtr BackupAndRestore(const std::string& backup_dir,
                             std::variant<std::string, int64_t> save_freq, bool delete_checkpoint) {
  LS_CHECK(!backup_dir.empty(), "BackupAndRestore: backup_dir must not be empty");
  int64_t every = 0;
  if (auto* s = std::get_if<std::string>(&save_freq)) {
    LS_CHECK(*s == "epoch",
             "BackupAndRestore: save_freq must be \"epoch\" or a number of steps, got \"", *s,
             "\"");
  } else {
    every = std::get<int64_t>(save_freq);
    LS_CHECK(every > 0, "BackupAndRestore: save_freq must be > 0 steps, got ", every);
  }
  return std::make_shared<BackupAndRestoreCb>(backup_dir, every, delete_checkpoint);
}

}  // namespace callbacks

}  // namespace lockstep
