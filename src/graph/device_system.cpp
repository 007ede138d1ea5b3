// The device connectors and the replica scope (lockstep/graph/device_system.h).
#include "lockstep/graph/device_system.h"

#include <map>
#include <mutex>

#include "lockstep/core/error.h"

namespace lockstep {

namespace {

std::mutex& connectors_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, DeviceConnector>& connectors() {
  static std::map<std::string, DeviceConnector> all;
  return all;
}

thread_local int t_device_replicas = 1;

}  // namespace

void register_device_connector(const std::string& backend, DeviceConnector connector) {
  std::lock_guard<std::mutex> lock(connectors_mutex());
  connectors()[backend] = std::move(connector);
}

DeviceSystem connect_devices(const std::string& backend, const std::string& target,
                             int device_count) {
  DeviceConnector connector;
  std::string known;
  {
    std::lock_guard<std::mutex> lock(connectors_mutex());
    auto it = connectors().find(backend);
    if (it != connectors().end()) connector = it->second;
    for (auto& [name, fn] : connectors()) known += (known.empty() ? "'" : ", '") + name + "'";
  }
  LS_CHECK(connector, "connect: backend '", backend, "' cannot connect to devices in this build (",
           known.empty() ? std::string("none can; build with LOCKSTEP_XLA=ON after "
                                       "scripts/setup_xla.sh for the xla backend")
                         : "these can: " + known,
           ")");
  LS_CHECK(device_count >= 0,
           "connect: the device count must be >= 0 (0: the plugin's default), "
           "got ",
           device_count);
  return connector(target, device_count);
}

DeviceReplicasScope::DeviceReplicasScope(int count) : previous_(t_device_replicas) {
  LS_CHECK(count >= 1, "DeviceReplicasScope: the replica count must be >= 1, got ", count);
  t_device_replicas = count;
}
DeviceReplicasScope::~DeviceReplicasScope() { t_device_replicas = previous_; }
int DeviceReplicasScope::current() { return t_device_replicas; }

}  // namespace lockstep
