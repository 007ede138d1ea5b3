// The op registry: declarations, kernels per backend, and attribute checks and reads against
// the declarations (so a default is stated once, in the op's OpDef).
#include "lockstep/graph/op_registry.h"

#include <algorithm>

namespace lockstep {

const char* attr_type_name(AttrType t) {
  switch (t) {
    case AttrType::i64:
      return "int";
    case AttrType::f64:
      return "float";
    case AttrType::boolean:
      return "bool";
    case AttrType::str:
      return "string";
    case AttrType::i64_list:
      return "int list";
    case AttrType::f64_list:
      return "float list";
  }
  return "?";
}

AttrDecl::AttrDecl(std::string name, AttrType type, AttrValue default_value, std::string doc)
    : name(std::move(name)),
      type(type),
      default_value(std::move(default_value)),
      doc(std::move(doc)) {
  // A float attribute may be declared with an integer literal default (`0`).
  if (type == AttrType::f64 && std::holds_alternative<int64_t>(*this->default_value))
    this->default_value = double(std::get<int64_t>(*this->default_value));
}

AttrDecl::AttrDecl(std::string name, AttrType type, NoDefault none, std::string doc)
    : name(std::move(name)),
      type(type),
      required(none == NoDefault::required),
      doc(std::move(doc)) {}

const AttrDecl* OpDef::attr(const std::string& key) const {
  for (const AttrDecl& a : attrs)
    if (a.name == key) return &a;
  return nullptr;
}

std::string OpDef::attr_names() const {
  if (attrs.empty()) return "none";
  std::string s;
  for (const AttrDecl& a : attrs) s += (s.empty() ? "" : ", ") + a.name;
  return s;
}

// ---- registry ----

OpRegistry& OpRegistry::get() {
  static OpRegistry r;
  return r;
}

void OpRegistry::add(OpDef def) {
  LS_CHECK(!ops_.count(def.name), "op '", def.name, "' registered twice");
  if (!def.reference_only.empty()) def.backends = {kReferenceBackend};
  std::string n = def.name;
  ops_.emplace(n, std::move(def));
}

const OpDef& OpRegistry::op(const std::string& name) const {
  auto it = ops_.find(name);
  LS_CHECK(it != ops_.end(), "unknown op '", name, "' (not registered)");
  return it->second;
}

void OpRegistry::add_kernel(const std::string& op, const std::string& backend, KernelFactory f,
                            bool takes_bf16) {
  kernels_[op][backend] = std::move(f);
  takes_bf16_[op][backend] = takes_bf16;
}

bool OpRegistry::kernel_takes_bf16(const std::string& op, const std::string& backend) const {
  auto it = takes_bf16_.find(op);
  if (it == takes_bf16_.end()) return false;
  auto jt = it->second.find(backend);
  return jt != it->second.end() && jt->second;
}

const KernelFactory* OpRegistry::kernel(const std::string& op, const std::string& backend) const {
  auto it = kernels_.find(op);
  if (it == kernels_.end()) return nullptr;
  auto jt = it->second.find(backend);
  return jt == it->second.end() ? nullptr : &jt->second;
}

std::vector<std::string> OpRegistry::op_names() const {
  std::vector<std::string> v;
  for (auto& [k, _] : ops_) v.push_back(k);
  std::sort(v.begin(), v.end());
  return v;
}

const OpDef* OpRegistry::activation_op(const std::string& name) const {
  for (const auto& [_, def] : ops_)
    for (const std::string& a : def.keras_activations)
      if (a == name) return &def;
  return nullptr;
}

std::vector<std::string> OpRegistry::activation_names() const {
  std::vector<std::string> v;
  for (const auto& [_, def] : ops_)
    v.insert(v.end(), def.keras_activations.begin(), def.keras_activations.end());
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<std::string> OpRegistry::kernel_backends(const std::string& op) const {
  std::vector<std::string> v;
  auto it = kernels_.find(op);
  if (it != kernels_.end())
    for (auto& [backend, _] : it->second) v.push_back(backend);
  std::sort(v.begin(), v.end());
  return v;
}

// ---- attribute checks ----

namespace {

const char* value_type_name(const AttrValue& v) {
  static const char* names[] = {"int", "float", "bool", "string", "int list", "float list"};
  return names[v.index()];
}

// Whether a stored value is readable as `t` (the leniency of Attrs and of the reads below).
bool compatible(AttrType t, const AttrValue& v) {
  const bool is_int = std::holds_alternative<int64_t>(v);
  switch (t) {
    case AttrType::i64:
      return is_int;
    case AttrType::f64:
      return is_int || std::holds_alternative<double>(v);
    case AttrType::boolean:
      return is_int || std::holds_alternative<bool>(v);
    case AttrType::str:
      return std::holds_alternative<std::string>(v);
    case AttrType::i64_list:
      return is_int || std::holds_alternative<std::vector<int64_t>>(v);
    case AttrType::f64_list:
      return std::holds_alternative<std::vector<double>>(v);
  }
  return false;
}

}  // namespace

void check_attrs(const OpDef& def, const Attrs& attrs) {
  for (const auto& [key, value] : attrs.map()) {
    const AttrDecl* d = def.attr(key);
    LS_CHECK(d, "unknown attribute '", key, "' (", def.name, " takes: ", def.attr_names(), ")");
    LS_CHECK(compatible(d->type, value), "attribute '", key, "' must be ", attr_type_name(d->type),
             ", got ", value_type_name(value));
  }
}

// ---- attribute reads ----

namespace {

// A set attribute is declared (Graph::add checked it); an unset one comes from the declaration.
const AttrValue& resolve(const std::string& op, const Attrs& a, const std::string& key) {
  auto it = a.map().find(key);
  if (it != a.map().end()) return it->second;
  const OpDef& def = OpRegistry::get().op(op);
  const AttrDecl* d = def.attr(key);
  LS_CHECK(d, op, " reads attribute '", key,
           "', which it does not declare (declared: ", def.attr_names(), ")");
  LS_CHECK(d->default_value, "attribute '", key, "' of ", op, " is not set and has no default (",
           d->doc, ")");
  return *d->default_value;
}

template <class T>
const T& typed(const std::string& op, const std::string& key, const AttrValue& v) {
  LS_CHECK(std::holds_alternative<T>(v), op, ": attribute '", key, "' has type ",
           value_type_name(v));
  return std::get<T>(v);
}

}  // namespace

int64_t attr_i(const std::string& op, const Attrs& a, const std::string& key) {
  return typed<int64_t>(op, key, resolve(op, a, key));
}

double attr_f(const std::string& op, const Attrs& a, const std::string& key) {
  const AttrValue& v = resolve(op, a, key);
  if (std::holds_alternative<int64_t>(v)) return double(std::get<int64_t>(v));
  return typed<double>(op, key, v);
}

bool attr_b(const std::string& op, const Attrs& a, const std::string& key) {
  const AttrValue& v = resolve(op, a, key);
  if (std::holds_alternative<int64_t>(v)) return std::get<int64_t>(v) != 0;
  return typed<bool>(op, key, v);
}

const std::string& attr_s(const std::string& op, const Attrs& a, const std::string& key) {
  return typed<std::string>(op, key, resolve(op, a, key));
}

const std::vector<int64_t>& attr_ints(const std::string& op, const Attrs& a,
                                      const std::string& key) {
  return typed<std::vector<int64_t>>(op, key, resolve(op, a, key));
}

const std::vector<double>& attr_floats(const std::string& op, const Attrs& a,
                                       const std::string& key) {
  return typed<std::vector<double>>(op, key, resolve(op, a, key));
}

int64_t attr_i(const Node& n, const std::string& key) { return attr_i(n.op, n.attrs, key); }
double attr_f(const Node& n, const std::string& key) { return attr_f(n.op, n.attrs, key); }
bool attr_b(const Node& n, const std::string& key) { return attr_b(n.op, n.attrs, key); }
const std::string& attr_s(const Node& n, const std::string& key) {
  return attr_s(n.op, n.attrs, key);
}
const std::vector<int64_t>& attr_ints(const Node& n, const std::string& key) {
  return attr_ints(n.op, n.attrs, key);
}
const std::vector<double>& attr_floats(const Node& n, const std::string& key) {
  return attr_floats(n.op, n.attrs, key);
}

}  // namespace lockstep
