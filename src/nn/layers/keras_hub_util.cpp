// The base of KerasHub's layers: module and registered name, call keyword arguments (see
// keras_hub_util.h).
#include "nn/layers/keras_hub_util.h"

#include <algorithm>

namespace lockstep::keras_hub_detail {

void HubLayer::fail_arg(const std::string& key, const std::string& why) const {
  LS_FAIL(class_name(), " '", name(), "': call argument '", key, "' ", why);
}

std::vector<std::string> HubLayer::bind_call_kwargs(const json& kwargs, size_t num_args) {
  LS_CHECK(num_args >= 1 && num_args <= max_positional(), class_name(), " '", name(),
           "': a call takes ", max_positional(), " positional tensor(s) at most, this one has ",
           num_args, " (pass the others by keyword)");
  const std::vector<std::string> takes = tensor_kwargs();
  std::vector<std::string> tensors;
  if (num_args == 2) {
    if (kwargs.contains(takes.at(0))) fail_arg(takes[0], "is given twice (by position too)");
    tensors.push_back(takes[0]);
  }
  for (auto& [k, v] : kwargs.items()) {
    const bool is_tensor = v.is_object() && v.value("class_name", "") == "__keras_tensor__";
    if (std::find(takes.begin(), takes.end(), k) != takes.end() && (is_tensor || v.is_null())) {
      if (is_tensor) tensors.push_back(k);
    } else if (k == "training") {
      if (!v.is_null() && !v.is_boolean()) fail_arg(k, "must be true, false or null");
    } else if (k == "start_index" && takes_start_index()) {
      if (!v.is_number_integer()) fail_arg(k, "must be an int, got " + v.dump().substr(0, 80));
      const int64_t s = v.get<int64_t>();
      if (s < 0) fail_arg(k, "must be >= 0, got " + std::to_string(s));
      if (bound_once_ && s != start_index_)
        fail_arg(k, "differs between this layer's calls (" + std::to_string(start_index_) +
                        " and " + std::to_string(s) + "); Lockstep builds one table per layer");
      start_index_ = s;
    } else if (!bind_scalar_kwarg(k, v)) {
      fail_arg(k, "(= " + v.dump().substr(0, 80) + ") is not one Lockstep supports" +
                      (is_tensor ? " as a tensor" : ""));
    }
  }
  // The order they follow the positional input in: tensor_kwargs()'s.
  std::vector<std::string> ordered;
  for (auto& k : takes)
    if (std::find(tensors.begin(), tensors.end(), k) != tensors.end()) ordered.push_back(k);
  if (bound_once_ && ordered != bound_)
    LS_FAIL(class_name(), " '", name(), "': its calls pass different tensor arguments; ",
            "Lockstep binds one set per layer (call it the same way each time)");
  bound_ = ordered;
  bound_once_ = true;
  if (num_args == 2) ordered.erase(ordered.begin());  // passed by position, not by keyword
  return ordered;
}

KerasLayerHooks::CallSpec HubLayer::call_spec(const LayerCall& call) const {
  CallSpec s;
  s.tensor_kwargs = binding(call.inputs.size());
  s.num_args = call.inputs.size() - s.tensor_kwargs.size();
  s.kwargs = scalar_kwargs(call);
  if (start_index_ != 0) s.kwargs["start_index"] = start_index_;
  return s;
}

std::vector<std::string> HubLayer::binding(size_t num_inputs) const {
  if (bound_once_) return bound_;
  std::vector<std::string> takes = tensor_kwargs();
  LS_CHECK(num_inputs >= 1 && num_inputs - 1 <= takes.size(), class_name(), " '", name(),
           "': a call takes 1 to ", takes.size() + 1, " inputs, got ", num_inputs);
  takes.resize(num_inputs - 1);
  return takes;
}

int HubLayer::kwarg_index(size_t num_inputs, const std::string& key) const {
  const std::vector<std::string> b = binding(num_inputs);
  for (size_t i = 0; i < b.size(); ++i)
    if (b[i] == key) return int(i + 1);
  return -1;
}

Value HubLayer::kwarg_input(const std::vector<Value>& in, const std::string& key) const {
  const int i = kwarg_index(in.size(), key);
  return i < 0 ? Value{} : in.at(size_t(i));
}

VariablePtr fixed_table(const std::string& name, Tensor value) {
  auto v = std::make_shared<Variable>();
  v->name = name;
  v->trainable = false;
  v->value = std::move(value);
  return v;
}

Value cast_to(Graph& g, Value x, DType dtype, const std::string& name) {
  if (g.type(x).dtype == dtype) return x;
  return g.add(op::cast, {x}, Attrs{{"dtype", std::string(dtype_name(dtype))}}, name);
}

Value broadcast_like(Graph& g, Value x, Value table, const std::string& name) {
  table = cast_to(g, table, g.type(x).dtype, name);
  return g.add(op::add, {g.add(op::zeros_like, {x}, {}, name), table}, {}, name);
}

std::string hub_initializer(KerasConfigReader& r, const std::string& key,
                            const std::string& fallback, json* original) {
  *original = json();
  if (!r.has(key)) return fallback;
  const json v = r.get(key);
  try {
    KerasConfigReader probe("", json{{key, v}});
    return probe.initializer(key, fallback);
  } catch (const Error&) {
    const std::string cls = v.is_object() ? v.value("class_name", "") : "";
    const std::string n = keras_snake_case(cls);
    if (n != "random_normal" && n != "truncated_normal" && n != "random_uniform")
      r.fail(key, "is " + v.dump().substr(0, 120) + ", an initializer Lockstep cannot build");
    *original = v;
    return n;
  }
}

json initializer_or_original(const std::string& name, const json& original) {
  return original.is_null() ? layer_util::initializer_json(name) : original;
}

}  // namespace lockstep::keras_hub_detail
