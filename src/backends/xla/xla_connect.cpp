// The xla backend's device connector (lockstep/graph/device_system.h): loads the PJRT plugin
// (a path, or a name found in a Python environment: pjrt_plugin.h), creates one client with the
// device count asked for (sent only to the plugins that take it: the CPU plugin's
// cpu_device_count, the CUDA plugin's visible_devices; others fix their own count) and keeps it
// for the process. Connecting again to the same plugin and count
// returns the same client; to another is an error (plugins cannot be unloaded, and programs
// already compiled hold their client's devices).
#include "backends/xla/xla_connect.h"

#include <mutex>

#include "lockstep/core/error.h"
#include "lockstep/graph/device_system.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep::xla {

namespace {

struct Connected {
  std::mutex mutex;
  std::shared_ptr<PjrtClient> client;
  std::string target;
  int device_count = 0;
};
Connected& connected() {
  static Connected c;
  return c;
}

DeviceSystem describe(const PjrtClient& client) {
  DeviceSystem s{.backend = "xla",
                 .plugin = client.plugin().path(),
                 .platform = client.platform(),
                 .devices = {},
                 .description = client.describe()};
  for (size_t i = 0; i < client.devices().size(); ++i) {
    const PjrtDevice& d = client.devices()[i];
    s.devices.push_back(std::to_string(i) + ": " + d.kind + " " + d.description);
  }
  return s;
}

}  // namespace

std::shared_ptr<PjrtClient> create_client_with_devices(const std::string& spec, int device_count) {
  std::shared_ptr<PjrtClient> client;
  try {
    client = PjrtClient::create({.plugin = spec, .device_count = device_count});
  } catch (const Error& e) {
    throw Error("connect: cannot connect to PJRT plugin '" + spec + "': " + e.what());
  }
  const int have = int(client->devices().size());
  if (device_count == 0 || have >= device_count) return client;
  const PluginKind kind = client->plugin().kind();
  if (kind == PluginKind::cpu || kind == PluginKind::cuda)
    LS_FAIL("connect: ", device_count, " devices asked for, but plugin '", spec, "' has ", have,
            " (", client->describe(), "); ask for at most that many");
  LS_FAIL("connect: ", device_count, " devices asked for, but plugin '", spec,
          "' fixes its own device count (it takes no device-count option; only the CPU and CUDA "
          "plugins do) and has ",
          have, " (", client->describe(), "); ask for at most ", have);
}

namespace {

DeviceSystem connect(const std::string& target, int device_count) {
  const std::string spec = target.empty() ? "cpu" : target;
  Connected& c = connected();
  std::lock_guard<std::mutex> lock(c.mutex);
  if (c.client) {
    LS_CHECK(c.target == spec && c.device_count == device_count,
             "connect: the process is already connected to PJRT plugin '", c.target, "' with ",
             c.device_count ? std::to_string(c.device_count) : std::string("its default"),
             " devices; it cannot connect to '", spec, "' with ",
             device_count ? std::to_string(device_count) : std::string("the default"),
             " devices as well (a plugin stays loaded for the process): connect once");
    return describe(*c.client);
  }
  // An empty target loads the default plugin (env LOCKSTEP_PJRT_PLUGIN, else "cpu").
  std::shared_ptr<PjrtClient> client = create_client_with_devices(target, device_count);
  c.client = client, c.target = spec, c.device_count = device_count;
  return describe(*client);
}

}  // namespace

std::shared_ptr<PjrtClient> connected_client() {
  Connected& c = connected();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.client;
}

LOCKSTEP_REGISTER(xla_connect) { register_device_connector("xla", connect); }

}  // namespace lockstep::xla
