// Memory that belongs to a device: allocation, zeroing and host<->device copies. An
// Executable's arena and workspace come from the allocator of the device it is compiled for.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>

#include "lockstep/core/dtype.h"

namespace lockstep {

/// One device's memory. Pointers from allocate() are device addresses (host addresses for
/// cpu:K), aligned to kAlignment. Every call is synchronous for the caller: when a copy
/// returns, the bytes are in place. The cpu allocator is the aligned host allocator
/// (allocator.h); a device backend (CUDA: cudaMalloc / cudaMemsetAsync / cudaMemcpyAsync on
/// its own stream, then a stream sync) implements this and installs a factory for its type.
class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  /// The device this allocator serves.
  virtual Device device() const = 0;
  /// True when host code may dereference pointers from allocate() (cpu).
  virtual bool host_accessible() const = 0;
  virtual void* allocate(size_t bytes) = 0;  ///< at least one byte; throws on failure
  /// Frees a pointer from allocate().
  virtual void deallocate(void* p) = 0;
  /// Sets `bytes` bytes at device address `p` to zero.
  virtual void zero(void* p, size_t bytes) = 0;
  virtual void copy_from_host(void* dst, const void* host_src, size_t bytes) = 0;  ///< H2D
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;    ///< D2H
};

/// The allocator of `device`, one per device, alive until its type's factory is replaced.
/// cpu:K all share the host allocator. Throws lockstep::Error naming the device when this
/// build has no backend for its type (e.g. "cuda:0" without LOCKSTEP_WITH_CUDA).
DeviceAllocator& device_allocator(Device device);

/// Installs the allocator factory of a non-cpu device type (a backend's LOCKSTEP_REGISTER
/// block; tests); nullptr removes it. Replacing drops the allocators the previous factory
/// made, so nothing allocated from them may still be alive.
using DeviceAllocatorFactory = std::function<std::unique_ptr<DeviceAllocator>(int index)>;
/// Installs `factory` for devices of `type` (see DeviceAllocatorFactory).
void set_device_allocator_factory(DeviceType type, DeviceAllocatorFactory factory);

}  // namespace lockstep
