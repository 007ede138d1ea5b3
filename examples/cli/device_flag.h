// The --device flag of the examples and `lockstep train`: where the model's steps run.
//   cpu            the cpu backend (oneDNN kernels, node by node; the default)
//   xla:cpu        the xla backend: the whole step compiled by XLA, on the PJRT CPU plugin
//   xla:PLUGIN     the xla backend on another PJRT plugin: a name ("cuda", "tpu") or a .so path
// and --replicas N (with xla:PLUGIN): one replica per device of the plugin, TPUStrategy's way
// (distribute::XlaStrategy): the global batch split across N devices, the gradients all-reduced
// inside the compiled step. The CPU plugin is asked for N devices; another plugin must have them.
#pragma once
#include <cstdlib>
#include <string>

#include "lockstep/core/error.h"
#include "lockstep/distribute/xla_strategy.h"

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

// --replicas N for `device`: an XlaStrategy over N devices of its plugin (connect() prints
// them); N <= 1: none (an empty Strategy).
inline distribute::Strategy replica_strategy(const std::string& device, int replicas) {
  if (replicas <= 1) return distribute::Strategy();
  LS_CHECK(device.rfind("xla:", 0) == 0 && device.size() > 4, "--replicas ", replicas,
           " needs --device xla:PLUGIN (one replica per device of the plugin); on --device cpu "
           "use --strategy mirrored");
  auto resolver = distribute::XlaClusterResolver::connect(device.substr(4), replicas);
  LS_CHECK(resolver.num_devices() == replicas, "--replicas ", replicas, ": plugin '",
           device.substr(4), "' has ", resolver.num_devices(), " devices; use --replicas ",
           resolver.num_devices(),
           " (or fewer where the plugin lets one choose: the CPU and CUDA plugins)");
  return distribute::XlaStrategy(resolver);
}

}  // namespace lockstep::cli
