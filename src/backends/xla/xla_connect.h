// The PJRT client connect_devices("xla", ...) made for the process (lockstep/graph/
// device_system.h): the xla backend's programs run on its devices from then on, whatever env
// LOCKSTEP_XLA_PLUGIN says.
#pragma once
#include <memory>
#include <string>

#include "backends/xla/pjrt_client.h"

namespace lockstep::xla {

// What connect does before it keeps the client: a client of plugin `spec` with device_count
// devices (0: the plugin's default), the count sent only to a plugin that takes one
// (plugin_create_options). Fewer devices than asked for is an error that says whether the
// plugin fixes its own count. Exposed for tests (connect itself holds one client per process).
std::shared_ptr<PjrtClient> create_client_with_devices(const std::string& spec, int device_count);

// The connected client, or nullptr before any connect.
std::shared_ptr<PjrtClient> connected_client();

}  // namespace lockstep::xla
