// Helpers shared by the Keras layer implementations: naming, option parsing, Keras config JSON.
#pragma once
#include <string>
#include <vector>

#include "lockstep/nn/initializers.h"
#include "lockstep/nn/layers.h"

namespace lockstep::layer_util {

// Keras snake_case default name ("conv2d", "conv2d_1", ...) when `name` is empty.
inline std::string default_name(const std::string& name, const std::string& base) {
  return name.empty() ? unique_layer_name(base) : name;
}

// One value (square) or two values -> {a, b}; throws when not positive.
std::vector<int64_t> pair(const std::vector<int64_t>& v, const char* what);

// Keras-serialised initializer / regularizer / activation checks.
json initializer_json(const std::string& name);
json regularizer_json(double l2);  // null when l2 <= 0
bool is_activation(const std::string& name);
std::string activation_names();
// Throws when `activation` is unknown (called at construction, like keras.activations.get).
void check_activation(const std::string& activation);
void check_padding(const std::string& padding);

// Attr list from ints.
inline AttrValue ints(std::vector<int64_t> v) { return AttrValue(std::move(v)); }
inline AttrValue str(const std::string& s) { return AttrValue(s); }

// A f32 constant vector of length n filled with v (for missing gamma/beta).
Value constant_vector(Graph& g, int64_t n, float v);

}  // namespace lockstep::layer_util
