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
// The environment variable LOCKSTEP_PJRT_PLUGIN (a path) overrides the spec.
// Every failure is a lockstep::Error naming the file and what to do.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

struct PJRT_Api;
struct PJRT_Error;

namespace lockstep::xla {

class PjrtPlugin {
 public:
  static std::shared_ptr<PjrtPlugin> load(const std::string& spec);

  const std::string& path() const { return path_; }
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
  const PJRT_Api* api_ = nullptr;
  int major_ = 0, minor_ = 0;
  std::map<std::string, std::string> attributes_;
};

// The PJRT C API version Lockstep was built against (the header's PJRT_API_MAJOR/MINOR).
int pjrt_header_major();
int pjrt_header_minor();

// The version check load() runs on a plugin's reported version and the size of its function
// table: the major version must equal the header's, and the table must hold every function
// Lockstep calls (an older plugin's is shorter). Throws naming the plugin, both versions and
// what to do. Exposed for tests.
void check_pjrt_api_version(const std::string& plugin_path, int major, int minor,
                            size_t api_struct_size);

// The plugin file for a spec (see above): a path is returned as it is when the file exists;
// a name is looked up in the Python environments. Throws listing where it looked.
std::string find_pjrt_plugin(const std::string& spec);

// The site-packages folders find_pjrt_plugin searches for a name, in order.
std::vector<std::string> python_site_dirs();

}  // namespace lockstep::xla
