// The list of kernel backends (lockstep/graph/backends.h).
#include "lockstep/graph/backends.h"

namespace lockstep {

const std::vector<BackendInfo>& known_backends() {
  static const std::vector<BackendInfo> backends = {
      {"reference", "readable serial loops: the oracle of every test and the fallback", true},
      {"cpu", "oneDNN convolutions and matmuls, OpenMP-parallel loops for the rest", true},
      // Not a host backend: it compiles whole graphs (src/backends/xla), so ops declare no
      // kernels for it and it is not in host_backends() (the ops' default coverage).
      {"xla", "the whole graph compiled by XLA through a PJRT plugin (StableHLO)", false},
  };
  return backends;
}

bool is_known_backend(const std::string& name) {
  for (const BackendInfo& b : known_backends())
    if (b.name == name) return true;
  return false;
}

std::vector<std::string> host_backends() {
  std::vector<std::string> names;
  for (const BackendInfo& b : known_backends())
    if (b.host) names.push_back(b.name);
  return names;
}

std::string known_backend_names() {
  std::string s;
  for (const BackendInfo& b : known_backends()) s += (s.empty() ? "\"" : ", \"") + b.name + "\"";
  return s;
}

}  // namespace lockstep
