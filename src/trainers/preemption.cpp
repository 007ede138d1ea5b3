// Graceful preemption (lockstep/trainers/preemption.h): the signal handler records the signal in
// a lock-free atomic, the only thing it touches; fit's loop reads it between steps.
#include "lockstep/trainers/preemption.h"

#include <signal.h>

#include <atomic>
#include <cstring>

namespace lockstep {

namespace {

std::atomic<int> pending_signal{0};
std::atomic<bool> installed{false};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free int");

// Async-signal-safe: atomic loads and stores, sigaction and raise only. A second signal while
// one is pending restores the default action and re-raises it: the process ends at once.
extern "C" void record_preemption_signal(int signal) {
  int expected = 0;
  if (pending_signal.compare_exchange_strong(expected, signal)) return;
  struct sigaction fallback;
  std::memset(&fallback, 0, sizeof fallback);
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  sigaction(signal, &fallback, nullptr);
  raise(signal);
}

}  // namespace

void install_preemption_handler() {
  if (installed.exchange(true)) return;
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_handler = record_preemption_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // reads and writes in flight carry on
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

bool preemption_handler_installed() { return installed.load(); }

int preemption_signal() { return pending_signal.load(); }

void clear_preemption_signal() { pending_signal.store(0); }

std::string preemption_signal_name(int signal) {
  if (signal == SIGTERM) return "SIGTERM";
  if (signal == SIGINT) return "SIGINT";
  return "signal " + std::to_string(signal);
}

}  // namespace lockstep
