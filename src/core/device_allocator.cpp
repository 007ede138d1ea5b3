// The device allocator registry and its cpu allocator (the aligned host allocator).
#include "lockstep/core/device_allocator.h"

#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "lockstep/core/allocator.h"
#include "lockstep/core/error.h"

namespace lockstep {
namespace {

class CpuAllocator final : public DeviceAllocator {
 public:
  Device device() const override { return Device::cpu(); }
  bool host_accessible() const override { return true; }
  void* allocate(size_t bytes) override { return aligned_alloc_bytes(bytes); }
  void deallocate(void* p) override { aligned_free(p); }
  void zero(void* p, size_t bytes) override { std::memset(p, 0, bytes); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
};

struct Registry {
  std::mutex mu;
  std::map<DeviceType, DeviceAllocatorFactory> factories;
  std::map<std::pair<DeviceType, int>, std::unique_ptr<DeviceAllocator>> made;
};

Registry& registry() {
  static Registry r;
  return r;
}

const char* type_name(DeviceType t) { return t == DeviceType::cpu ? "cpu" : "cuda"; }

}  // namespace

DeviceAllocator& device_allocator(Device device) {
  static CpuAllocator cpu;
  if (device.type == DeviceType::cpu) return cpu;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto made = r.made.find({device.type, device.index});
  if (made != r.made.end()) return *made->second;
  auto f = r.factories.find(device.type);
  LS_CHECK(f != r.factories.end(), "device '", device.str(), "': this build of Lockstep has no ",
           type_name(device.type), " backend (configure with -DLOCKSTEP_WITH_CUDA=ON where the ",
           "CUDA toolkit is installed), so it cannot place memory there; devices of this build: ",
           "cpu:0, cpu:1, ...");
  auto a = f->second(device.index);
  LS_CHECK(a, "device '", device.str(), "': the ", type_name(device.type),
           " backend has no such device");
  return *(r.made[{device.type, device.index}] = std::move(a));
}

void set_device_allocator_factory(DeviceType type, DeviceAllocatorFactory factory) {
  LS_CHECK(type != DeviceType::cpu, "the cpu allocator is built in and cannot be replaced");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto it = r.made.begin(); it != r.made.end();)
    it = it->first.first == type ? r.made.erase(it) : std::next(it);
  if (factory)
    r.factories[type] = std::move(factory);
  else
    r.factories.erase(type);
}

}  // namespace lockstep
