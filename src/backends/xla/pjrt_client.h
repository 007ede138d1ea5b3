// A PJRT client over one plugin: its devices, programs compiled from StableHLO text, device
// buffers, and execution. RAII throughout: a PjrtBuffer or PjrtExecutable keeps its client alive
// and frees its PJRT object when destroyed. Every PJRT_Error becomes a lockstep::Error with the
// plugin's message and what to do.
//
//   auto client = PjrtClient::create({.plugin = "cpu", .device_count = 2});
//   PjrtExecutable exe = client->compile(mlir_text, {.num_replicas = 1});
//   PjrtBuffer x = client->to_device(host_tensor, /*device=*/0);
//   std::vector<PjrtBuffer> out = exe.execute({&x});  // execute_replicas for R > 1
//   Tensor y = client->to_host(out[0]);
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "backends/xla/pjrt_plugin.h"
#include "lockstep/core/tensor.h"

struct PJRT_Client;
struct PJRT_Device;
struct PJRT_Buffer;
struct PJRT_LoadedExecutable;

namespace lockstep::xla {

// One PJRT_Client_Create option: a name and a string, int64, int64 list, float or bool.
struct PluginOption {
  std::string name;
  std::variant<std::string, int64_t, std::vector<int64_t>, float, bool> value;
};

struct PjrtClientOptions {
  // A plugin path or name ("cpu", "cuda", "tpu"); see PjrtPlugin::load. Empty: "cpu" (or env
  // LOCKSTEP_PJRT_PLUGIN).
  std::string plugin;
  // How many devices, 0 = the plugin's default. Sent only to a plugin that takes it: the CPU
  // plugin as "cpu_device_count", the CUDA plugin as "visible_devices" = the first N GPUs.
  // Other plugins (libtpu, unknown ones) fix their own device count and get nothing.
  int device_count = 0;
  // The CUDA plugin's allocator, for a GPU shared with other processes. Unset fields take the
  // environment's value (LOCKSTEP_XLA_GPU_PREALLOCATE = true/false,
  // LOCKSTEP_XLA_GPU_MEMORY_FRACTION = a share in (0, 1], LOCKSTEP_XLA_GPU_ALLOCATOR =
  // default/platform/bfc/cuda_async), else: no preallocation (the plugin's own default would take
  // 75% of the GPU at start), the plugin's memory fraction and allocator. Other plugins get none of
  // these.
  std::optional<bool> gpu_preallocate;
  std::optional<double> gpu_memory_fraction;
  std::string gpu_allocator;
  // More create options, passed to the plugin as they are (after the ones above; a plugin
  // refuses names it does not know).
  std::vector<PluginOption> extra_options;
};

// The create options a plugin of `kind` gets for `options` (see PjrtClientOptions): only those
// it accepts. Throws for a malformed environment value, naming the variable.
std::vector<PluginOption> plugin_create_options(PluginKind kind, const PjrtClientOptions& options);

// One addressable device of a client.
struct PjrtDevice {
  int id = 0;               // the plugin's device id
  std::string kind;         // "cpu", "NVIDIA H200", ...
  std::string description;  // "TFRT_CPU_0", "CudaDevice(id=0)", ...
  PJRT_Device* handle = nullptr;
};

struct ClientState;  // plugin + PJRT_Client, shared by the client's buffers and executables

// A device buffer: one array on one device. Move-only; freed on destruction.
class PjrtBuffer {
 public:
  PjrtBuffer() = default;
  PjrtBuffer(std::shared_ptr<const ClientState> client, PJRT_Buffer* buffer);
  PjrtBuffer(PjrtBuffer&& o) noexcept;
  PjrtBuffer& operator=(PjrtBuffer&& o) noexcept;
  PjrtBuffer(const PjrtBuffer&) = delete;
  PjrtBuffer& operator=(const PjrtBuffer&) = delete;
  ~PjrtBuffer();

  bool valid() const { return buffer_ != nullptr; }
  DType dtype() const;
  Shape shape() const;
  // The bytes it takes on its device (PJRT_Buffer_OnDeviceSizeInBytes; its dims x element size
  // where the plugin does not say).
  int64_t on_device_bytes() const;
  // True once a program it was donated to has taken its memory.
  bool is_deleted() const;
  PJRT_Buffer* handle() const { return buffer_; }
  void reset();  // frees the buffer now

