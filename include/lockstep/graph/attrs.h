// Node attributes: a small typed dictionary (ints, floats, bools, strings, int lists).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "lockstep/core/error.h"

namespace lockstep {

using AttrValue =
    std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>>;

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<const std::string, AttrValue>> init) : map_(init) {}

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
  bool has(const std::string& k) const { return map_.count(k) != 0; }

  int64_t i(const std::string& k) const { return get<int64_t>(k); }
  int64_t i(const std::string& k, int64_t d) const { return has(k) ? i(k) : d; }
  double f(const std::string& k) const {
    auto it = map_.find(k);
    if (it != map_.end() && std::holds_alternative<int64_t>(it->second))
      return double(std::get<int64_t>(it->second));
    return get<double>(k);
  }
  double f(const std::string& k, double d) const { return has(k) ? f(k) : d; }
  bool b(const std::string& k, bool d = false) const { return has(k) ? get<bool>(k) : d; }
  const std::string& s(const std::string& k) const { return get<std::string>(k); }
  std::string s(const std::string& k, const std::string& d) const { return has(k) ? s(k) : d; }
  const std::vector<int64_t>& ints(const std::string& k) const {
    return get<std::vector<int64_t>>(k);
  }
  std::vector<int64_t> ints(const std::string& k, std::vector<int64_t> d) const {
    return has(k) ? ints(k) : d;
  }
  const std::vector<double>& floats(const std::string& k) const {
    return get<std::vector<double>>(k);
  }
  const std::map<std::string, AttrValue>& map() const { return map_; }
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
