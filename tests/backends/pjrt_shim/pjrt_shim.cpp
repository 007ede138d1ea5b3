// A PJRT plugin for tests (tests/backends/xla_plugin_test.cpp): it loads a real plugin (the
// CPU one, from env PJRT_SHIM_TARGET) and forwards every call to it, with two differences that
// let the tests play the part of the plugins no test machine has:
//   - PJRT_Client_Create refuses any create option whose name it does not know, as the CUDA
//     plugin (and libtpu) do, with the same message; it knows the CUDA plugin's names and
//     passes none of them on, so the client has the CPU plugin's default device count (a
//     plugin that fixes its own device count);
//   - env PJRT_SHIM_NULL=<function> nulls that entry of the API table (a broken plugin).
// Errors the shim makes itself are its own PJRT_Error objects; PJRT_Error_* tell them apart.
#include <dlfcn.h>
#include <pjrt_c_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

namespace {

struct ShimError {
  std::string message;
  PJRT_Error_Code code;
};

const PJRT_Api* real = nullptr;
PJRT_Api table;
std::mutex mu;
std::set<const void*> shim_errors;

PJRT_Error* make_error(const std::string& message, PJRT_Error_Code code) {
  auto* e = new ShimError{message, code};
  std::lock_guard<std::mutex> lock(mu);
  shim_errors.insert(e);
  return reinterpret_cast<PJRT_Error*>(e);
}

ShimError* shim_error(const PJRT_Error* err) {
  std::lock_guard<std::mutex> lock(mu);
  return shim_errors.count(err) ? reinterpret_cast<ShimError*>(const_cast<PJRT_Error*>(err))
                                : nullptr;
}

void error_destroy(PJRT_Error_Destroy_Args* a) {
  if (ShimError* e = shim_error(a->error)) {
    {
      std::lock_guard<std::mutex> lock(mu);
      shim_errors.erase(e);
    }
    delete e;
    return;
  }
  real->PJRT_Error_Destroy(a);
}

void error_message(PJRT_Error_Message_Args* a) {
  if (ShimError* e = shim_error(a->error)) {
    a->message = e->message.data();
    a->message_size = e->message.size();
    return;
  }
  real->PJRT_Error_Message(a);
}

PJRT_Error* error_get_code(PJRT_Error_GetCode_Args* a) {
  if (ShimError* e = shim_error(a->error)) {
    a->code = e->code;
    return nullptr;
  }
  return real->PJRT_Error_GetCode(a);
}

// The CUDA plugin's create options (xla/pjrt/c/pjrt_c_api_gpu_internal.cc).
bool known_option(const std::string& name) {
  static const std::set<std::string> names = {"platform_name",
                                              "allocator",
                                              "memory_fraction",
                                              "preallocate",
                                              "collective_memory_size",
                                              "visible_devices",
                                              "node_id",
                                              "num_nodes",
                                              "enable_mock_nccl",
                                              "mock_gpu_topology",
                                              "should_stage_host_to_device_transfers"};
  return names.count(name) > 0;
}

PJRT_Error* client_create(PJRT_Client_Create_Args* a) {
  for (size_t i = 0; i < a->num_options; ++i) {
    std::string name(a->create_options[i].name, a->create_options[i].name_size);
    if (!known_option(name))
      return make_error("Unexpected option name passed to PJRT_Client_Create: " + name,
                        PJRT_Error_Code_INVALID_ARGUMENT);
  }
  PJRT_Client_Create_Args forwarded = *a;
  forwarded.create_options = nullptr;  // the CPU plugin knows none of the CUDA names
  forwarded.num_options = 0;
  PJRT_Error* err = real->PJRT_Client_Create(&forwarded);
  a->client = forwarded.client;
  return err;
}

void null_entry(const char* name) {
#define SHIM_NULL(fn) \
  if (std::strcmp(name, #fn) == 0) table.fn = nullptr;
  SHIM_NULL(PJRT_Error_Message)
  SHIM_NULL(PJRT_Plugin_Initialize)
  SHIM_NULL(PJRT_Client_Create)
  SHIM_NULL(PJRT_Client_Compile)
  SHIM_NULL(PJRT_LoadedExecutable_Execute)
  SHIM_NULL(PJRT_Buffer_ToHostBuffer)
  SHIM_NULL(PJRT_Executable_Serialize)
#undef SHIM_NULL
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const PJRT_Api* GetPjrtApi() {
  if (!real) {
    const char* target = std::getenv("PJRT_SHIM_TARGET");
    if (!target) return nullptr;
    void* handle = dlopen(target, RTLD_NOW | RTLD_LOCAL);
    if (!handle) return nullptr;
    auto get = reinterpret_cast<const PJRT_Api* (*)()>(dlsym(handle, "GetPjrtApi"));
    real = get ? get() : nullptr;
    if (!real) return nullptr;
  }
  // Built at every call (the tests load copies of the shim, one per PJRT_SHIM_NULL).
  std::memcpy(&table, real, std::min(sizeof table, real->struct_size));
  table.struct_size = std::min(sizeof table, real->struct_size);
  table.PJRT_Error_Destroy = error_destroy;
  table.PJRT_Error_Message = error_message;
  table.PJRT_Error_GetCode = error_get_code;
  table.PJRT_Client_Create = client_create;
  if (const char* name = std::getenv("PJRT_SHIM_NULL")) null_entry(name);
  return &table;
}
