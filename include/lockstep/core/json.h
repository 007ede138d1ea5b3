// The JSON type of configs, metadata and attributes (nlohmann::json), named once for every module,
// and the one way to parse JSON that came from a file or a user.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace lockstep {

/// nlohmann::json: Keras configs, file metadata, option values.
using json = nlohmann::json;

/// The deepest nesting of arrays and objects parse_json accepts. nlohmann's copies, comparisons
/// and dumps recurse once per level, so a file of 100k nested arrays would overflow the stack;
/// Keras configs nest a few levels per layer and per nested model (a 100-deep model is ~300).
constexpr int kMaxJsonDepth = 1000;

/// Parses text from a file or a user: refuses nesting deeper than `max_depth` with a scan that
/// counts brackets outside strings before nlohmann parses anything, and turns syntax errors into
/// lockstep::Error. Errors start with `what` (e.g. "'m.keras': config.json").
json parse_json(std::string_view text, const std::string& what, int max_depth = kMaxJsonDepth);

/// The nesting depth of JSON text (brackets outside strings), stopping early once past `stop_at`.
int json_depth(std::string_view text, int stop_at);

}  // namespace lockstep
