/// @file
/// Graceful preemption (Keras's BackupAndRestore with PreemptionCheckpointHandler): a program
/// that calls install_preemption_handler() turns SIGTERM and SIGINT into a request that fit()
/// honours between steps. fit() finishes the step (the execution, with steps_per_execution > 1)
/// that is running, calls every callback's on_train_preempted (BackupAndRestore writes its
/// backup there, mid-epoch), and throws TrainingPreempted; the program then exits with
/// kPreemptedExitCode, and running it again resumes from the backup.
///
///     lockstep::install_preemption_handler();
///     try {
///       model.fit(x, y, {.epochs = 10, .callbacks = {callbacks::BackupAndRestore("backup")}});
///     } catch (const lockstep::TrainingPreempted& e) {
///       std::fprintf(stderr, "%s\n", e.what());
///       return lockstep::kPreemptedExitCode;
///     }
///
/// The handler only records the signal (an atomic store, async-signal-safe); a second signal
/// while the first is pending ends the process at once (its default action). Under a
/// multi-worker strategy the workers agree after every execution (one small all-reduce), so all
/// of them stop after the same step, even when only one was signalled.
#pragma once
#include <string>

#include "lockstep/core/error.h"

namespace lockstep {

/// The exit status of a program that stopped training on SIGTERM or SIGINT after writing its
/// BackupAndRestore state (EX_TEMPFAIL in sysexits.h: temporary; run the same command again
/// to resume).
inline constexpr int kPreemptedExitCode = 75;

/// Thrown by fit() when a preemption signal stopped training between two steps.
class TrainingPreempted : public Error {
 public:
  /// `what`: the message; `signal`: SIGTERM or SIGINT.
  TrainingPreempted(const std::string& what, int signal) : Error(what), signal_(signal) {}
  /// The signal that stopped training.
  int signal() const { return signal_; }

 private:
  int signal_;
};

/// Installs handlers for SIGTERM and SIGINT that record the signal for fit() (see the file's
/// comment). Call it once, early in main; calling it again does nothing.
void install_preemption_handler();
/// Whether install_preemption_handler() was called.
bool preemption_handler_installed();
/// The preemption signal received and not yet handled (0: none).
int preemption_signal();
/// Forgets a received signal (a program that handled it and trains on).
void clear_preemption_signal();
/// "SIGTERM", "SIGINT", or "signal N".
std::string preemption_signal_name(int signal);

}  // namespace lockstep
