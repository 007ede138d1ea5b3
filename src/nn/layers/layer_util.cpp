// Shared layer helpers: option parsing and Keras-serialised initializers/regularizers.
#include "nn/layers/layer_util.h"

#include <cstdlib>

#include "lockstep/graph/op_registry.h"

namespace lockstep::layer_util {

std::vector<int64_t> pair(const std::vector<int64_t>& v, const char* what) {
  LS_CHECK(v.size() == 1 || v.size() == 2, what, " needs 1 or 2 values, got ", v.size());
  std::vector<int64_t> r = v.size() == 1 ? std::vector<int64_t>{v[0], v[0]} : v;
  LS_CHECK(r[0] >= 1 && r[1] >= 1, what, " must be positive, got [", r[0], ", ", r[1], "]");
  return r;
}

static std::string class_name_of(const std::string& name) {
  // snake_case -> CamelCase (glorot_uniform -> GlorotUniform); class names pass through.
  std::string r;
  bool up = true;
  for (char c : name) {
    if (c == '_') {
      up = true;
      continue;
    }
    r += up && c >= 'a' && c <= 'z' ? char(c - 'a' + 'A') : c;
    up = false;
  }
  return r;
}

json initializer_json(const std::string& name) {
  check_initializer(name);
  json cfg = json::object();
  std::string cls;
  if (name.rfind("constant:", 0) == 0) {
    cls = "Constant";
    cfg["value"] = std::strtod(name.c_str() + 9, nullptr);
  } else if (name.rfind("variance_scaling:", 0) == 0) {  // checked: scale:mode:distribution
    cls = "VarianceScaling";
    const size_t a = name.find(':'), b = name.find(':', a + 1), c = name.find(':', b + 1);
    cfg["seed"] = nullptr;
    cfg["scale"] = std::strtod(name.substr(a + 1, b - a - 1).c_str(), nullptr);
    cfg["mode"] = name.substr(b + 1, c - b - 1);
    cfg["distribution"] = name.substr(c + 1);
  } else {
    cls = class_name_of(name);
    if (cls == "Zero") cls = "Zeros";
    if (cls == "One") cls = "Ones";
    if (cls == "RandomNormal" || cls == "TruncatedNormal") {
      cfg["mean"] = 0.0;
      cfg["stddev"] = 0.05;
      cfg["seed"] = nullptr;
    } else if (cls == "RandomUniform") {
      cfg["minval"] = -0.05;
      cfg["maxval"] = 0.05;
      cfg["seed"] = nullptr;
    } else if (cls != "Zeros" && cls != "Ones") {
      cfg["seed"] = nullptr;
    }
  }
  return json{{"module", "keras.initializers"},
              {"class_name", cls},
              {"config", cfg},
              {"registered_name", nullptr}};
}

json regularizer_json(double l2) {
  if (l2 <= 0) return nullptr;
  return json{{"module", "keras.regularizers"},
              {"class_name", "L2"},
              {"config", {{"l2", l2}}},
              {"registered_name", nullptr}};
}

// The Keras activation names: "linear" and every name an op declares (OpDef::keras_activations).
static const std::vector<std::string>& activations() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> names{"linear"};
    for (const std::string& a : OpRegistry::get().activation_names()) names.push_back(a);
    return names;
  }();
  return v;
}

bool is_activation(const std::string& name) {
  return name.empty() || name == "linear" || OpRegistry::get().activation_op(name) != nullptr;
}

std::string activation_names() {
  std::string s;
  for (auto& a : activations()) s += (s.empty() ? "" : ", ") + a;
  return s;
}

void check_activation(const std::string& activation) {
  LS_CHECK(is_activation(activation), "unknown activation '", activation,
           "'; valid names: ", activation_names());
}

void check_padding(const std::string& padding) {
  LS_CHECK(padding == "valid" || padding == "same", "padding must be \"valid\" or \"same\", got \"",
           padding, "\"");
}

Value constant_vector(Graph& g, int64_t n, float v) {
  return g.add(op::constant, {}, Attrs{{"value", double(v)}, {"shape", std::vector<int64_t>{n}}});
}

}  // namespace lockstep::layer_util
