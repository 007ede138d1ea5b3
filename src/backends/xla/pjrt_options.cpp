// The PJRT_Client_Create options each plugin gets (see pjrt_client.h): only those it accepts,
// since the CUDA plugin and libtpu refuse a name they do not know.
#include <pjrt_c_api.h>

#include <cstdlib>
#include <string>

#include "backends/xla/pjrt_client.h"
#include "backends/xla/pjrt_client_state.h"
#include "lockstep/core/env.h"
#include "lockstep/core/error.h"

namespace lockstep::xla {

namespace {

std::optional<double> env_fraction(env::Id<env::Kind::value> id) {
  const char* name = env::decl(id.sw).name;
  const std::string v = env::text_or_empty(id);
  if (v.empty()) return std::nullopt;
  char* end = nullptr;
  const double f = std::strtod(v.c_str(), &end);
  LS_CHECK(end && *end == '\0' && f > 0 && f <= 1, "env ", name, "='", v,
           "': give the share of the GPU's memory the process may use, in (0, 1] (e.g. 0.5)");
  return f;
}

// The CUDA plugin's options (JAX's names: xla_client.generate_pjrt_gpu_plugin_options).
void add_cuda_options(const PjrtClientOptions& o, std::vector<PluginOption>& out) {
  out.push_back({"platform_name", std::string("cuda")});
  const std::optional<bool> env_prealloc = env::flag_if_set(env::xla_gpu_preallocate);
  out.push_back({"preallocate", o.gpu_preallocate.value_or(env_prealloc.value_or(false))});
  std::optional<double> fraction = o.gpu_memory_fraction;
  if (!fraction) fraction = env_fraction(env::xla_gpu_memory_fraction);
  if (fraction) {
    LS_CHECK(*fraction > 0 && *fraction <= 1, "gpu_memory_fraction ", *fraction,
             ": give a share in (0, 1]");
    out.push_back({"memory_fraction", float(*fraction)});
  }
  const std::string allocator =
      o.gpu_allocator.empty() ? env::text_or_empty(env::xla_gpu_allocator) : o.gpu_allocator;
  if (!allocator.empty()) {
    LS_CHECK(allocator == "default" || allocator == "platform" || allocator == "bfc" ||
                 allocator == "cuda_async",
             "GPU allocator '", allocator,
             "' (LOCKSTEP_XLA_GPU_ALLOCATOR): give default, platform, bfc or cuda_async");
    out.push_back({"allocator", allocator});
  }
  if (o.device_count > 0) {
    std::vector<int64_t> first_n;
    for (int i = 0; i < o.device_count; ++i) first_n.push_back(i);
    out.push_back({"visible_devices", first_n});
  }
}

}  // namespace

std::vector<PluginOption> plugin_create_options(PluginKind kind, const PjrtClientOptions& o) {
  LS_CHECK(o.device_count >= 0, "device_count ", o.device_count, " must be >= 0");
  std::vector<PluginOption> out;
  if (kind == PluginKind::cpu && o.device_count > 0)
    out.push_back({"cpu_device_count", int64_t(o.device_count)});
  if (kind == PluginKind::cuda) add_cuda_options(o, out);
  out.insert(out.end(), o.extra_options.begin(), o.extra_options.end());
  return out;
}

std::vector<PJRT_NamedValue> named_values(const std::vector<PluginOption>& options) {
  std::vector<PJRT_NamedValue> out;
  for (const PluginOption& o : options) {
    PJRT_NamedValue v{};
    v.struct_size = PJRT_NamedValue_STRUCT_SIZE;
    v.name = o.name.data();
    v.name_size = o.name.size();
    v.value_size = 1;
    if (auto* s = std::get_if<std::string>(&o.value)) {
      v.type = PJRT_NamedValue_kString;
      v.string_value = s->data();
      v.value_size = s->size();
    } else if (auto* i = std::get_if<int64_t>(&o.value)) {
      v.type = PJRT_NamedValue_kInt64;
      v.int64_value = *i;
    } else if (auto* l = std::get_if<std::vector<int64_t>>(&o.value)) {
      v.type = PJRT_NamedValue_kInt64List;
      v.int64_array_value = l->data();
      v.value_size = l->size();
    } else if (auto* f = std::get_if<float>(&o.value)) {
      v.type = PJRT_NamedValue_kFloat;
      v.float_value = *f;
    } else {
      v.type = PJRT_NamedValue_kBool;
      v.bool_value = std::get<bool>(o.value);
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace lockstep::xla
