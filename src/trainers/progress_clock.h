// The clock ProgressBar reads (progress.cpp): steady_clock, or a test's. The TTY bar redraws at
// most every 100 ms and prints an ETA from the time per step, so a test of the redraws sets the
// time itself instead of sleeping (a busy machine stretches any sleep).
#pragma once
#include <chrono>
#include <functional>

namespace lockstep::detail {

using ProgressClock = std::function<std::chrono::steady_clock::time_point()>;

// Replaces the clock for every ProgressBar until reset; an empty function restores
// steady_clock::now. Not thread-safe: set it before the bars are made, in tests only.
void set_progress_clock(ProgressClock clock);

}  // namespace lockstep::detail
