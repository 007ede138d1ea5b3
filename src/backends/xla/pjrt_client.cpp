// The PJRT client, buffers and executables (see pjrt_client.h).
#include "backends/xla/pjrt_client.h"

#include <pjrt_c_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <sstream>
#include <utility>

#include "backends/xla/pjrt_client_state.h"
#include "lockstep/core/error.h"

namespace lockstep::xla {

namespace {

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(0x80 | (v & 0x7f)));
    v >>= 7;
  }
  out.push_back(char(v));
}

std::string device_text(const ClientState& s, PJRT_Device* device, bool kind) {
  PJRT_Device_GetDescription_Args g{};
  g.struct_size = PJRT_Device_GetDescription_Args_STRUCT_SIZE;
  g.device = device;
  s.check(s.api()->PJRT_Device_GetDescription(&g), "PJRT_Device_GetDescription");
  if (kind) {
    PJRT_DeviceDescription_Kind_Args k{};
    k.struct_size = PJRT_DeviceDescription_Kind_Args_STRUCT_SIZE;
    k.device_description = g.device_description;
    s.check(s.api()->PJRT_DeviceDescription_Kind(&k), "PJRT_DeviceDescription_Kind");
    return std::string(k.device_kind, k.device_kind_size);
  }
  PJRT_DeviceDescription_ToString_Args t{};
  t.struct_size = PJRT_DeviceDescription_ToString_Args_STRUCT_SIZE;
  t.device_description = g.device_description;
  s.check(s.api()->PJRT_DeviceDescription_ToString(&t), "PJRT_DeviceDescription_ToString");
  return std::string(t.to_string, t.to_string_size);
}

int device_id(const ClientState& s, PJRT_Device* device) {
  PJRT_Device_GetDescription_Args g{};
  g.struct_size = PJRT_Device_GetDescription_Args_STRUCT_SIZE;
  g.device = device;
  s.check(s.api()->PJRT_Device_GetDescription(&g), "PJRT_Device_GetDescription");
  PJRT_DeviceDescription_Id_Args i{};
  i.struct_size = PJRT_DeviceDescription_Id_Args_STRUCT_SIZE;
  i.device_description = g.device_description;
  s.check(s.api()->PJRT_DeviceDescription_Id(&i), "PJRT_DeviceDescription_Id");
  return i.id;
}

}  // namespace

// ---- element types ----

int pjrt_buffer_type(DType t) {
  switch (t) {
    case DType::f32:
      return PJRT_Buffer_Type_F32;
    case DType::bf16:
      return PJRT_Buffer_Type_BF16;
    case DType::f16:
      return PJRT_Buffer_Type_F16;
    case DType::i32:
      return PJRT_Buffer_Type_S32;
    case DType::i64:
      return PJRT_Buffer_Type_S64;
    case DType::u8:
      return PJRT_Buffer_Type_U8;
  }
  LS_FAIL("no PJRT element type for dtype ", dtype_name(t));
}

DType dtype_from_pjrt(int t) {
  switch (t) {
    case PJRT_Buffer_Type_F32:
      return DType::f32;
    case PJRT_Buffer_Type_BF16:
      return DType::bf16;
    case PJRT_Buffer_Type_F16:
      return DType::f16;
    case PJRT_Buffer_Type_S32:
      return DType::i32;
    case PJRT_Buffer_Type_S64:
      return DType::i64;
    case PJRT_Buffer_Type_U8:
    case PJRT_Buffer_Type_PRED:  // i1: one byte per element on the host
      return DType::u8;
  }
  LS_FAIL("PJRT element type ", t, " has no Lockstep dtype (f32, bf16, f16, i32, i64, u8, pred)");
}

std::string compile_options_proto(int num_replicas, int num_partitions) {
  return compile_options_proto(num_replicas, num_partitions, false, false, {});
}

