// The kernel backends Lockstep knows, in one place: CompileOptions::backend and compile()'s
// check, the executable's fallback, the op declarations' kernel coverage, docs/ops.md and the
// tests all read this list. A new backend ("cuda" comes later) is one line here.
#pragma once
#include <string>
#include <vector>

namespace lockstep {

/// One backend Lockstep knows, whether or not its module is loaded (see registered_backends()).
struct BackendInfo {
  std::string name;  ///< as in CompileOptions::backend: "reference", "cpu", "xla"
  std::string doc;   ///< one line for errors and docs/ops.md
  bool host = true;  ///< its kernels read and write host memory
};

/// Every backend, the reference first.
const std::vector<BackendInfo>& known_backends();

/// The backend every other host backend falls back to, op by op, when it has no kernel.
inline const char* const kReferenceBackend = "reference";

/// Whether `name` is in known_backends().
bool is_known_backend(const std::string& name);

/// The names of the host backends ({"reference", "cpu"}): what an op declares by default.
std::vector<std::string> host_backends();

/// "\"reference\", \"cpu\"", for error messages that list the valid choices.
std::string known_backend_names();

}  // namespace lockstep
