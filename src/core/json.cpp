// parse_json: nlohmann's parser behind a depth limit and a value budget (see json.h).
#include "lockstep/core/json.h"

#include <climits>
#include <cstdint>

#include "core/internal/json_values.h"
#include "lockstep/core/error.h"

namespace lockstep {
namespace {

struct JsonScan {
  int deepest = 0;     // nesting depth reached
  int64_t values = 0;  // arrays, objects, strings (keys too) and literals
};

// One pass over the text, outside strings, stopping early once past either limit.
JsonScan scan_json(std::string_view text, int stop_depth, int64_t stop_values) {
  JsonScan s;
  int depth = 0;
  bool in_string = false;
  char prev = ',';  // the last structural character: a literal follows '[', ',' or ':'
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // skips the escaped character (\" does not end the string)
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '"') {
      in_string = true;
      ++s.values;
    } else if (c == '[' || c == '{') {
      ++s.values;
      if (++depth > s.deepest && (s.deepest = depth) > stop_depth) return s;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    } else if (c != ',' && c != ':' && (prev == '[' || prev == ',' || prev == ':')) {
      ++s.values;  // a number, true, false or null begins
    }
    if (s.values > stop_values) return s;
    prev = c;
  }
  return s;
}

}  // namespace

int json_depth(std::string_view text, int stop_at) {
  return scan_json(text, stop_at, INT64_MAX).deepest;
}

int64_t json_values(std::string_view text, int64_t stop_at) {
  return scan_json(text, INT_MAX, stop_at).values;
}

json parse_json(std::string_view text, const std::string& what, int max_depth) {
  return parse_json_within(text, what, max_depth, kMaxJsonValues);
}

json parse_json_within(std::string_view text, const std::string& what, int max_depth,
                       int64_t max_values) {
  const JsonScan s = scan_json(text, max_depth, max_values);
  LS_CHECK(s.deepest <= max_depth, what, ": JSON nested more than ", max_depth,
           " levels deep (the limit, kMaxJsonDepth; no model config needs that many)");
  LS_CHECK(s.values <= max_values, what, ": JSON of ", text.size(), " bytes holds more than ",
           max_values,
           " values (arrays, objects, strings and numbers; the limit, kMaxJsonValues, keeps "
           "parsing near 100 bytes a value from taking gigabytes). No model config needs that "
           "many: the file is damaged or crafted; if it is really yours, split it or write "
           "its large lists as separate files");
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    LS_FAIL(what, ": not valid JSON: ", e.what());
  }
}

}  // namespace lockstep
