// PjrtClient::compile: a StableHLO module to a loaded executable, through the persistent
// compile cache (compile_cache.h) where it is on and the plugin serializes executables.
#include <pjrt_c_api.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <sstream>

#include "backends/xla/compile_cache.h"
#include "backends/xla/pjrt_client.h"
#include "backends/xla/pjrt_client_state.h"
#include "lockstep/core/error.h"

namespace fs = std::filesystem;

namespace lockstep::xla {

namespace {

// The compile diagnostics with the lines of `mlir` they name quoted after them.
std::string quote_named_lines(const std::string& message, const std::string& mlir) {
  std::vector<std::string> lines;
  std::istringstream in(mlir);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  static const std::regex line_col(R"(:(\d+):(\d+))");
  std::string quoted;
  std::vector<int> seen;
  for (auto it = std::sregex_iterator(message.begin(), message.end(), line_col);
       it != std::sregex_iterator() && seen.size() < 3; ++it) {
    int line = std::stoi((*it)[1].str());
    if (line < 1 || line > int(lines.size())) continue;
    if (std::find(seen.begin(), seen.end(), line) != seen.end()) continue;
    seen.push_back(line);
    quoted += "\n  line " + std::to_string(line) + ": " + lines[line - 1];
  }
  return quoted.empty() ? message : message + "\nin the module:" + quoted;
}

PJRT_LoadedExecutable* compile_module(const ClientState& s, const std::string& mlir,
                                      const std::string& options) {
  static const char kFormat[] = "mlir";
  PJRT_Program program{};
  program.struct_size = PJRT_Program_STRUCT_SIZE;
  program.code = const_cast<char*>(mlir.data());
  program.code_size = mlir.size();
  program.format = kFormat;
  program.format_size = sizeof kFormat - 1;
  PJRT_Client_Compile_Args a{};
  a.struct_size = PJRT_Client_Compile_Args_STRUCT_SIZE;
  a.client = s.client;
  a.program = &program;
  a.compile_options = options.data();
  a.compile_options_size = options.size();
  try {
    s.check(s.api()->PJRT_Client_Compile(&a), "PJRT compile of the StableHLO module",
            "The module is not valid StableHLO for this plugin; the diagnostics above name "
            "the operation (its loc() names the Lockstep node)");
  } catch (const Error& e) {
    throw Error(quote_named_lines(e.what(), mlir));
  }
  return a.executable;
}

// PJRT_Executable of a loaded one, destroyed with the holder.
struct ExecutableOf {
  const ClientState& s;
  PJRT_Executable* exe = nullptr;
  ExecutableOf(const ClientState& state, PJRT_LoadedExecutable* loaded) : s(state) {
    PJRT_LoadedExecutable_GetExecutable_Args g{};
    g.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE;
    g.loaded_executable = loaded;
    s.check(s.api()->PJRT_LoadedExecutable_GetExecutable(&g),
            "PJRT_LoadedExecutable_GetExecutable");
    exe = g.executable;
  }
  ~ExecutableOf() {
    PJRT_Executable_Destroy_Args x{};
    x.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
    x.executable = exe;
    if (PJRT_Error* err = s.api()->PJRT_Executable_Destroy(&x)) {
      PJRT_Error_Destroy_Args d{PJRT_Error_Destroy_Args_STRUCT_SIZE, nullptr, err};
      s.api()->PJRT_Error_Destroy(&d);
    }
  }
};

std::string serialize(const ClientState& s, PJRT_LoadedExecutable* loaded) {
  ExecutableOf of(s, loaded);
  PJRT_Executable_Serialize_Args a{};
  a.struct_size = PJRT_Executable_Serialize_Args_STRUCT_SIZE;
  a.executable = of.exe;
  s.check(s.api()->PJRT_Executable_Serialize(&a), "PJRT_Executable_Serialize");
  std::string bytes(a.serialized_bytes, a.serialized_bytes_size);
  if (a.serialized_executable_deleter) a.serialized_executable_deleter(a.serialized_executable);
  return bytes;
}

PJRT_LoadedExecutable* deserialize(const ClientState& s, const std::string& bytes,
                                   const std::string& options) {
  PJRT_Executable_DeserializeAndLoad_Args a{};
  a.struct_size = PJRT_Executable_DeserializeAndLoad_Args_STRUCT_SIZE;
  a.client = s.client;
  a.serialized_executable = bytes.data();
  a.serialized_executable_size = bytes.size();
  a.overridden_serialized_compile_options = options.data();
  a.overridden_serialized_compile_options_size = options.size();
  s.check(s.api()->PJRT_Executable_DeserializeAndLoad(&a), "PJRT_Executable_DeserializeAndLoad");
  return a.loaded_executable;
}

// The plugin file's identity: its path, size and modification time.
std::string file_identity(const std::string& path) {
  std::error_code ec;
  struct stat st {};
  const std::string canonical = fs::weakly_canonical(path, ec).string();
  if (::stat(path.c_str(), &st) != 0) return canonical;
  return canonical + " " + std::to_string(st.st_size) + " " + std::to_string(st.st_mtim.tv_sec) +
         "." + std::to_string(st.st_mtim.tv_nsec);
}

std::string hex(const std::string& bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) out += {digits[c >> 4], digits[c & 15]};
  return out;
}

}  // namespace