 private:
  std::shared_ptr<const ClientState> client_;
  PJRT_Buffer* buffer_ = nullptr;
};

// The element type and dims of one argument of a program.
struct ArgumentType {
  DType dtype = DType::f32;
  Shape shape;
};

struct CompileSpec {
  int num_replicas = 1;    // one copy of the program per device (data parallel)
  int num_partitions = 1;  // SPMD partitions (1: no model parallelism)
  // @main's argument types, checked against the buffers at every execute (the CPU plugin runs
  // a program on a buffer of the wrong dims without a word). Empty: not checked.
  std::vector<ArgumentType> argument_types;
  // SPMD partitioning (model parallelism: sharding annotations in the module, XLA's partitioner
  // writes each partition's program), and which client device (an index into
  // PjrtClient::devices()) partition p runs on: device_assignment[p] (empty: p). shardy: the
  // module's shardings are Shardy's (sdy.sharding) rather than GSPMD's (mhlo.sharding).
  bool spmd = false;
  bool shardy = false;
  std::vector<int> device_assignment;
};

// The serialized xla.CompileOptionsProto a PJRT compile needs: executable_build_options
// { num_replicas, num_partitions } (field 3 { 4, 5 }), hand-encoded. The plugins abort the
// process on an empty one, so every compile passes this.
std::string compile_options_proto(int num_replicas, int num_partitions);
// With SPMD: also use_spmd_partitioning (6), use_shardy_partitioner (19) when `shardy`, and a
// device_assignment (9: DeviceAssignmentProto {replica_count, computation_count,
// computation_devices[p] {replica_device_ids}}) of the PJRT device ids `device_ids`, one per
// partition (empty: none, the plugin picks).
std::string compile_options_proto(int num_replicas, int num_partitions, bool spmd, bool shardy,
                                  const std::vector<int64_t>& device_ids);

// A compiled program, loaded on its devices (one per replica).
class PjrtExecutable {
 public:
  PjrtExecutable() = default;
  PjrtExecutable(std::shared_ptr<const ClientState> client, PJRT_LoadedExecutable* exe);
  PjrtExecutable(PjrtExecutable&& o) noexcept;
  PjrtExecutable& operator=(PjrtExecutable&& o) noexcept;
  PjrtExecutable(const PjrtExecutable&) = delete;
  PjrtExecutable& operator=(const PjrtExecutable&) = delete;
  ~PjrtExecutable();

  bool valid() const { return exe_ != nullptr; }
  int num_replicas() const { return int(device_indices_.size()); }
  int num_outputs() const { return num_outputs_; }
  // The client device (index into PjrtClient::devices()) replica r runs on: put replica r's
  // arguments there.
  int device_of_replica(int r) const { return device_indices_[r]; }
  // True when compile() loaded it from the persistent compile cache (compile_cache.h).
  bool loaded_from_cache() const { return from_cache_; }

  // Runs every replica and waits for them. args[r][i] is argument i of replica r (on
  // device_of_replica(r)); returns outputs[r][k]. Donation: argument i with donate[i] true
  // (an empty vector donates none) hands its memory to the program where the module aliases it
  // to an output (StablehloModule's `alias_output`): the buffer is consumed (reset) and the
  // output reuses its memory, so an in-place update costs no copy. A non-donated argument is
  // never touched. Errors name the plugin and say what to do.
  std::vector<std::vector<PjrtBuffer>> execute_replicas(
      const std::vector<std::vector<PjrtBuffer*>>& args, const std::vector<bool>& donate = {});
  // One replica: execute_replicas with the arguments of replica 0.
  std::vector<PjrtBuffer> execute(const std::vector<PjrtBuffer*>& args,
                                  const std::vector<bool>& donate = {});

