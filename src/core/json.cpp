// parse_json: nlohmann's parser behind a depth limit (see json.h).
#include "lockstep/core/json.h"

#include "lockstep/core/error.h"

namespace lockstep {

int json_depth(std::string_view text, int stop_at) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // skips the escaped character (\" does not end the string)
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest && (deepest = depth) > stop_at) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

json parse_json(std::string_view text, const std::string& what, int max_depth) {
  const int depth = json_depth(text, max_depth);
  LS_CHECK(depth <= max_depth, what, ": JSON nested more than ", max_depth,
           " levels deep (the limit, kMaxJsonDepth; no model config needs that many)");
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    LS_FAIL(what, ": not valid JSON: ", e.what());
  }
}

}  // namespace lockstep