bool PjrtClient::can_serialize() const {
  const PjrtPlugin& p = *state_->plugin;
  return p.has_entry(offsetof(PJRT_Api, PJRT_Executable_Serialize)) &&
         p.has_entry(offsetof(PJRT_Api, PJRT_Executable_DeserializeAndLoad));
}

std::string PjrtClient::cache_key(const std::string& mlir, const std::string& options) const {
  std::string kinds;
  for (const PjrtDevice& d : devices_) kinds += " " + d.kind;
  return "lockstep xla compile cache 1\nplugin file: " + file_identity(state_->plugin->path()) +
         "\nplugin: " + state_->plugin->describe() + "\nplatform: " + platform_ +
         "\ndevices: " + std::to_string(devices_.size()) + kinds +
         "\ncompile options: " + hex(options) + "\nmodule: " + hash128_hex(mlir) + " " +
         std::to_string(mlir.size()) + "\n";
}

PjrtExecutable PjrtClient::compile(const std::string& mlir, const CompileSpec& spec) const {
  LS_CHECK(spec.num_replicas * spec.num_partitions <= int(devices_.size()),
           "compile: ", spec.num_replicas, " replicas x ", spec.num_partitions,
           " partitions need as many ", platform_, " devices, the client has ", devices_.size(),
           (platform_ == "cpu" ? " (set PjrtClientOptions::device_count)" : ""));
  std::vector<int64_t> device_ids;  // (PJRT ids of the partitions' devices, replica-major)
  if (spec.spmd)
    for (int r = 0; r < spec.num_replicas; ++r)
      for (int p = 0; p < spec.num_partitions; ++p) {
        const int index = spec.device_assignment.empty()
                              ? r * spec.num_partitions + p
                              : spec.device_assignment.at(size_t(r * spec.num_partitions + p));
        LS_CHECK(index >= 0 && index < int(devices_.size()), "compile: partition ", p,
                 " is assigned device ", index, ", the client has ", devices_.size(), " (",
                 describe(), ")");
        device_ids.push_back(devices_[size_t(index)].id);
      }
  const std::string options = compile_options_proto(spec.num_replicas, spec.num_partitions,
                                                    spec.spmd, spec.shardy, device_ids);
  const std::string dir = compile_cache_dir();
  const bool cached = !dir.empty() && can_serialize();
  const CompileCache cache(dir);
  const std::string key = cached ? cache_key(mlir, options) : "";
  PJRT_LoadedExecutable* loaded = nullptr;
  if (cached)
    if (std::optional<std::string> bytes = cache.read(key)) try {
        loaded = deserialize(*state_, *bytes, options);
      } catch (const Error& e) {
        cache.reject(key, std::string("cannot be loaded (") + e.what() + ")");
      }
  const bool hit = loaded != nullptr;
  if (cached) hit ? count_compile_cache_hit() : count_compile_cache_miss();
  if (!hit) loaded = compile_module(*state_, mlir, options);
  PjrtExecutable exe = wrap(loaded, spec);
  exe.from_cache_ = hit;
  if (cached && !hit) try {
      cache.write(key, serialize(*state_, loaded));
    } catch (const Error& e) {
      std::fprintf(stderr, "warning: xla compile cache: cannot serialize the executable: %s\n",
                   e.what());
    }
  return exe;
}

PjrtExecutable PjrtClient::wrap(PJRT_LoadedExecutable* loaded, const CompileSpec& spec) const {
  PjrtExecutable exe(state_, loaded);
  const PJRT_Api* api = state_->api();
  PJRT_LoadedExecutable_AddressableDevices_Args d{};
  d.struct_size = PJRT_LoadedExecutable_AddressableDevices_Args_STRUCT_SIZE;
  d.executable = loaded;
  state_->check(api->PJRT_LoadedExecutable_AddressableDevices(&d),
                "PJRT_LoadedExecutable_AddressableDevices");
  for (size_t i = 0; i < d.num_addressable_devices; ++i) {
    exe.devices_.push_back(d.addressable_devices[i]);
    int index = -1;
    for (size_t k = 0; k < devices_.size(); ++k)
      if (devices_[k].handle == d.addressable_devices[i]) index = int(k);
    exe.device_indices_.push_back(index);
  }
  ExecutableOf of(*state_, loaded);
  PJRT_Executable_NumOutputs_Args n{};
  n.struct_size = PJRT_Executable_NumOutputs_Args_STRUCT_SIZE;
  n.executable = of.exe;
  state_->check(api->PJRT_Executable_NumOutputs(&n), "PJRT_Executable_NumOutputs");
  exe.num_outputs_ = int(n.num_outputs);
  exe.argument_types_ = spec.argument_types;
  return exe;
}

}  // namespace lockstep::xla