  // What the compiler planned for one device's program (PJRT_Executable_GetCompiledMemoryStats,
  // xla::CompiledMemoryStats), in bytes; under SPMD every partition runs the same program, so
  // these are per device. nullopt where the plugin does not say.
  struct MemoryStats {
    int64_t arguments = 0, outputs = 0, aliased = 0, temporaries = 0, code = 0;
    int64_t peak = 0;  // 0 where the plugin leaves it out (the CPU plugin: see xla_program.cpp)
  };
  std::optional<MemoryStats> memory_stats() const;
  // The compiled (optimized, partitioned) module as the plugin serializes it
  // (PJRT_Executable_OptimizedProgram): *format says how ("hlo": an HloModuleProto;
  // "hlo_with_config": one wrapped with its config). Empty where the plugin does not offer it.
  std::string optimized_program(std::string* format) const;

 private:
  friend class PjrtClient;
  void release();
  void check_argument(size_t i, const PjrtBuffer& buffer) const;
  std::shared_ptr<const ClientState> client_;
  PJRT_LoadedExecutable* exe_ = nullptr;
  std::vector<PJRT_Device*> devices_;
  std::vector<int> device_indices_;
  std::vector<ArgumentType> argument_types_;
  int num_outputs_ = 0;
  bool from_cache_ = false;
};

class PjrtClient {
 public:
  // Loads the plugin (once per process), creates a client and lists its devices.
  // Its create options are plugin_create_options(kind of the plugin, options). A client (its
  // PJRT_Client) is destroyed with its last user, or at exit before the plugin's own state is.
  static std::shared_ptr<PjrtClient> create(const PjrtClientOptions& options = {});

  const PjrtPlugin& plugin() const;
  const std::string& platform() const { return platform_; }            // "cpu", "cuda", "tpu"
  const std::vector<PjrtDevice>& devices() const { return devices_; }  // addressable ones
  // "cpu: 4 devices (TFRT_CPU_0, ...) via xla_cpu_pjrt.so (PJRT C API 0.81, StableHLO 1.13.3)".
  std::string describe() const;

  // Compiles MLIR text (StableHLO) or bytecode. A parse or verify error throws with the plugin's
  // MLIR diagnostics; where they name a line of `mlir`, the line is quoted. With the persistent
  // compile cache on (compile_cache.h) and a plugin that serializes executables, an entry for
  // the same module, options and plugin is loaded instead, and a compiled one is stored.
  PjrtExecutable compile(const std::string& mlir, const CompileSpec& spec = {}) const;
  // The compile cache's key for `mlir` compiled with the serialized compile options `options`
  // on this client (see compile_cache.h).
  std::string cache_key(const std::string& mlir, const std::string& options) const;
  // True when the plugin can serialize and load executables (the compile cache needs both).
  bool can_serialize() const;

  // Host -> device: a copy of `data` (row-major, `shape`, `dtype`) on device `device` (an index
  // into devices()). The host memory may be reused as soon as this returns.
  PjrtBuffer to_device(const void* data, DType dtype, const Shape& shape, int device = 0) const;
  PjrtBuffer to_device(const Tensor& host, int device = 0) const;
  // Device -> host: waits for the buffer and copies it into `dst` (nbytes must match).
  void to_host(const PjrtBuffer& buffer, void* dst, size_t nbytes) const;
  Tensor to_host(const PjrtBuffer& buffer) const;

  // Bytes in use on a device, or -1 where the plugin does not report it.
  int64_t bytes_in_use(int device = 0) const;

  ~PjrtClient();
  PjrtClient(const PjrtClient&) = delete;
  PjrtClient& operator=(const PjrtClient&) = delete;

 private:
  PjrtClient() = default;
  // A loaded executable (owned from here on) with its devices and output count.
  PjrtExecutable wrap(PJRT_LoadedExecutable* loaded, const CompileSpec& spec) const;
  std::shared_ptr<ClientState> state_;
  std::string platform_;
  std::vector<PjrtDevice> devices_;
};

// How many clients' states (a PJRT_Client with its plugin) are alive in the process: a client
// lives while its PjrtClient, buffers or executables do (tests: every one is destroyed).
int live_client_states();

// PJRT element types for Lockstep's dtypes (f32, bf16, f16, i32, i64, u8); throws for others.
int pjrt_buffer_type(DType dtype);
DType dtype_from_pjrt(int pjrt_type);

}  // namespace lockstep::xla