std::string compile_options_proto(int num_replicas, int num_partitions, bool spmd, bool shardy,
                                  const std::vector<int64_t>& device_ids) {
  LS_CHECK(num_replicas >= 1 && num_partitions >= 1, "compile options: num_replicas (",
           num_replicas, ") and num_partitions (", num_partitions, ") must be >= 1");
  std::string build;              // ExecutableBuildOptionsProto
  build.push_back(char(4 << 3));  // num_replicas = 4, varint
  put_varint(build, uint64_t(num_replicas));
  build.push_back(char(5 << 3));  // num_partitions = 5, varint
  put_varint(build, uint64_t(num_partitions));
  if (spmd) {
    build.push_back(char(6 << 3));  // use_spmd_partitioning = 6, varint
    put_varint(build, 1);
  }
  if (shardy) {
    put_varint(build, 19 << 3);  // use_shardy_partitioner = 19, varint
    put_varint(build, 1);
  }
  if (!device_ids.empty()) {
    LS_CHECK(int64_t(device_ids.size()) == int64_t(num_replicas) * num_partitions,
             "compile options: ", device_ids.size(), " devices assigned to ", num_replicas,
             " replicas x ", num_partitions, " partitions");
    std::string assignment;              // DeviceAssignmentProto
    assignment.push_back(char(1 << 3));  // replica_count = 1
    put_varint(assignment, uint64_t(num_replicas));
    assignment.push_back(char(2 << 3));  // computation_count = 2
    put_varint(assignment, uint64_t(num_partitions));
    for (int p = 0; p < num_partitions; ++p) {
      std::string computation;  // ComputationDevice {repeated int64 replica_device_ids = 1}
      for (int r = 0; r < num_replicas; ++r) {
        computation.push_back(char(1 << 3));
        put_varint(computation, uint64_t(device_ids[size_t(r * num_partitions + p)]));
      }
      assignment.push_back(char((3 << 3) | 2));  // computation_devices = 3
      put_varint(assignment, computation.size());
      assignment += computation;
    }
    build.push_back(char((9 << 3) | 2));  // device_assignment = 9, length-delimited
    put_varint(build, assignment.size());
    build += assignment;
  }
  std::string out;                    // CompileOptionsProto
  out.push_back(char((3 << 3) | 2));  // executable_build_options = 3, length-delimited
  put_varint(out, build.size());
  return out + build;
}

// ---- client ----

// ---- client state: every live one, destroyed at exit before the plugins' statics ----

namespace {

std::mutex& live_mutex() {
  static auto* m = new std::mutex();  // never destroyed: used by exit handlers
  return *m;
}
std::set<ClientState*>& live_states() {
  static auto* s = new std::set<ClientState*>();
  return *s;
}

void destroy_clients_at_exit() {
  std::lock_guard<std::mutex> lock(live_mutex());
  for (ClientState* s : live_states()) s->destroy_client();
}

}  // namespace

ClientState::ClientState() {
  std::lock_guard<std::mutex> lock(live_mutex());
  live_states().insert(this);
}

ClientState::~ClientState() {
  destroy_client();
  std::lock_guard<std::mutex> lock(live_mutex());
  live_states().erase(this);
}

void ClientState::destroy_client() {
  if (!client) return;
  PJRT_Client_Destroy_Args a{};
  a.struct_size = PJRT_Client_Destroy_Args_STRUCT_SIZE;
  a.client = client;
  client = nullptr;
  if (PJRT_Error* err = api()->PJRT_Client_Destroy(&a)) {
    PJRT_Error_Destroy_Args d{PJRT_Error_Destroy_Args_STRUCT_SIZE, nullptr, err};
    api()->PJRT_Error_Destroy(&d);  // nothing to do about it in a destructor
  }
}

int live_client_states() {
  std::lock_guard<std::mutex> lock(live_mutex());
  return int(live_states().size());
}

// ---- client ----

std::shared_ptr<PjrtClient> PjrtClient::create(const PjrtClientOptions& options) {
  auto state = std::make_shared<ClientState>();
  state->plugin = PjrtPlugin::load(options.plugin);
  const PJRT_Api* api = state->api();
  const std::vector<PluginOption> create_options =
      plugin_create_options(state->plugin->kind(), options);
  std::vector<PJRT_NamedValue> values = named_values(create_options);
  PJRT_Client_Create_Args c{};
  c.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
  c.create_options = values.data();
  c.num_options = values.size();
  std::string sent;
  for (const PluginOption& o : create_options) sent += (sent.empty() ? "" : ", ") + o.name;
  state->check(api->PJRT_Client_Create(&c), "PJRT_Client_Create",
               "The plugin could not open its devices (are they present and free?); create "
               "options sent: " +
                   (sent.empty() ? std::string("none") : sent));
  state->client = c.client;
  std::atexit(destroy_clients_at_exit);  // after the plugin's statics: runs before they go

  std::shared_ptr<PjrtClient> client(new PjrtClient());
  client->state_ = state;
  PJRT_Client_PlatformName_Args p{};
  p.struct_size = PJRT_Client_PlatformName_Args_STRUCT_SIZE;
  p.client = state->client;
  state->check(api->PJRT_Client_PlatformName(&p), "PJRT_Client_PlatformName");
  client->platform_.assign(p.platform_name, p.platform_name_size);
  PJRT_Client_AddressableDevices_Args d{};
  d.struct_size = PJRT_Client_AddressableDevices_Args_STRUCT_SIZE;
  d.client = state->client;
  state->check(api->PJRT_Client_AddressableDevices(&d), "PJRT_Client_AddressableDevices");
  for (size_t i = 0; i < d.num_addressable_devices; ++i) {
    PJRT_Device* h = d.addressable_devices[i];
    client->devices_.push_back(
        {device_id(*state, h), device_text(*state, h, true), device_text(*state, h, false), h});
  }
  LS_CHECK(!client->devices_.empty(), "PJRT plugin ", state->plugin->path(),
           " reports no addressable devices (is the accelerator visible to this process?)");
  return client;
}

