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
  LS_CHECK(def.name.valid(), "an op declaration has no id (OpDef::name)");
  LS_CHECK(!has(def.name), "op '", def.name, "' registered twice");
  if (!def.reference_only.empty()) def.backends = {kReferenceBackend};
  const size_t i = size_t(def.name.code());
  ops_[i] = std::make_unique<OpDef>(std::move(def));
}

const OpDef& OpRegistry::op(OpId id) const {
  LS_CHECK(has(id), "unknown op '", id, "' (not registered)");
  return *ops_[size_t(id.code())];
}

void OpRegistry::add_kernel(OpId op, const std::string& backend, KernelFactory f, bool takes_bf16) {
  LS_CHECK(op.valid(), "a kernel for backend '", backend, "' names no op");
  Kernels& k = kernels_[size_t(op.code())];
  k.factory[backend] = std::move(f);
  k.takes_bf16[backend] = takes_bf16;
}

bool OpRegistry::kernel_takes_bf16(OpId op, const std::string& backend) const {
  if (!op.valid()) return false;
  const auto& m = kernels_[size_t(op.code())].takes_bf16;
  auto it = m.find(backend);
  return it != m.end() && it->second;
}

const KernelFactory* OpRegistry::kernel(OpId op, const std::string& backend) const {
  if (!op.valid()) return nullptr;
  const auto& m = kernels_[size_t(op.code())].factory;
  auto it = m.find(backend);
  return it == m.end() ? nullptr : &it->second;
}

std::vector<const OpDef*> OpRegistry::ops() const {
  std::vector<const OpDef*> v;
  for (const auto& d : ops_)
    if (d) v.push_back(d.get());
  return v;
}

std::vector<std::string> OpRegistry::op_names() const {
  std::vector<std::string> v;
  for (const OpDef* d : ops()) v.push_back(d->name);
  std::sort(v.begin(), v.end());
  return v;
}

const OpDef* OpRegistry::fused_activation_op(FusedActivation a) const {
  for (const OpDef* d : ops())
    if ((d->fusion & kFuseActivation) && d->fused_as == a) return d;
  return nullptr;
}

const OpDef* OpRegistry::activation_op(const std::string& name) const {
  for (const OpDef* def : ops())
    for (const std::string& a : def->keras_activations)
      if (a == name) return def;
  return nullptr;
}

std::vector<std::string> OpRegistry::activation_names() const {
  std::vector<std::string> v;
  for (const OpDef* def : ops())
    v.insert(v.end(), def->keras_activations.begin(), def->keras_activations.end());
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<std::string> OpRegistry::kernel_backends(OpId op) const {
  std::vector<std::string> v;
  if (op.valid())
    for (auto& [backend, _] : kernels_[size_t(op.code())].factory) v.push_back(backend);
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
const AttrValue& resolve(OpId op, const Attrs& a, const std::string& key) {
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
const T& typed(OpId op, const std::string& key, const AttrValue& v) {
  LS_CHECK(std::holds_alternative<T>(v), op, ": attribute '", key, "' has type ",
           value_type_name(v));
  return std::get<T>(v);
}

}  // namespace

int64_t attr_i(OpId op, const Attrs& a, const std::string& key) {
  return typed<int64_t>(op, key, resolve(op, a, key));
}

double attr_f(OpId op, const Attrs& a, const std::string& key) {
  const AttrValue& v = resolve(op, a, key);
  if (std::holds_alternative<int64_t>(v)) return double(std::get<int64_t>(v));
  return typed<double>(op, key, v);
}

bool attr_b(OpId op, const Attrs& a, const std::string& key) {
  const AttrValue& v = resolve(op, a, key);
  if (std::holds_alternative<int64_t>(v)) return std::get<int64_t>(v) != 0;
  return typed<bool>(op, key, v);
}

const std::string& attr_s(OpId op, const Attrs& a, const std::string& key) {
  return typed<std::string>(op, key, resolve(op, a, key));
}

const std::vector<int64_t>& attr_ints(OpId op, const Attrs& a, const std::string& key) {
  return typed<std::vector<int64_t>>(op, key, resolve(op, a, key));
}

const std::vector<double>& attr_floats(OpId op, const Attrs& a, const std::string& key) {
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

FusedActivation attr_activation(const Node& n, const std::string& key) {
  const std::string& name = attr_s(n, key);
  FusedActivation a;
  try {
    a = fused_activation_named(name);
  } catch (const Error& e) {
    LS_FAIL(n.op, (n.name.empty() ? "" : " '" + n.name + "'"), ": attribute '", key,
            "': ", e.what());
  }
  const OpDef& def = OpRegistry::get().op(n.op);
  LS_CHECK(a == FusedActivation::linear || holds(def.takes_activations, a), n.op,
           (n.name.empty() ? "" : " '" + n.name + "'"), ": attribute '", key, "' is '", name,
           "', which ", n.op, " does not apply (it takes ",
           fused_activation_names(def.takes_activations | bit(FusedActivation::linear)), ")");
  return a;
}

const char* fused_activation_name(FusedActivation a) {
  // The name of the op declared as this activation (kFuseActivation, OpDef::fused_as): the
  // attribute value is the op's name, spelled nowhere else.
  if (a == FusedActivation::linear) return "linear";
  const OpDef* op = OpRegistry::get().fused_activation_op(a);
  LS_CHECK(op, "fused activation ", int(a), " is declared by no op (kFuseActivation, fused_as)");
  return op->name.name();
}

FusedActivation fused_activation_named(const std::string& name) {
  for (FusedActivation a : kAllFusedActivations)
    if (name == fused_activation_name(a)) return a;
  FusedActivationSet all = 0;
  for (FusedActivation a : kAllFusedActivations) all |= bit(a);
  LS_FAIL("unknown fused activation '", name, "' (valid: ", fused_activation_names(all), ")");
}

std::string fused_activation_names(FusedActivationSet s) {
  std::vector<std::string> names;
  for (FusedActivation a : kAllFusedActivations)
    if (holds(s, a)) names.push_back(std::string("\"") + fused_activation_name(a) + "\"");
  std::string r;
  for (size_t i = 0; i < names.size(); ++i)
    r += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return r;
}

}  // namespace lockstep
