// The JSON type of configs, metadata and attributes (nlohmann::json), named once for every module.
#pragma once
#include <nlohmann/json.hpp>

namespace lockstep {

/// nlohmann::json: Keras configs, file metadata, option values.
using json = nlohmann::json;

}  // namespace lockstep
