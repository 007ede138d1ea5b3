// The state a PJRT client shares with its buffers and executables (pjrt_client.cpp,
// pjrt_executable.cpp): the plugin and the PJRT_Client, destroyed after the last user.
#pragma once
#include <pjrt_c_api.h>

#include <memory>
#include <string>
#include <vector>

#include "backends/xla/pjrt_client.h"
#include "backends/xla/pjrt_plugin.h"

namespace lockstep::xla {

// The plugin and the PJRT_Client; destroyed after the last buffer and executable that use it.
// Every live one is registered: at exit, before the plugins' own static state is torn down,
// their PJRT_Clients are destroyed (destroy_clients_at_exit, registered with atexit after each
// client is created, so that it runs before the destructors of what the plugin set up); a
// buffer or executable still alive then is left to the process's end (client is null).
struct ClientState {
  std::shared_ptr<PjrtPlugin> plugin;
  PJRT_Client* client = nullptr;
  const PJRT_Api* api() const { return plugin->api(); }
  void check(PJRT_Error* err, const std::string& what, const std::string& todo = "") const {
    plugin->check(err, what, todo);
  }
  ClientState();
  ~ClientState();
  ClientState(const ClientState&) = delete;
  ClientState& operator=(const ClientState&) = delete;
  void destroy_client();  // PJRT_Client_Destroy now (idempotent)
};

// The PJRT form of create options; each refers to the strings and lists of `options`, which
// must outlive it (pjrt_options.cpp).
std::vector<PJRT_NamedValue> named_values(const std::vector<PluginOption>& options);

// Awaits and destroys an event; throws the event's error.
inline void await_event(const ClientState& s, PJRT_Event* event, const std::string& what,
                        const std::string& todo) {
  if (!event) return;
  PJRT_Event_Await_Args a{};
  a.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE;
  a.event = event;
  PJRT_Error* err = s.api()->PJRT_Event_Await(&a);
  PJRT_Event_Destroy_Args d{};
  d.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE;
  d.event = event;
  PJRT_Error* derr = s.api()->PJRT_Event_Destroy(&d);
  s.check(err, what, todo);
  s.check(derr, "PJRT_Event_Destroy");
}

}  // namespace lockstep::xla
