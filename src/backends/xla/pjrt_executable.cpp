// PJRT device buffers and loaded executables: RAII, donation and per-replica execution (see
// pjrt_client.h).
#include <pjrt_c_api.h>

#include <cstddef>
#include <utility>

#include "backends/xla/pjrt_client.h"
#include "backends/xla/pjrt_client_state.h"
#include "lockstep/core/error.h"

namespace lockstep::xla {

// ---- buffers ----

PjrtBuffer::PjrtBuffer(std::shared_ptr<const ClientState> client, PJRT_Buffer* buffer)
    : client_(std::move(client)), buffer_(buffer) {}

PjrtBuffer::PjrtBuffer(PjrtBuffer&& o) noexcept
    : client_(std::move(o.client_)), buffer_(std::exchange(o.buffer_, nullptr)) {}

PjrtBuffer& PjrtBuffer::operator=(PjrtBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    client_ = std::move(o.client_);
    buffer_ = std::exchange(o.buffer_, nullptr);
  }
  return *this;
}

PjrtBuffer::~PjrtBuffer() { reset(); }

void PjrtBuffer::reset() {
  if (!buffer_) return;
  PJRT_Buffer_Destroy_Args a{};
  a.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE;
  a.buffer = buffer_;
  buffer_ = nullptr;
  // (a client destroyed at exit: the buffer is left to the process's end)
  if (client_->client)
    if (PJRT_Error* err = client_->api()->PJRT_Buffer_Destroy(&a)) {
      PJRT_Error_Destroy_Args d{PJRT_Error_Destroy_Args_STRUCT_SIZE, nullptr, err};
      client_->api()->PJRT_Error_Destroy(&d);
    }
  client_.reset();  // the last user of a client destroys it
}

DType PjrtBuffer::dtype() const {
  LS_CHECK(buffer_, "PjrtBuffer::dtype: the buffer is empty (moved from, reset or donated)");
  PJRT_Buffer_ElementType_Args a{};
  a.struct_size = PJRT_Buffer_ElementType_Args_STRUCT_SIZE;
  a.buffer = buffer_;
  client_->check(client_->api()->PJRT_Buffer_ElementType(&a), "PJRT_Buffer_ElementType");
  return dtype_from_pjrt(int(a.type));
}

Shape PjrtBuffer::shape() const {
  LS_CHECK(buffer_, "PjrtBuffer::shape: the buffer is empty (moved from, reset or donated)");
  PJRT_Buffer_Dimensions_Args a{};
  a.struct_size = PJRT_Buffer_Dimensions_Args_STRUCT_SIZE;
  a.buffer = buffer_;
  client_->check(client_->api()->PJRT_Buffer_Dimensions(&a), "PJRT_Buffer_Dimensions");
  return Shape(std::vector<int64_t>(a.dims, a.dims + a.num_dims));
}

int64_t PjrtBuffer::on_device_bytes() const {
  LS_CHECK(buffer_,
           "PjrtBuffer::on_device_bytes: the buffer is empty (moved from, reset or "
           "donated)");
  if (client_->plugin->has_entry(offsetof(PJRT_Api, PJRT_Buffer_OnDeviceSizeInBytes))) {
    PJRT_Buffer_OnDeviceSizeInBytes_Args a{};
    a.struct_size = PJRT_Buffer_OnDeviceSizeInBytes_Args_STRUCT_SIZE;
    a.buffer = buffer_;
    client_->check(client_->api()->PJRT_Buffer_OnDeviceSizeInBytes(&a),
                   "PJRT_Buffer_OnDeviceSizeInBytes");
    return int64_t(a.on_device_size_in_bytes);
  }
  return shape().numel() * int64_t(dtype_size(dtype()));
}

bool PjrtBuffer::is_deleted() const {
  if (!buffer_) return true;
  PJRT_Buffer_IsDeleted_Args a{};
  a.struct_size = PJRT_Buffer_IsDeleted_Args_STRUCT_SIZE;
  a.buffer = buffer_;
  client_->check(client_->api()->PJRT_Buffer_IsDeleted(&a), "PJRT_Buffer_IsDeleted");
  return a.is_deleted;
}

// ---- executables ----

PjrtExecutable::PjrtExecutable(std::shared_ptr<const ClientState> client,
                               PJRT_LoadedExecutable* exe)
    : client_(std::move(client)), exe_(exe) {}

PjrtExecutable::PjrtExecutable(PjrtExecutable&& o) noexcept
    : client_(std::move(o.client_)),
      exe_(std::exchange(o.exe_, nullptr)),
      devices_(std::move(o.devices_)),
      device_indices_(std::move(o.device_indices_)),
      argument_types_(std::move(o.argument_types_)),
      num_outputs_(o.num_outputs_),
      from_cache_(o.from_cache_) {}

