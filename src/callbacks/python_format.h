// Python's str.format for ModelCheckpoint file names: "{epoch:02d}-{val_loss:.2f}.keras" with
// epoch / batch as ints and the logs as floats (Keras passes Python floats).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <variant>

namespace lockstep::train {

using FormatValue = std::variant<int64_t, double>;

// Replaces each {name} / {name:spec} with the value formatted as Python does (the format
// mini-language: [[fill]align][sign][#][0][width][,|_][.precision][type], types d, f, F, e, E,
// g, G, %, n and none; {{ and }} are literal braces). A name not in `values` throws
// MissingFormatKey; a spec Python would refuse (d on a float, junk) throws lockstep::Error.
std::string python_format(const std::string& pattern,
                          const std::map<std::string, FormatValue>& values);

struct MissingFormatKey {
  std::string key;
};

}  // namespace lockstep::train
