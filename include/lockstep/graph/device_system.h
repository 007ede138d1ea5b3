// The accelerator devices of the process, for a whole-graph backend that runs one program on
// several devices (xla, through a PJRT plugin): what tf.tpu.experimental.initialize_tpu_system
// is to TPUStrategy. A backend module registers how it connects (register_device_connector, at
// load time); connect_devices() connects once for the process; and programs compiled while a
// DeviceReplicasScope lives run as that many copies, one per device, each on its share of the
// batch (distribute::XlaStrategy, lockstep/distribute/xla_strategy.h, sets both up).
//
// The backend module is optional (LOCKSTEP_XLA), so the train and distribute modules reach it
// only through this registry, as they reach backends through register_backend.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace lockstep {

/// The devices a backend connected to (connect_devices).
struct DeviceSystem {
  std::string backend;   ///< the backend whose programs run on them ("xla")
  std::string plugin;    ///< what was loaded: the plugin file's path
  std::string platform;  ///< "cpu", "cuda", "tpu"
  /// One line per device, in replica order ("0: cpu TFRT_CPU_0").
  std::vector<std::string> devices;
  /// One line for logs: "cpu: 2 devices (...) via xla_cpu_pjrt.so (PJRT C API 0.81)".
  std::string description;
};

/// How a backend connects: `target` names the devices ("cpu", "cuda", "tpu", or a plugin's
/// .so path); `device_count` is the count to ask for where the plugin lets one choose it (the
/// CPU plugin), 0 for its default. Throws a lockstep::Error that says what to do.
using DeviceConnector = std::function<DeviceSystem(const std::string& target, int device_count)>;

/// Registers `backend`'s connector (a backend module does, at load time).
void register_device_connector(const std::string& backend, DeviceConnector connector);

/// Connects `backend` to its devices for the process: later programs of that backend run on
/// them. Throws when no module registered a connector for `backend` (naming those that did).
DeviceSystem connect_devices(const std::string& backend, const std::string& target,
                             int device_count);

/// While alive, programs compiled on this thread run as `count` replicas, one per device of the
/// connected system: their graph is one replica's step, the batch is split among the replicas,
/// and the variables' updates are combined inside the program (see the xla backend). Scopes
/// nest; the innermost wins.
class DeviceReplicasScope {
 public:
  /// Enters a scope of `count` (>= 1) replicas.
  explicit DeviceReplicasScope(int count);
  ~DeviceReplicasScope();
  DeviceReplicasScope(const DeviceReplicasScope&) = delete;
  DeviceReplicasScope& operator=(const DeviceReplicasScope&) = delete;
  /// The innermost live scope's count on this thread; 1 outside every scope.
  static int current();

 private:
  int previous_;
};

}  // namespace lockstep