PjrtExecutable& PjrtExecutable::operator=(PjrtExecutable&& o) noexcept {
  if (this != &o) {
    release();
    client_ = std::move(o.client_);
    exe_ = std::exchange(o.exe_, nullptr);
    devices_ = std::move(o.devices_);
    device_indices_ = std::move(o.device_indices_);
    argument_types_ = std::move(o.argument_types_);
    num_outputs_ = o.num_outputs_;
    from_cache_ = o.from_cache_;
  }
  return *this;
}

PjrtExecutable::~PjrtExecutable() { release(); }

void PjrtExecutable::release() {
  if (!exe_) return;
  PJRT_LoadedExecutable_Destroy_Args a{};
  a.struct_size = PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE;
  a.executable = exe_;
  exe_ = nullptr;
  // (a client destroyed at exit: the executable is left to the process's end)
  if (client_->client)
    if (PJRT_Error* err = client_->api()->PJRT_LoadedExecutable_Destroy(&a)) {
      PJRT_Error_Destroy_Args d{PJRT_Error_Destroy_Args_STRUCT_SIZE, nullptr, err};
      client_->api()->PJRT_Error_Destroy(&d);
    }
  client_.reset();  // the last user of a client destroys it
}

namespace {

// The PJRT_Executable of a loaded one, destroyed with the holder; null where the plugin lacks
// PJRT_LoadedExecutable_GetExecutable.
struct ExecutableView {
  const ClientState* client = nullptr;
  PJRT_Executable* exe = nullptr;
  ExecutableView(const ClientState& c, PJRT_LoadedExecutable* loaded) : client(&c) {
    if (!c.plugin->has_entry(offsetof(PJRT_Api, PJRT_LoadedExecutable_GetExecutable))) return;
    PJRT_LoadedExecutable_GetExecutable_Args a{};
    a.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE;
    a.loaded_executable = loaded;
    c.check(c.api()->PJRT_LoadedExecutable_GetExecutable(&a),
            "PJRT_LoadedExecutable_GetExecutable");
    exe = a.executable;
  }
  ~ExecutableView() {
    if (!exe) return;
    PJRT_Executable_Destroy_Args d{};
    d.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
    d.executable = exe;
    if (PJRT_Error* err = client->api()->PJRT_Executable_Destroy(&d)) {
      PJRT_Error_Destroy_Args e{PJRT_Error_Destroy_Args_STRUCT_SIZE, nullptr, err};
      client->api()->PJRT_Error_Destroy(&e);
    }
  }
  ExecutableView(const ExecutableView&) = delete;
  ExecutableView& operator=(const ExecutableView&) = delete;
};

// The error's message, destroyed; "" for none.
std::string take_error(const ClientState& c, PJRT_Error* err) {
  if (!err) return {};
  PJRT_Error_Message_Args m{};
  m.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE;
  m.error = err;
  c.api()->PJRT_Error_Message(&m);
  std::string text(m.message, m.message_size);
  PJRT_Error_Destroy_Args d{PJRT_Error_Destroy_Args_STRUCT_SIZE, nullptr, err};
  c.api()->PJRT_Error_Destroy(&d);
  return text.empty() ? "error" : text;
}

}  // namespace

std::optional<PjrtExecutable::MemoryStats> PjrtExecutable::memory_stats() const {
  if (!exe_ || !client_->client ||
      !client_->plugin->has_entry(offsetof(PJRT_Api, PJRT_Executable_GetCompiledMemoryStats)))
    return std::nullopt;
  ExecutableView view(*client_, exe_);
  if (!view.exe) return std::nullopt;
  PJRT_Executable_GetCompiledMemoryStats_Args a{};
  a.struct_size = PJRT_Executable_GetCompiledMemoryStats_Args_STRUCT_SIZE;
  a.executable = view.exe;
  // (a plugin that does not compute them answers with an error: the stats are then unknown)
  if (!take_error(*client_, client_->api()->PJRT_Executable_GetCompiledMemoryStats(&a)).empty())
    return std::nullopt;
  MemoryStats m;
  m.arguments = a.argument_size_in_bytes;
  m.outputs = a.output_size_in_bytes;
  m.aliased = a.alias_size_in_bytes;
  m.temporaries = a.temp_size_in_bytes;
  m.code = a.generated_code_size_in_bytes;
  m.peak = a.peak_memory_in_bytes;
  return m;
}

std::string PjrtExecutable::optimized_program(std::string* format) const {
  if (!exe_ || !client_->client ||
      !client_->plugin->has_entry(offsetof(PJRT_Api, PJRT_Executable_OptimizedProgram)))
    return {};
  ExecutableView view(*client_, exe_);
  if (!view.exe) return {};
  PJRT_Program program{};
  program.struct_size = PJRT_Program_STRUCT_SIZE;
  PJRT_Executable_OptimizedProgram_Args a{};
  a.struct_size = PJRT_Executable_OptimizedProgram_Args_STRUCT_SIZE;
  a.executable = view.exe;
  a.program = &program;
  if (!take_error(*client_, client_->api()->PJRT_Executable_OptimizedProgram(&a)).empty())
    return {};
  std::string code(program.code_size, '\0');
  program.code = code.data();
  if (!take_error(*client_, client_->api()->PJRT_Executable_OptimizedProgram(&a)).empty())
    return {};
  if (format) *format = std::string(program.format, program.format_size);
  return code;
}

