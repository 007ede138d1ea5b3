// Loading a PJRT plugin: finding the file, dlopen + GetPjrtApi, the version check and
// PJRT_Plugin_Initialize (see pjrt_plugin.h).
#include "backends/xla/pjrt_plugin.h"

#include <dlfcn.h>
#include <pjrt_c_api.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <sstream>

#include "lockstep/core/env.h"
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

// The PJRT_Api entries the loader calls, by name: load() checks each is there (inside the
// plugin's table, and not null) before the first call.
struct ApiEntry {
  const char* name;
  size_t offset;
};
#define LS_API_ENTRY(fn) \
  ApiEntry { #fn, offsetof(PJRT_Api, fn) }
const std::vector<ApiEntry>& required_api_entries() {
  static const std::vector<ApiEntry> entries = {
      LS_API_ENTRY(PJRT_Error_Destroy),
      LS_API_ENTRY(PJRT_Error_Message),
      LS_API_ENTRY(PJRT_Error_GetCode),
      LS_API_ENTRY(PJRT_Plugin_Initialize),
      LS_API_ENTRY(PJRT_Plugin_Attributes),
      LS_API_ENTRY(PJRT_Event_Destroy),
      LS_API_ENTRY(PJRT_Event_Await),
      LS_API_ENTRY(PJRT_Client_Create),
      LS_API_ENTRY(PJRT_Client_Destroy),
      LS_API_ENTRY(PJRT_Client_PlatformName),
      LS_API_ENTRY(PJRT_Client_AddressableDevices),
      LS_API_ENTRY(PJRT_Client_Compile),
      LS_API_ENTRY(PJRT_Client_BufferFromHostBuffer),
      LS_API_ENTRY(PJRT_DeviceDescription_Id),
      LS_API_ENTRY(PJRT_DeviceDescription_Kind),
      LS_API_ENTRY(PJRT_DeviceDescription_ToString),
      LS_API_ENTRY(PJRT_Device_GetDescription),
      LS_API_ENTRY(PJRT_Executable_Destroy),
      LS_API_ENTRY(PJRT_Executable_NumOutputs),
      LS_API_ENTRY(PJRT_LoadedExecutable_Destroy),
      LS_API_ENTRY(PJRT_LoadedExecutable_GetExecutable),
      LS_API_ENTRY(PJRT_LoadedExecutable_AddressableDevices),
      LS_API_ENTRY(PJRT_LoadedExecutable_Execute),
      LS_API_ENTRY(PJRT_Buffer_Destroy),
      LS_API_ENTRY(PJRT_Buffer_ElementType),
      LS_API_ENTRY(PJRT_Buffer_Dimensions),
      LS_API_ENTRY(PJRT_Buffer_ToHostBuffer),
      LS_API_ENTRY(PJRT_Buffer_IsDeleted),
  };
  return entries;
}
#undef LS_API_ENTRY

// The end of the last PJRT_Api entry Lockstep calls: a plugin's table must reach it. (The
// optional ones, PJRT_Device_MemoryStats and the executable (de)serialization of the compile
// cache, are checked where they are used.)
size_t required_api_size() {
  size_t end = 0;
  for (const ApiEntry& e : required_api_entries()) end = std::max(end, e.offset + sizeof(void*));
  return end;
}

std::string version_text(int major, int minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

}  // namespace

int pjrt_header_minor() { return PJRT_API_MINOR; }

namespace {

// The venvs' site-packages (no python started): $LOCKSTEP_XLA_VENV, the build's, $VIRTUAL_ENV.
std::vector<std::string> venv_site_dirs() {
  std::vector<std::string> dirs;
  add_venv_sites(env::text_or_empty(env::xla_venv), dirs);
#ifdef LOCKSTEP_XLA_BUILD_SITE_DIR
  dirs.push_back(LOCKSTEP_XLA_BUILD_SITE_DIR);  // the venv scripts/setup_xla.sh made
#endif
  add_venv_sites(env::text_or_empty(env::virtual_env), dirs);
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
    const fs::file_status st = fs::status(spec, ec);
    LS_CHECK(fs::exists(st), "PJRT plugin '", spec,
             "' not found: no such file, and not a plugin name (", known_plugin_names(),
             "). Give the path to the plugin's .so, or a name.");
    LS_CHECK(!fs::is_directory(st), "PJRT plugin '", spec,
             "' is a directory, not a PJRT plugin: give the path of the plugin's .so inside it "
             "(e.g. xla_cpu_pjrt.so, xla_cuda_plugin.so, libtpu.so), or a name (",
             known_plugin_names(), ")");
    LS_CHECK(fs::is_regular_file(st), "PJRT plugin '", spec,
             "' is not a regular file (a device, FIFO or socket), so not a PJRT plugin: give the "
             "path of the plugin's .so, or a name (",
             known_plugin_names(), ")");
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
          known->install_hint, "), or give the path of the plugin's .so (--device xla:PATH).");
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

void check_pjrt_api_entries(const std::string& path, const PJRT_Api* api) {
  const std::string version =
      version_text(api->pjrt_api_version.major_version, api->pjrt_api_version.minor_version);
  for (const ApiEntry& e : required_api_entries()) {
    void* fn = nullptr;
    std::memcpy(&fn, reinterpret_cast<const char*>(api) + e.offset, sizeof fn);
    LS_CHECK(fn, "PJRT plugin ", path, " is broken: its API table (PJRT C API ", version,
             ") has no ", e.name,
             " (a null function pointer), which Lockstep calls. Reinstall or upgrade the plugin.");
  }
}

PluginKind plugin_kind_of(const std::string& path) {
  const std::string file = fs::path(path).filename().string();
  if (file == "xla_cpu_pjrt.so") return PluginKind::cpu;
  if (file == "xla_cuda_plugin.so") return PluginKind::cuda;
  if (file == "libtpu.so") return PluginKind::tpu;
  return PluginKind::other;
}

namespace {

// The plugin file load(spec) uses: the spec when one is given (--device xla:X, env
// LOCKSTEP_XLA_PLUGIN); env LOCKSTEP_PJRT_PLUGIN only when none is (it never overrides a
// plugin asked for: that one is used, with a warning naming both); else "cpu".
std::string plugin_file_for(const std::string& spec) {
  const std::string env_path = env::text_or_empty(env::pjrt_plugin);
  if (spec.empty()) return find_pjrt_plugin(env_path.empty() ? "cpu" : env_path);
  const std::string path = find_pjrt_plugin(spec);
  std::error_code ec;
  if (!env_path.empty() && !fs::equivalent(env_path, path, ec)) {
    static std::mutex mu;
    static std::set<std::string> warned;  // once per (variable, plugin) pair
    std::lock_guard<std::mutex> lock(mu);
    if (warned.insert(env_path + "\n" + spec).second)
      std::fprintf(stderr,
                   "warning: env LOCKSTEP_PJRT_PLUGIN=%s is ignored: plugin '%s' was asked for "
                   "(--device xla:PLUGIN or env LOCKSTEP_XLA_PLUGIN), and it wins\n",
                   env_path.c_str(), spec.c_str());
  }
  return path;
}

// dlopen + GetPjrtApi, the version and table checks: the API table of a usable plugin.
const PJRT_Api* open_plugin(const std::string& path) {
  std::string preloaded;
  if (plugin_kind_of(path) == PluginKind::cuda) preloaded = preload_nvidia_libraries(path);
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  LS_CHECK(handle, "cannot load PJRT plugin ", path, ": ", dlerror(),
           " (is it a shared library for this machine? Check the path, or reinstall the plugin)",
           preloaded.empty() ? "" : ". ", preloaded);
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
  check_pjrt_api_entries(path, api);
  return api;
}

}  // namespace

std::shared_ptr<PjrtPlugin> PjrtPlugin::load(const std::string& spec) {
  static std::mutex mu;
  // Never destroyed: a plugin outlives every client (clients are released before exit's static
  // destructors run, pjrt_client.h), and no plugin supports dlclose.
  static auto& loaded = *new std::map<std::string, std::shared_ptr<PjrtPlugin>>();
  const std::string path = plugin_file_for(spec);
  std::lock_guard<std::mutex> lock(mu);
  std::error_code ec;
  const std::string key = fs::weakly_canonical(path, ec).string();
  if (auto it = loaded.find(key); it != loaded.end()) return it->second;

  const PJRT_Api* api = open_plugin(path);
  std::shared_ptr<PjrtPlugin> plugin(new PjrtPlugin());
  plugin->path_ = path;
  plugin->kind_ = plugin_kind_of(path);
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

bool PjrtPlugin::has_entry(size_t offset) const {
  if (offset + sizeof(void*) > api_->struct_size) return false;
  void* fn = nullptr;
  std::memcpy(&fn, reinterpret_cast<const char*>(api_) + offset, sizeof fn);
  return fn != nullptr;
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
