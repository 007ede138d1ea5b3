// The NVIDIA libraries of a Python CUDA installation, opened before the CUDA PJRT plugin (see
// pjrt_plugin.h): what JAX's jax_plugins/xla_cuda*/__init__.py does before it loads the plugin.
#include <dlfcn.h>

#include <algorithm>
#include <filesystem>

#include "backends/xla/pjrt_plugin.h"

namespace fs = std::filesystem;

namespace lockstep::xla {

namespace {

// The libraries, each before those that need it (cuBLAS needs cuBLASLt, cuSPARSE and cuSOLVER
// need nvJitLink, all need cudart).
const std::vector<std::string>& nvidia_library_names() {
  static const std::vector<std::string> names = {
      "libcudart",   "libnvJitLink", "libcublasLt", "libcublas",       "libcufft", "libcusolver",
      "libcusparse", "libcudnn",     "libnccl",     "libnvshmem_host", "libcupti"};
  return names;
}

// "libcublas.so" or "libcublas.so.13" is `name`'s library ("libcublasLt.so.13" is not).
bool is_library(const std::string& file, const std::string& name) {
  const std::string so = name + ".so";
  return file == so || file.rfind(so + ".", 0) == 0;
}

// The <site>/nvidia/*/lib folders, sorted.
std::vector<fs::path> nvidia_lib_dirs(const fs::path& site) {
  std::vector<fs::path> dirs;
  std::error_code ec;
  if (!fs::is_directory(site / "nvidia", ec)) return dirs;
  for (auto& e : fs::directory_iterator(site / "nvidia", ec))
    if (fs::is_directory(e.path() / "lib", ec)) dirs.push_back(e.path() / "lib");
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

}  // namespace

std::vector<std::string> nvidia_library_files(const std::string& plugin_path) {
  // <site>/jax_plugins/xla_cuda13/xla_cuda_plugin.so -> <site>
  const fs::path site = fs::path(plugin_path).parent_path().parent_path().parent_path();
  std::vector<fs::path> files;
  std::error_code ec;
  for (const fs::path& dir : nvidia_lib_dirs(site))
    for (auto& e : fs::directory_iterator(dir, ec))
      if (e.is_regular_file(ec) || e.is_symlink(ec)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<std::string> out;
  for (const std::string& name : nvidia_library_names())
    for (const fs::path& f : files)
      if (is_library(f.filename().string(), name)) {
        out.push_back(f.string());
        break;
      }
  return out;
}

std::string preload_nvidia_libraries(const std::string& plugin_path) {
  const std::vector<std::string> files = nvidia_library_files(plugin_path);
  if (files.empty())
    return "No NVIDIA libraries were found beside the plugin (site-packages/nvidia/*/lib); "
           "install the CUDA wheels (pip install \"jax[cuda13]\") or put CUDA's libraries on "
           "LD_LIBRARY_PATH";
  std::string failed;
  for (const std::string& f : files)
    if (!dlopen(f.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
      const char* why = dlerror();
      failed += "\n  " + f + ": " + (why ? why : "dlopen failed");
    }
  return failed.empty() ? "" : "These NVIDIA libraries of the installation did not load:" + failed;
}

}  // namespace lockstep::xla
