// The --device flag of the examples and `lockstep train`: where the model's steps run.
//   cpu            the cpu backend (oneDNN kernels, node by node; the default)
//   xla:cpu        the xla backend: the whole step compiled by XLA, on the PJRT CPU plugin
//   xla:PLUGIN     the xla backend on another PJRT plugin: a name ("cuda", "tpu") or a .so path
#pragma once
#include <cstdlib>
#include <string>

#include "lockstep/core/error.h"

namespace lockstep::cli {

// The CompileConfig::backend for `device`; xla:PLUGIN also sets LOCKSTEP_XLA_PLUGIN, which the
// xla backend reads when it creates its PJRT client.
inline std::string backend_for_device(const std::string& device) {
  if (device.empty() || device == "cpu") return "cpu";
  LS_CHECK(device.rfind("xla:", 0) == 0 && device.size() > 4,
           "--device must be cpu or xla:PLUGIN (xla:cpu, xla:cuda, xla:/path/to/plugin.so), got '",
           device, "'");
  ::setenv("LOCKSTEP_XLA_PLUGIN", device.substr(4).c_str(), 1);
  return "xla";
}

}  // namespace lockstep::cli
