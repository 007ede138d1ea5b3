// Small string helpers (lockstep/core/strings.h).
#include "lockstep/core/strings.h"

namespace lockstep {

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

}  // namespace lockstep
