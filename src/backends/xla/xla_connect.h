// The PJRT client connect_devices("xla", ...) made for the process (lockstep/graph/
// device_system.h): the xla backend's programs run on its devices from then on, whatever env
// LOCKSTEP_XLA_PLUGIN says.
#pragma once
#include <memory>

#include "backends/xla/pjrt_client.h"

namespace lockstep::xla {

// The connected client, or nullptr before any connect.
std::shared_ptr<PjrtClient> connected_client();

}  // namespace lockstep::xla
