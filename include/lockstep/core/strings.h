// Small string helpers shared by every module.
#pragma once
#include <string>
#include <vector>

namespace lockstep {

/// The items with `separator` between them: join({"a", "b"}) == "a, b"; "" for none.
std::string join(const std::vector<std::string>& items, const std::string& separator = ", ");

}  // namespace lockstep