void PjrtExecutable::check_argument(size_t i, const PjrtBuffer& buffer) const {
  const ArgumentType& want = argument_types_[i];
  const DType dtype = buffer.dtype();
  const Shape shape = buffer.shape();
  LS_CHECK(dtype == want.dtype && shape == want.shape, "execute: argument ", i, " is ",
           dtype_name(dtype), shape.str(), ", the program takes ", dtype_name(want.dtype),
           want.shape.str());
}

std::vector<PjrtBuffer> PjrtExecutable::execute(const std::vector<PjrtBuffer*>& args,
                                                const std::vector<bool>& donate) {
  LS_CHECK(num_replicas() == 1, "execute: the program has ", num_replicas(),
           " replicas; pass one argument list per replica");
  auto out = execute_replicas({args}, donate);
  return std::move(out[0]);
}

std::vector<std::vector<PjrtBuffer>> PjrtExecutable::execute_replicas(
    const std::vector<std::vector<PjrtBuffer*>>& args, const std::vector<bool>& donate) {
  LS_CHECK(exe_, "execute: the executable is empty (moved from)");
  const size_t replicas = devices_.size();
  LS_CHECK(args.size() == replicas, "execute: ", args.size(), " argument lists for a program of ",
           replicas, " replicas (give one list per replica)");
  const size_t num_args = args[0].size();
  LS_CHECK(donate.empty() || donate.size() == num_args, "execute: donate has ", donate.size(),
           " entries for ", num_args, " arguments");
  LS_CHECK(argument_types_.empty() || argument_types_.size() == num_args, "execute: ", num_args,
           " arguments for a program of ", argument_types_.size());
  std::vector<std::vector<PJRT_Buffer*>> in(replicas);
  std::vector<PJRT_Buffer* const*> in_lists(replicas);
  for (size_t r = 0; r < replicas; ++r) {
    LS_CHECK(args[r].size() == num_args, "execute: replica ", r, " has ", args[r].size(),
             " arguments, replica 0 has ", num_args);
    for (size_t i = 0; i < num_args; ++i) {
      LS_CHECK(args[r][i] && args[r][i]->valid(), "execute: argument ", i, " of replica ", r,
               " is an empty buffer (moved from, reset, or donated to an earlier run)");
      if (!argument_types_.empty()) check_argument(i, *args[r][i]);
      in[r].push_back(args[r][i]->handle());
    }
    in_lists[r] = in[r].data();
  }
  std::vector<int64_t> keep;  // arguments the program may not take over
  for (size_t i = 0; i < num_args; ++i)
    if (donate.empty() || !donate[i]) keep.push_back(int64_t(i));
  std::vector<std::vector<PJRT_Buffer*>> out(replicas,
                                             std::vector<PJRT_Buffer*>(num_outputs_, nullptr));
  std::vector<PJRT_Buffer**> out_lists(replicas);
  for (size_t r = 0; r < replicas; ++r) out_lists[r] = out[r].data();
  std::vector<PJRT_Event*> done(replicas, nullptr);

  PJRT_ExecuteOptions opts{};
  opts.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
  opts.non_donatable_input_indices = keep.data();
  opts.num_non_donatable_input_indices = keep.size();
  PJRT_LoadedExecutable_Execute_Args a{};
  a.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
  a.executable = exe_;
  a.options = &opts;
  a.argument_lists = in_lists.data();
  a.num_devices = replicas;
  a.num_args = num_args;
  a.output_lists = out_lists.data();
  a.device_complete_events = done.data();
  const std::string todo =
      "Check the arguments' shapes and dtypes against the module's @main signature";
  client_->check(client_->api()->PJRT_LoadedExecutable_Execute(&a), "PJRT execute", todo);
  // Own the outputs first, so that they are freed if a replica failed.
  std::vector<std::vector<PjrtBuffer>> result(replicas);
  for (size_t r = 0; r < replicas; ++r)
    for (PJRT_Buffer* b : out[r]) result[r].emplace_back(client_, b);
  for (size_t r = 0; r < replicas; ++r)
    await_event(*client_, done[r], "PJRT execute (replica " + std::to_string(r) + ")",
                "The program failed while running; the plugin's message says where");
  for (size_t i = 0; i < donate.size(); ++i)
    if (donate[i])
      for (size_t r = 0; r < replicas; ++r) args[r][i]->reset();
  return result;
}

}  // namespace lockstep::xla
