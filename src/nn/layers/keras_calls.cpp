// The registries of keras_calls.h.
#include "nn/layers/keras_calls.h"

#include <map>
#include <mutex>

namespace lockstep {
namespace {

template <class T>
struct Registry {
  std::mutex mu;
  std::map<std::string, T> by_class;
};

Registry<KerasCallConvention>& conventions() {
  static Registry<KerasCallConvention> r;
  return r;
}
Registry<WeightSlotsFn>& slots() {
  static Registry<WeightSlotsFn> r;
  return r;
}

template <class T>
const T* find(Registry<T>& r, const std::string& cls) {
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.by_class.find(cls);
  return it == r.by_class.end() ? nullptr : &it->second;  // entries are never erased
}

}  // namespace

void register_call_convention(const std::string& class_name, KerasCallConvention c) {
  std::lock_guard<std::mutex> lock(conventions().mu);
  conventions().by_class[class_name] = std::move(c);
}
const KerasCallConvention* call_convention(const std::string& class_name) {
  return find(conventions(), class_name);
}
void register_weight_slots(const std::string& class_name, WeightSlotsFn f) {
  std::lock_guard<std::mutex> lock(slots().mu);
  slots().by_class[class_name] = std::move(f);
}
const WeightSlotsFn* weight_slots_of(const std::string& class_name) {
  return find(slots(), class_name);
}

void collect_keras_args(const json& a, std::vector<json>& out) {
  if (a.is_object() && a.value("class_name", "") == "__keras_tensor__") {
    out.push_back(a.at("config").at("keras_history"));
  } else if (a.is_array() && (a.size() == 3 || (a.size() == 4 && a[3].is_object())) &&
             a[0].is_string() && a[1].is_number()) {
    out.push_back(a);  // legacy [name, node, index, kwargs?]
  } else if (a.is_array()) {
    for (auto& x : a) collect_keras_args(x, out);
  }
}

}  // namespace lockstep
