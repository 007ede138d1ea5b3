// Keras (tf.keras 2) style progress bar: redrawn on a TTY, one final line per epoch otherwise.
#include "lockstep/trainers/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdarg>

#include "trainers/progress_clock.h"

namespace lockstep {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kWidth = 30;
constexpr double kInterval = 0.1;  // seconds between TTY redraws

std::string fmt(const char* f, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

detail::ProgressClock& clock_override() {
  static detail::ProgressClock clock;
  return clock;
}

Clock::time_point now_time() { return clock_override() ? clock_override()() : Clock::now(); }

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string format_value(double v) { return std::fabs(v) > 1e-3 ? fmt("%.4f", v) : fmt("%.4e", v); }

std::string format_eta(double eta) {
  if (eta > 3600)
    return fmt("%d:%02d:%02d", int(eta / 3600), int(std::fmod(eta, 3600) / 60),
               int(std::fmod(eta, 60)));
  if (eta > 60) return fmt("%d:%02d", int(eta / 60), int(std::fmod(eta, 60)));
  return fmt("%ds", int(eta));
}

int num_digits(int n) { return n > 0 ? int(std::log10(double(n))) + 1 : 1; }

}  // namespace

void detail::set_progress_clock(ProgressClock clock) { clock_override() = std::move(clock); }

std::string format_duration(double s) {
  if (s >= 1 || s == 0) return fmt("%.0fs", s);
  if (s >= 1e-3) return fmt("%.0fms", s * 1e3);
  return fmt("%.0fus", s * 1e6);
}

bool ProgressBar::is_tty(FILE* f) { return f && isatty(fileno(f)); }

ProgressBar::ProgressBar(int target, int verbose, FILE* out)
    : target_(target), verbose_(verbose), out_(out), tty_(is_tty(out)) {
  start_ = now_time();
  last_draw_ = start_;
}

// Keras's _estimate_step_duration: excludes the (compile-heavy) first step when it can.
double ProgressBar::step_seconds(int step, Clock::time_point now) const {
  if (step <= 0) return 0;
  if (have_first_step_ && step > 1) return seconds(after_first_step_, now) / (step - 1);
  return seconds(start_, now) / step;
}

// "loss" first, then other metrics, then val_loss and the other val_ metrics (Keras order).
std::string ProgressBar::format_logs(const Logs& logs) const {
  std::string s;
  auto add = [&](const std::string& k, double v) { s += " - " + k + ": " + format_value(v); };
  for (const char* prefix : {"", "val_"}) {
    std::string p = prefix, loss = p + "loss";
    if (auto it = logs.find(loss); it != logs.end()) add(loss, it->second);
    for (auto& [k, v] : logs) {
      bool is_val = k.rfind("val_", 0) == 0;
      if (k != loss && is_val == !p.empty()) add(k, v);
    }
  }
  return s;
}

std::string ProgressBar::line(int step, bool final) const {
  auto now = now_time();
  std::string bar;
  if (target_ > 0) {
    bar = fmt("%*d/%d [", num_digits(target_), step, target_);
    int w = int(kWidth * std::min(1.0, double(step) / target_));
    if (w > 0) bar += std::string(w - 1, '=') + (step < target_ ? ">" : "=");
    bar += std::string(kWidth - w, '.') + "]";
  } else {
    bar = fmt("%7d/Unknown", step);
  }
  double per_step = step_seconds(step, now);
  if (final || target_ <= 0)
    bar += fmt(" - %.0fs ", seconds(start_, now)) + format_duration(per_step) + "/step";
  else
    bar += " - ETA: " + format_eta(per_step * (target_ - step));
  return bar;
}

void ProgressBar::update(int step, const Logs& logs) {
  if (verbose_ == 0) return;
  auto now = now_time();
  if (step == 1 && !have_first_step_) {
    after_first_step_ = now;
    have_first_step_ = true;
  }
  last_step_ = step;
  if (verbose_ != 1 || !tty_) return;
  if (target_ > 0 && step >= target_) return;  // finish() draws the final line
  if (seconds(last_draw_, now) < kInterval) return;
  last_draw_ = now;
  std::string l = line(step, false) + format_logs(logs);
  size_t width = l.size();
  if (prev_width_ > width) l += std::string(prev_width_ - width, ' ');
  prev_width_ = width;
  std::fprintf(out_, "\r%s", l.c_str());
  std::fflush(out_);
}

void ProgressBar::finish(const Logs& logs) {
  if (verbose_ == 0) return;
  int step = last_step_ > 0 ? last_step_ : target_;
  if (verbose_ == 1) {
    std::string l = line(step, true) + format_logs(logs);
    if (tty_) {
      size_t width = l.size();
      if (prev_width_ > width) l += std::string(prev_width_ - width, ' ');
      l = "\r" + l;
    }
    std::fprintf(out_, "%s\n", l.c_str());
  } else {
    // "469/469 - 12s - loss: 0.4321 - accuracy: 0.8452 - 12s/epoch - 25ms/step"
    auto now = now_time();
    double elapsed = seconds(start_, now);
    std::string l =
        target_ > 0 ? fmt("%*d/%d", num_digits(target_), step, target_) : fmt("%d", step);
    l += fmt(" - %.0fs", elapsed) + format_logs(logs) + " - " + format_duration(elapsed) +
         "/epoch - " + format_duration(step_seconds(step, now)) + "/step";
    std::fprintf(out_, "%s\n", l.c_str());
  }
  std::fflush(out_);
  prev_width_ = 0;
}

}  // namespace lockstep
