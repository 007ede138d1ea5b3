// Loading a PJRT plugin: finding the file, dlopen + GetPjrtApi, the version check and
// PJRT_Plugin_Initialize (see pjrt_plugin.h).
#include "backends/xla/pjrt_plugin.h"

#include <dlfcn.h>
#include <pjrt_c_api.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <sstream>

#include "lockstep/core/error.h"

namespace fs = std::filesystem;

namespace lockstep::xla {

namespace {

// A plugin known by name: where it sits inside site-packages, and the package that ships it.
struct KnownPlugin {
  const char* name;
  std::vector<const char*> relative_paths;
  const char* install_hint;
};

const std::vector<KnownPlugin>& known_plugins() {
  static const std::vector<KnownPlugin> plugins = {
      {"cpu",
       {"xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so"},
       "pip install xla-cpu-pjrt (scripts/setup_xla.sh makes .venv-xla with it)"},
      {"cuda",
       {"jax_plugins/xla_cuda13/xla_cuda_plugin.so", "jax_plugins/xla_cuda12/xla_cuda_plugin.so"},
       "pip install jax-cuda13-pjrt (CUDA 13) or jax-cuda12-pjrt (CUDA 12)"},
      {"tpu", {"libtpu/libtpu.so"}, "pip install libtpu"},
  };
  return plugins;
}

std::string known_plugin_names() {
  std::string s;
  for (auto& p : known_plugins()) s += (s.empty() ? "\"" : ", \"") + std::string(p.name) + "\"";
  return s;
}

// site-packages folders of a venv (or any prefix): <prefix>/lib/python3*/site-packages.
void add_venv_sites(const std::string& prefix, std::vector<std::string>& out) {
  std::error_code ec;
  fs::path lib = fs::path(prefix) / "lib";
  if (prefix.empty() || !fs::is_directory(lib, ec)) return;
  for (auto& e : fs::directory_iterator(lib, ec)) {
    const std::string name = e.path().filename().string();
    fs::path site = e.path() / "site-packages";
    if (name.rfind("python3", 0) == 0 && fs::is_directory(site, ec)) out.push_back(site.string());
  }
}

// The site-packages (and dist-packages) python3 on PATH reports, if there is one.
void add_python_sites(std::vector<std::string>& out) {
  const char* cmd =
      "python3 -c \"import site, sys; "
      "print('\\n'.join(site.getsitepackages() + [site.getusersitepackages()]))\" 2>/dev/null";
  FILE* p = popen(cmd, "r");
  if (!p) return;
  char line[4096];
  while (std::fgets(line, sizeof line, p)) {
    std::string s(line);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    if (!s.empty()) out.push_back(s);
  }
  pclose(p);
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// PJRT_NamedValue as text.
std::string named_value_text(const PJRT_NamedValue& v) {
  std::ostringstream os;
  switch (v.type) {
    case PJRT_NamedValue_kString:
      return std::string(v.string_value, v.value_size);
    case PJRT_NamedValue_kInt64:
      os << v.int64_value;
      break;
    case PJRT_NamedValue_kInt64List:
      for (size_t i = 0; i < v.value_size; ++i) os << (i ? "." : "") << v.int64_array_value[i];
      break;
    case PJRT_NamedValue_kFloat:
      os << v.float_value;
      break;
    case PJRT_NamedValue_kBool:
      os << (v.bool_value ? "true" : "false");
      break;
  }
  return os.str();
}

const char* error_code_name(PJRT_Error_Code code) {
  static const char* names[] = {"OK",
                                "CANCELLED",
                                "UNKNOWN",
                                "INVALID_ARGUMENT",
                                "DEADLINE_EXCEEDED",
                                "NOT_FOUND",
                                "ALREADY_EXISTS",
                                "PERMISSION_DENIED",
                                "RESOURCE_EXHAUSTED",
                                "FAILED_PRECONDITION",
                                "ABORTED",
                                "OUT_OF_RANGE",
                                "UNIMPLEMENTED",
                                "INTERNAL",
                                "UNAVAILABLE",
                                "DATA_LOSS",
                                "UNAUTHENTICATED"};
  int c = int(code);
  return c >= 0 && c < int(std::size(names)) ? names[c] : "UNKNOWN";
}

// The end of the last PJRT_Api entry Lockstep calls: a plugin's table must reach it.
size_t required_api_size() {
  const size_t offsets[] = {
      offsetof(PJRT_Api, PJRT_Error_Destroy),
      offsetof(PJRT_Api, PJRT_Error_Message),
      offsetof(PJRT_Api, PJRT_Error_GetCode),
      offsetof(PJRT_Api, PJRT_Plugin_Initialize),
      offsetof(PJRT_Api, PJRT_Plugin_Attributes),
      offsetof(PJRT_Api, PJRT_Event_Destroy),
      offsetof(PJRT_Api, PJRT_Event_Await),
      offsetof(PJRT_Api, PJRT_Client_Create),
      offsetof(PJRT_Api, PJRT_Client_Destroy),
      offsetof(PJRT_Api, PJRT_Client_PlatformName),
      offsetof(PJRT_Api, PJRT_Client_AddressableDevices),
      offsetof(PJRT_Api, PJRT_Client_Compile),
      offsetof(PJRT_Api, PJRT_Client_BufferFromHostBuffer),
      offsetof(PJRT_Api, PJRT_DeviceDescription_Id),
      offsetof(PJRT_Api, PJRT_DeviceDescription_Kind),
      offsetof(PJRT_Api, PJRT_DeviceDescription_ToString),
      offsetof(PJRT_Api, PJRT_Device_GetDescription),
      offsetof(PJRT_Api, PJRT_Device_MemoryStats),
      offsetof(PJRT_Api, PJRT_Executable_Destroy),
      offsetof(PJRT_Api, PJRT_Executable_NumOutputs),
      offsetof(PJRT_Api, PJRT_LoadedExecutable_Destroy),
      offsetof(PJRT_Api, PJRT_LoadedExecutable_GetExecutable),
      offsetof(PJRT_Api, PJRT_LoadedExecutable_AddressableDevices),
      offsetof(PJRT_Api, PJRT_LoadedExecutable_Execute),
      offsetof(PJRT_Api, PJRT_Buffer_Destroy),
      offsetof(PJRT_Api, PJRT_Buffer_ElementType),
      offsetof(PJRT_Api, PJRT_Buffer_Dimensions),
      offsetof(PJRT_Api, PJRT_Buffer_ToHostBuffer),
      offsetof(PJRT_Api, PJRT_Buffer_IsDeleted),
  };
  size_t end = 0;
  for (size_t o : offsets) end = std::max(end, o + sizeof(void*));
  return end;
}

std::string version_text(int major, int minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

}  // namespace

int pjrt_header_major() { return PJRT_API_MAJOR; }
int pjrt_header_minor() { return PJRT_API_MINOR; }

namespace {

// The venvs' site-packages (no python started): $LOCKSTEP_XLA_VENV, the build's, $VIRTUAL_ENV.
std::vector<std::string> venv_site_dirs() {
  std::vector<std::string> dirs;
  add_venv_sites(env("LOCKSTEP_XLA_VENV"), dirs);
#ifdef LOCKSTEP_XLA_BUILD_SITE_DIR
  dirs.push_back(LOCKSTEP_XLA_BUILD_SITE_DIR);  // the venv scripts/setup_xla.sh made
#endif
  add_venv_sites(env("VIRTUAL_ENV"), dirs);
  return dirs;
}

// The first of `dirs` holding one of the plugin's relative paths ("" when none does).
std::string search(const std::vector<std::string>& dirs, const KnownPlugin& known) {
  std::error_code ec;
  for (const std::string& dir : dirs)
    for (const char* rel : known.relative_paths) {
      fs::path p = fs::path(dir) / rel;
      if (fs::is_regular_file(p, ec)) return p.string();
    }
  return "";
}

}  // namespace

std::vector<std::string> python_site_dirs() {
  std::vector<std::string> dirs = venv_site_dirs();
  add_python_sites(dirs);
  return dirs;
}

std::string find_pjrt_plugin(const std::string& spec_in) {
  const std::string spec = spec_in.empty() ? "cpu" : spec_in;
  std::error_code ec;
  const KnownPlugin* known = nullptr;
  for (auto& p : known_plugins())
    if (spec == p.name) known = &p;
  if (!known) {
    LS_CHECK(fs::is_regular_file(spec, ec), "PJRT plugin '", spec,
             "' not found: no such file, and not a plugin name (", known_plugin_names(),
             "). Give the path to the plugin's .so, or a name, or set LOCKSTEP_PJRT_PLUGIN.");
    return spec;
  }
  // The venvs first; python3 (a process start) only when they do not have it.
  std::vector<std::string> dirs = venv_site_dirs();
  std::string found = search(dirs, *known);
  if (found.empty()) {
    dirs = python_site_dirs();
    found = search(dirs, *known);
  }
  if (!found.empty()) return found;
  std::string looked;
  for (const std::string& dir : dirs) looked += "\n  " + dir;
  std::string wanted;
  for (const char* rel : known->relative_paths)
    wanted += (wanted.empty() ? "" : " or ") + std::string(rel);
  LS_FAIL("PJRT plugin '", spec, "' not found: looked for ", wanted, " in",
          looked.empty() ? " (no Python environment found)" : looked, "\nInstall it (",
          known->install_hint, "), or set LOCKSTEP_PJRT_PLUGIN to the plugin's .so.");
}

void check_pjrt_api_version(const std::string& path, int major, int minor, size_t api_struct_size) {
  const std::string theirs = version_text(major, minor);
  const std::string ours = version_text(PJRT_API_MAJOR, PJRT_API_MINOR);
  LS_CHECK(major == PJRT_API_MAJOR, "PJRT plugin ", path, " speaks PJRT C API ", theirs,
           ", Lockstep was built against ", ours,
           " (another major version: the ABI differs). Use a plugin built for PJRT C API ",
           PJRT_API_MAJOR, ".x.");
  LS_CHECK(api_struct_size >= required_api_size(), "PJRT plugin ", path,
           " is too old: it speaks PJRT C API ", theirs, " and its function table (",
           api_struct_size, " bytes) lacks functions Lockstep calls (it needs ",
           required_api_size(), " bytes; Lockstep was built against PJRT C API ", ours,
           "). Upgrade the plugin (pip install -U the package that ships it).");
}

std::shared_ptr<PjrtPlugin> PjrtPlugin::load(const std::string& spec) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<PjrtPlugin>> loaded;
  const std::string override_path = env("LOCKSTEP_PJRT_PLUGIN");
  const std::string path = find_pjrt_plugin(override_path.empty() ? spec : override_path);
  std::lock_guard<std::mutex> lock(mu);
  std::error_code ec;
  const std::string key = fs::weakly_canonical(path, ec).string();
  if (auto it = loaded.find(key); it != loaded.end()) return it->second;

  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  LS_CHECK(handle, "cannot load PJRT plugin ", path, ": ", dlerror(),
           " (is it a shared library for this machine? Check the path, or reinstall the plugin)");
  using GetApiFn = const PJRT_Api* (*)();
  auto get_api = reinterpret_cast<GetApiFn>(dlsym(handle, "GetPjrtApi"));
  if (!get_api) {
    dlclose(handle);
    LS_FAIL("PJRT plugin ", path,
            " does not export GetPjrtApi: it is not a PJRT plugin. Point Lockstep at the plugin's "
            ".so (e.g. xla_cpu_pjrt.so, xla_cuda_plugin.so, libtpu.so).");
  }
  const PJRT_Api* api = get_api();
  LS_CHECK(api, "PJRT plugin ", path, ": GetPjrtApi returned no API table (a broken plugin?)");
  check_pjrt_api_version(path, api->pjrt_api_version.major_version,
                         api->pjrt_api_version.minor_version, api->struct_size);

  std::shared_ptr<PjrtPlugin> plugin(new PjrtPlugin());
  plugin->path_ = path;
  plugin->api_ = api;
  plugin->major_ = api->pjrt_api_version.major_version;
  plugin->minor_ = api->pjrt_api_version.minor_version;
  PJRT_Plugin_Initialize_Args init{};
  init.struct_size = PJRT_Plugin_Initialize_Args_STRUCT_SIZE;
  plugin->check(api->PJRT_Plugin_Initialize(&init), "PJRT_Plugin_Initialize",
                "The plugin could not start; its message says why.");
  PJRT_Plugin_Attributes_Args attrs{};
  attrs.struct_size = PJRT_Plugin_Attributes_Args_STRUCT_SIZE;
  if (PJRT_Error* err = api->PJRT_Plugin_Attributes(&attrs)) {
    PJRT_Error_Destroy_Args d{PJRT_Error_Destroy_Args_STRUCT_SIZE, nullptr, err};
    api->PJRT_Error_Destroy(&d);  // attributes are informational only
  } else {
    for (size_t i = 0; i < attrs.num_attributes; ++i) {
      const PJRT_NamedValue& v = attrs.attributes[i];
      plugin->attributes_[std::string(v.name, v.name_size)] = named_value_text(v);
    }
  }
  loaded[key] = plugin;
  return plugin;
}

std::string PjrtPlugin::describe() const {
  std::string s =
      fs::path(path_).filename().string() + " (PJRT C API " + version_text(major_, minor_);
  if (auto it = attributes_.find("stablehlo_current_version"); it != attributes_.end())
    s += ", StableHLO " + it->second;
  if (auto it = attributes_.find("xla_version"); it != attributes_.end())
    s += ", XLA " + it->second;
  return s + ")";
}

void PjrtPlugin::check(PJRT_Error* err, const std::string& what, const std::string& todo) const {
  if (!err) return;
  PJRT_Error_Message_Args m{};
  m.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE;
  m.error = err;
  api_->PJRT_Error_Message(&m);
  std::string message(m.message, m.message_size);
  PJRT_Error_GetCode_Args c{};
  c.struct_size = PJRT_Error_GetCode_Args_STRUCT_SIZE;
  c.error = err;
  PJRT_Error_Code code = PJRT_Error_Code_UNKNOWN;
  if (!api_->PJRT_Error_GetCode(&c)) code = c.code;
  PJRT_Error_Destroy_Args d{};
  d.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
  d.error = err;
  api_->PJRT_Error_Destroy(&d);
  std::string advice = todo;
  if (code == PJRT_Error_Code_RESOURCE_EXHAUSTED)
    advice =
        "The device is out of memory: use a smaller batch or model, or fewer steps per "
        "execution";
  LS_FAIL(what, " failed: ", message, " [", error_code_name(code), "] (PJRT plugin ", path_, ")",
          advice.empty() ? "" : ". ", advice);
}

}  // namespace lockstep::xla
