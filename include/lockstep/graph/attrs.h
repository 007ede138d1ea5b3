// Node attributes: a small typed dictionary (ints, floats, bools, strings, int lists).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "lockstep/core/error.h"

namespace lockstep {

/// One attribute's value: an int, a float, a bool, a string, or a list of ints or floats.
using AttrValue =
    std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>>;

/// A node's attributes by name ({{"strides", std::vector<int64_t>{1, 1}}, {"padding", "same"}}):
/// what an op reads beyond its input tensors. The op's declaration (OpDef::attrs) says which keys
/// it takes, their types and defaults; Graph::add checks a node's Attrs against it. The getters
/// without a default throw lockstep::Error naming the key when it is missing or of another type.
class Attrs {
 public:
  Attrs() = default;  ///< No attributes.
  /// Attrs{{"axis", int64_t(-1)}, {"epsilon", 1e-3}}.
  Attrs(std::initializer_list<std::pair<const std::string, AttrValue>> init) : map_(init) {}

  /// @name set(key, value)
  /// Sets (or replaces) attribute `k`; returns *this to chain. An int is stored as int64, a
  /// float as double and a C string as std::string.
  //@{
  Attrs& set(const std::string& k, AttrValue v) {
    map_[k] = std::move(v);
    return *this;
  }
  Attrs& set(const std::string& k, int v) {
    map_[k] = int64_t(v);
    return *this;
  }
  Attrs& set(const std::string& k, bool v) {
    map_[k] = v;
    return *this;
  }
  Attrs& set(const std::string& k, float v) {
    map_[k] = double(v);
    return *this;
  }
  Attrs& set(const std::string& k, const char* v) {
    map_[k] = std::string(v);
    return *this;
  }
  //@}
  /// Whether attribute `k` is set.
  bool has(const std::string& k) const { return map_.count(k) != 0; }

  /// The int attribute `k`; an error when missing or not an int.
  int64_t i(const std::string& k) const { return get<int64_t>(k); }
  /// The int attribute `k`, or `d` when it is not set.
  int64_t i(const std::string& k, int64_t d) const { return has(k) ? i(k) : d; }
  /// The float attribute `k` (an int one is converted); an error when missing or another type.
  double f(const std::string& k) const {
    auto it = map_.find(k);
    if (it != map_.end() && std::holds_alternative<int64_t>(it->second))
      return double(std::get<int64_t>(it->second));
    return get<double>(k);
  }
  /// The float attribute `k`, or `d` when it is not set.
  double f(const std::string& k, double d) const { return has(k) ? f(k) : d; }
  /// The bool attribute `k`, or `d` (default false) when it is not set.
  bool b(const std::string& k, bool d = false) const { return has(k) ? get<bool>(k) : d; }
  /// The string attribute `k`; an error when missing or not a string.
  const std::string& s(const std::string& k) const { return get<std::string>(k); }
  /// The string attribute `k`, or `d` when it is not set.
  std::string s(const std::string& k, const std::string& d) const { return has(k) ? s(k) : d; }
  /// The int-list attribute `k`; an error when missing or not an int list.
  const std::vector<int64_t>& ints(const std::string& k) const {
    return get<std::vector<int64_t>>(k);
  }
  /// The int-list attribute `k`, or `d` when it is not set.
  std::vector<int64_t> ints(const std::string& k, std::vector<int64_t> d) const {
    return has(k) ? ints(k) : d;
  }
  /// The float-list attribute `k`; an error when missing or not a float list.
  const std::vector<double>& floats(const std::string& k) const {
    return get<std::vector<double>>(k);
  }
  /// Every attribute, sorted by key.
  const std::map<std::string, AttrValue>& map() const { return map_; }
  /// The attributes as text for dumps and errors: "axis=-1, padding=same, strides=[1,1]".
  std::string str() const;

 private:
  template <typename T>
  const T& get(const std::string& k) const {
    auto it = map_.find(k);
    LS_CHECK(it != map_.end(), "missing attribute '", k, "'");
    LS_CHECK(std::holds_alternative<T>(it->second), "attribute '", k, "' has the wrong type");
    return std::get<T>(it->second);
  }
  std::map<std::string, AttrValue> map_;
};

}  // namespace lockstep
