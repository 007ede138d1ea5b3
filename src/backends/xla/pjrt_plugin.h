// A PJRT plugin loaded into the process: dlopen of a shared library that exports GetPjrtApi
// (the C ABI of XLA's plugins, pjrt_c_api.h), its API version checked against the header
// Lockstep was built with, and PJRT_Plugin_Initialize called once. A plugin stays loaded for
// the life of the process (plugins start threads and register globals; none of them supports
// dlclose), so load() returns the same object for the same file.
//
// Which file: load(spec) takes
//   - a path to the plugin's .so ("/opt/venv/.../xla_cpu_pjrt.so");
//   - or a name, found in a Python environment: "cpu" (PyPI xla-cpu-pjrt), "cuda" (jax-cuda13-pjrt
//     or jax-cuda12-pjrt), "tpu" (libtpu). The site-packages searched, in order:
//     $LOCKSTEP_XLA_VENV, the venv scripts/setup_xla.sh made at build time, $VIRTUAL_ENV, then
//     those python3 reports.
// An empty spec: the file env LOCKSTEP_PJRT_PLUGIN names, else "cpu". A spec given (--device
// xla:PLUGIN, env LOCKSTEP_XLA_PLUGIN) always wins over LOCKSTEP_PJRT_PLUGIN, with a warning when
// the two differ.
// Before it opens the CUDA plugin, load() opens the NVIDIA libraries of its Python installation
// (site-packages/nvidia/*/lib: cudart, cuBLAS, cuDNN, NCCL, ...) with RTLD_GLOBAL, as JAX's own
// loader does, so that the plugin finds them without LD_LIBRARY_PATH.
// Before the first call into a plugin, every entry of its API table that Lockstep calls is
// checked: a null one is an error naming the plugin and the function.
// Every failure is a lockstep::Error naming the file and what to do.
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

struct PJRT_Api;
struct PJRT_Error;

namespace lockstep::xla {

// Which plugin a file is, by its file name: what its PJRT_Client_Create accepts depends on it
// (pjrt_client.h, plugin_create_options).
enum class PluginKind { cpu, cuda, tpu, other };
PluginKind plugin_kind_of(const std::string& path);

class PjrtPlugin {
 public:
  static std::shared_ptr<PjrtPlugin> load(const std::string& spec);

  const std::string& path() const { return path_; }
  PluginKind kind() const { return kind_; }
  // True when the plugin's API table holds a non-null function at `offset` (offsetof(PJRT_Api,
  // fn)): for the functions Lockstep can do without (the compile cache's serialization).
  bool has_entry(size_t offset) const;
  const PJRT_Api* api() const { return api_; }
  int api_major() const { return major_; }
  int api_minor() const { return minor_; }
  // The plugin's attributes (xla_version, stablehlo_current_version, ...), values as text.
  const std::map<std::string, std::string>& attributes() const { return attributes_; }
  // "xla_cpu_pjrt.so (PJRT C API 0.81, StableHLO 1.13.3)".
  std::string describe() const;

  // Throws a lockstep::Error for `err` (and frees it): "<what> failed: <plugin message>
  // [<code>] (PJRT plugin <path>). <todo>". Returns when err is null.
  void check(PJRT_Error* err, const std::string& what, const std::string& todo = "") const;

 private:
  PjrtPlugin() = default;
  std::string path_;
  PluginKind kind_ = PluginKind::other;
  const PJRT_Api* api_ = nullptr;
  int major_ = 0, minor_ = 0;
  std::map<std::string, std::string> attributes_;
};

// The PJRT C API minor version Lockstep was built against (the header's PJRT_API_MINOR; the
// major version must match exactly, check_pjrt_api_version).
int pjrt_header_minor();

// The version check load() runs on a plugin's reported version and the size of its function
// table: the major version must equal the header's, and the table must hold every function
// Lockstep calls (an older plugin's is shorter). Throws naming the plugin, both versions and
// what to do. Exposed for tests.
void check_pjrt_api_version(const std::string& plugin_path, int major, int minor,
                            size_t api_struct_size);

// The check load() runs before the first call into a plugin: every entry of its API table
// that Lockstep calls is a function (not null). Throws naming the plugin and the function.
void check_pjrt_api_entries(const std::string& plugin_path, const PJRT_Api* api);

// The NVIDIA libraries load() opens before the CUDA plugin at `plugin_path`: in the
// site-packages the plugin is installed in (<site>/jax_plugins/xla_cuda13/xla_cuda_plugin.so),
// the folders <site>/nvidia/*/lib, and in them cudart, nvJitLink, cuBLASLt, cuBLAS, cuFFT,
// cuSOLVER, cuSPARSE, cuDNN, NCCL, NVSHMEM and CUPTI, in that order (each before the ones that
// need it), the first file of each found. Empty where there are none (CUDA from the system).
std::vector<std::string> nvidia_library_files(const std::string& plugin_path);
// Opens them (RTLD_NOW | RTLD_GLOBAL, never closed). Returns a note for an error message: the
// libraries that failed to open, or that none were found; empty when all opened.
std::string preload_nvidia_libraries(const std::string& plugin_path);

// The plugin file for a spec (see above): a path is returned as it is when the file exists;
// a name is looked up in the Python environments. Throws listing where it looked.
std::string find_pjrt_plugin(const std::string& spec);

// The site-packages folders find_pjrt_plugin searches for a name, in order.
std::vector<std::string> python_site_dirs();

}  // namespace lockstep::xla