PjrtClient::~PjrtClient() = default;

const PjrtPlugin& PjrtClient::plugin() const { return *state_->plugin; }

std::string PjrtClient::describe() const {
  std::string names;
  for (size_t i = 0; i < devices_.size() && i < 4; ++i)
    names += (i ? ", " : "") + devices_[i].description;
  if (devices_.size() > 4) names += ", ...";
  return platform_ + ": " + std::to_string(devices_.size()) + " device" +
         (devices_.size() == 1 ? "" : "s") + " (" + names + ") via " + state_->plugin->describe();
}

PjrtBuffer PjrtClient::to_device(const void* data, DType dtype, const Shape& shape,
                                 int device) const {
  LS_CHECK(device >= 0 && device < int(devices_.size()), "to_device: device ", device,
           " out of range (the client has ", devices_.size(), ")");
  std::vector<int64_t> dims = shape.vec();
  PJRT_Client_BufferFromHostBuffer_Args a{};
  a.struct_size = PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE;
  a.client = state_->client;
  a.data = data;
  a.type = PJRT_Buffer_Type(pjrt_buffer_type(dtype));
  a.dims = dims.data();
  a.num_dims = dims.size();
  a.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableOnlyDuringCall;
  a.device = devices_[device].handle;
  state_->check(state_->api()->PJRT_Client_BufferFromHostBuffer(&a),
                "PJRT host-to-device copy of " + std::string(dtype_name(dtype)) + shape.str(), "");
  PjrtBuffer buffer(state_, a.buffer);
  await_event(*state_, a.done_with_host_buffer, "PJRT host-to-device copy", "");
  return buffer;
}

PjrtBuffer PjrtClient::to_device(const Tensor& host, int device) const {
  LS_CHECK(host.defined(), "to_device: the tensor is undefined");
  Tensor c = host.contiguous();
  return to_device(c.raw(), c.dtype(), c.shape(), device);
}

void PjrtClient::to_host(const PjrtBuffer& buffer, void* dst, size_t nbytes) const {
  LS_CHECK(buffer.valid(), "to_host: the buffer is empty (moved from, reset or donated)");
  PJRT_Buffer_ToHostBuffer_Args a{};
  a.struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE;
  a.src = buffer.handle();
  a.dst = nullptr;  // ask for the size first
  state_->check(state_->api()->PJRT_Buffer_ToHostBuffer(&a), "PJRT device-to-host size query");
  LS_CHECK(a.dst_size == nbytes, "to_host: the buffer holds ", a.dst_size, " bytes, the host has ",
           nbytes);
  a.dst = dst;
  a.event = nullptr;
  state_->check(state_->api()->PJRT_Buffer_ToHostBuffer(&a), "PJRT device-to-host copy");
  await_event(*state_, a.event, "PJRT device-to-host copy", "");
}

Tensor PjrtClient::to_host(const PjrtBuffer& buffer) const {
  Tensor t = Tensor::empty(buffer.shape(), buffer.dtype());
  to_host(buffer, t.raw(), t.nbytes());
  return t;
}

int64_t PjrtClient::bytes_in_use(int device) const {
  LS_CHECK(device >= 0 && device < int(devices_.size()), "bytes_in_use: device ", device,
           " out of range");
  PJRT_Device_MemoryStats_Args a{};
  a.struct_size = PJRT_Device_MemoryStats_Args_STRUCT_SIZE;
  a.device = devices_[device].handle;
  if (!state_->plugin->has_entry(offsetof(PJRT_Api, PJRT_Device_MemoryStats))) return -1;
  if (PJRT_Error* err = state_->api()->PJRT_Device_MemoryStats(&a)) {
    PJRT_Error_Destroy_Args d{PJRT_Error_Destroy_Args_STRUCT_SIZE, nullptr, err};
    state_->api()->PJRT_Error_Destroy(&d);
    return -1;
  }
  return a.bytes_in_use;
}

}  // namespace lockstep::xla
