// The registry of backends (lockstep/graph/backend.h).
#include "lockstep/graph/backend.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "lockstep/core/error.h"

namespace lockstep {

namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<const Backend>> backends;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_backend(std::shared_ptr<const Backend> backend) {
  LS_CHECK(backend, "register_backend: null backend");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const std::string name = backend->name();
  LS_CHECK(!r.backends.count(name), "backend '", name, "' registered twice");
  r.backends.emplace(name, std::move(backend));
}

const Backend& find_backend(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.backends.find(name);
  if (it != r.backends.end()) return *it->second;
  std::string known, docs;
  for (const auto& [n, b] : r.backends) {
    known += (known.empty() ? "\"" : ", \"") + n + "\"";
    docs += "; " + n + ": " + b->doc();
  }
  LS_FAIL("unknown backend \"", name, "\"; the registered backends are ", known, docs,
          " (a backend's module must be linked: Lockstep::lockstep links them all)");
}

std::vector<std::string> registered_backends() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [n, _] : r.backends) names.push_back(n);
  return names;
}

}  // namespace lockstep
