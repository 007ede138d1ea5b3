// Keras-style progress bar: "12/469 [>.....] - ETA: 8s - loss: 0.5123 - accuracy: 0.81".
// On a TTY it redraws one line; otherwise it prints one line per epoch.
#pragma once
#include <chrono>
#include <cstdio>
#include <string>

#include "lockstep/trainers/callback_base.h"

namespace lockstep {

/// Keras's progress bar: `8/8 [=====] - 5s 587ms/step - loss: 0.8088 - accuracy: 0.7178`
/// (redrawn in place on a terminal, one line per epoch otherwise).
class ProgressBar {
 public:
  /// target: steps in the epoch (0 = unknown). verbose: 0 silent, 1 bar, 2 one line per epoch.
  ProgressBar(int target, int verbose, FILE* out = stdout);
  void update(int step, const Logs& logs);  ///< after `step` steps (1-based)
  void finish(const Logs& logs);            ///< end of epoch: final line with time per step
  static bool is_tty(FILE* f);              ///< whether f is a terminal (the bar redraws in place)

 private:
  std::string format_logs(const Logs& logs) const;
  int target_, verbose_;
  FILE* out_;
  bool tty_;
  std::string line(int step, bool final) const;  ///< one full bar line (no \r / \n)
  double step_seconds(int step, std::chrono::steady_clock::time_point now) const;
  std::chrono::steady_clock::time_point start_, last_draw_, after_first_step_;
  bool have_first_step_ = false;
  int last_step_ = 0;
  size_t prev_width_ = 0;
};

/// Keras's per-unit time: "3s" (>= 1 s or 0), "25ms", "40us"; callers append "/step".
std::string format_duration(double seconds);

}  // namespace lockstep
