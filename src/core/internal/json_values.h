// parse_json's value budget (lockstep/core/json.h): nlohmann spends 16-100 bytes on each JSON
// value against 2-3 bytes of text (`{},`), so 63 MB of empty objects took 2.1 GB to parse.
// parse_json counts the values before parsing and refuses past kMaxJsonValues.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "lockstep/core/json.h"

namespace lockstep {

// The most values (arrays, objects, strings, keys included, and literals) parse_json accepts:
// about 400 MB at most. A Keras config of a 1,000-layer model holds about 100,000.
constexpr int64_t kMaxJsonValues = 4'000'000;

// The number of values in JSON text, outside strings, stopping early once past `stop_at`.
int64_t json_values(std::string_view text, int64_t stop_at);

// parse_json with a value budget of `max_values` (parse_json: kMaxJsonValues).
json parse_json_within(std::string_view text, const std::string& what, int max_depth,
                       int64_t max_values);

}  // namespace lockstep
