// DeviceResidence: which copy of a model's device-resident variables is the newest (see
// lockstep/graph/device_residence.h).
#include "lockstep/graph/device_residence.h"

namespace lockstep {

void DeviceResidence::add(const std::vector<VariablePtr>& variables) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const VariablePtr& v : variables)
    if (v) variables_.insert(v.get());
}

bool DeviceResidence::holds(const Variable* variable) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return variables_.count(variable) > 0;
}

void DeviceResidence::download_locked() {
  if (!newest_) return;
  download_();
  ++downloads_;
  // The host now has the newest values; newest_'s device copies stay current (loaded_).
  newest_ = nullptr;
  download_ = nullptr;
}

void DeviceResidence::to_host() {
  std::lock_guard<std::mutex> lock(mutex_);
  download_locked();
}

void DeviceResidence::host_changed() {
  std::lock_guard<std::mutex> lock(mutex_);
  download_locked();
  ++version_;
}

int64_t DeviceResidence::downloads() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return downloads_;
}

bool DeviceResidence::before_run(const void* program) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (newest_ && newest_ != program) download_locked();
  auto it = loaded_.find(program);
  if (it != loaded_.end() && it->second == version_) return false;
  loaded_[program] = version_;
  return true;
}

void DeviceResidence::after_run(const void* program, std::function<void()> download) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (newest_ != program) {
    ++version_;  // every other program's copies are stale now
    loaded_[program] = version_;
    newest_ = program;
  }
  download_ = std::move(download);
}

void DeviceResidence::forget(const void* program) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (newest_ == program) download_locked();
  loaded_.erase(program);
}

}  // namespace lockstep
