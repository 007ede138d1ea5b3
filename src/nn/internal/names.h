// How losses::get, metrics::get and optimizers::get match the names users write: case and
// underscores do not matter, so Keras's class and function spellings agree. In nn's internal
// interface because nn is the lowest module all three (losses, metrics, optimizers) use.
#pragma once
#include <cctype>
#include <string>

namespace lockstep {

// "SparseCategoricalCrossentropy", "sparse_categorical_crossentropy" ->
// "sparsecategoricalcrossentropy"; "Adam" -> "adam".
inline std::string canonical_name(const std::string& name) {
  std::string key;
  for (char c : name)
    if (c != '_') key += char(std::tolower(static_cast<unsigned char>(c)));
  return key;
}

}  // namespace lockstep
