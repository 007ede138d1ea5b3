// The state a PJRT client shares with its buffers and executables (pjrt_client.cpp,
// pjrt_executable.cpp): the plugin and the PJRT_Client, destroyed after the last user.
#pragma once
#include <pjrt_c_api.h>

#include <memory>
#include <string>

#include "backends/xla/pjrt_plugin.h"

namespace lockstep::xla {

// The plugin and the PJRT_Client; destroyed after the last buffer and executable that use it.
struct ClientState {
  std::shared_ptr<PjrtPlugin> plugin;
  PJRT_Client* client = nullptr;
  const PJRT_Api* api() const { return plugin->api(); }
  void check(PJRT_Error* err, const std::string& what, const std::string& todo = "") const {
    plugin->check(err, what, todo);
  }
  ~ClientState() {
    if (!client) return;
    PJRT_Client_Destroy_Args a{};
    a.struct_size = PJRT_Client_Destroy_Args_STRUCT_SIZE;
    a.client = client;
    if (PJRT_Error* err = api()->PJRT_Client_Destroy(&a)) {
      PJRT_Error_Destroy_Args d{PJRT_Error_Destroy_Args_STRUCT_SIZE, nullptr, err};
      api()->PJRT_Error_Destroy(&d);  // nothing to do about it in a destructor
    }
  }
};

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
