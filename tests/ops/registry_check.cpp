// The registry checks (see registry_check.h).
#include "ops/registry_check.h"

#include <algorithm>
#include <sstream>

#include "lockstep/ops/op_docs.h"

namespace lockstep::testing {

namespace {

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// Placeholders the executable runs no kernel for (besides views, alias_input >= 0).
bool runs_no_kernel(const OpDef& def) {
  return def.alias_input >= 0 || def.name == op::input || def.name == op::variable;
}

void check_op_kernels(const OpDef& def, const std::vector<std::string>& registered,
                      std::vector<std::string>& out) {
  const std::string op = "op '" + def.name + "': ";
  for (const std::string& b : def.backends)
    if (!is_known_backend(b)) out.push_back(op + "declares unknown backend '" + b + "'");
  for (const std::string& b : def.backends)
    if (!contains(registered, b))
      out.push_back(op + "declares backend '" + b + "' but registers no kernel for it");
  for (const std::string& b : registered)
    if (!contains(def.backends, b))
      out.push_back(op + "registers a '" + b + "' kernel but does not declare backend '" + b + "'");
  if (def.backends.empty()) {
    if (!runs_no_kernel(def))
      out.push_back(op + "declares no kernels, but the executable runs one for it");
    return;
  }
  for (const BackendInfo& b : known_backends())
    if (b.host && b.name != kReferenceBackend && !contains(registered, b.name) &&
        def.reference_only.empty())
      out.push_back(op + "has no '" + b.name + "' kernel and no reference_only reason");
}

}  // namespace

std::vector<std::string> kernel_coverage_problems(const OpRegistry& registry,
                                                  const KernelLookup& kernels) {
  std::vector<std::string> out;
  for (const std::string& name : registry.op_names())
    check_op_kernels(registry.op(OpId::named(name)), kernels(name), out);
  return out;
}

std::vector<std::string> op_table_problems(const std::vector<std::string>& ops,
                                           const std::set<std::string>& case_ops,
                                           const std::map<std::string, std::string>& exempt) {
  std::vector<std::string> out;
  for (const std::string& op : ops)
    if (!case_ops.count(op) && !exempt.count(op))
      out.push_back("op '" + op + "' has no case in the op table (tests/ops/*_cases.cpp)");
  for (const auto& [op, why] : exempt) {
    if (!contains(ops, op))
      out.push_back("exemption for op '" + op + "', which does not exist");
    else if (case_ops.count(op))
      out.push_back("exemption for op '" + op + "', which has cases");
    if (why.empty()) out.push_back("exemption for op '" + op + "' without a reason");
  }
  return out;
}

namespace {

bool default_matches(AttrType t, const AttrValue& v) {
  switch (t) {
    case AttrType::i64:
      return std::holds_alternative<int64_t>(v);
    case AttrType::f64:
      return std::holds_alternative<double>(v);
    case AttrType::boolean:
      return std::holds_alternative<bool>(v);
    case AttrType::str:
      return std::holds_alternative<std::string>(v);
    case AttrType::i64_list:
      return std::holds_alternative<std::vector<int64_t>>(v);
    case AttrType::f64_list:
      return std::holds_alternative<std::vector<double>>(v);
  }
  return false;
}

}  // namespace

std::vector<std::string> declaration_problems(const OpRegistry& registry) {
  const std::vector<std::string> groups = ops_doc_groups();
  std::vector<std::string> out;
  for (const std::string& name : registry.op_names()) {
    const OpDef& def = registry.op(OpId::named(name));
    const std::string op = "op '" + name + "': ";
    if (def.signature.empty() || def.doc.empty()) out.push_back(op + "no signature or doc");
    if (!contains(groups, def.group))
      out.push_back(op + "group '" + def.group + "' has no docs section");
    for (const AttrDecl& a : def.attrs) {
      if (a.doc.empty()) out.push_back(op + "attribute '" + a.name + "' has no doc");
      if (a.default_value && !default_matches(a.type, *a.default_value))
        out.push_back(op + "attribute '" + a.name + "' has a default of another type");
    }
  }
  return out;
}

std::string first_difference(const std::string& committed, const std::string& generated) {
  std::istringstream a(committed), b(generated);
  std::string la, lb;
  for (int line = 1;; ++line) {
    const bool more_a = bool(std::getline(a, la)), more_b = bool(std::getline(b, lb));
    if (!more_a && !more_b) return "";
    if (!more_a) la = "<end of file>";
    if (!more_b) lb = "<end of file>";
    if (la != lb || !more_a || !more_b)
      return "line " + std::to_string(line) + ": committed '" + la + "', generated '" + lb + "'";
  }
}

namespace {

void check_one_op(const OpDef& d, std::vector<std::string>& out) {
  const std::string op = "op '" + d.name + "': ";
  const int forms = !d.onnx.op.empty() + !d.onnx.recipe.empty() + !d.onnx.none.empty();
  if (forms != 1)
    out.push_back(op + "declares " + std::to_string(forms) +
                  " ONNX forms (set exactly one of onnx.op, onnx.recipe, onnx.none)");
  if ((d.rows == RowRule::by_attrs) != bool(d.keeps_rows))
    out.push_back(op + "rows by_attrs needs a keeps_rows rule, and a rule needs by_attrs");
  if (!d.bf16 && !d.bf16_outputs.empty())
    out.push_back(op + "lists bf16_outputs but does not compute in bf16");
  if ((d.fusion & kFuseActivation) && d.keras_activations.empty())
    out.push_back(op + "is kFuseActivation but names no Keras activation");
  const bool activation_role = d.fusion & (kFuseActivation | kFuseActivationGrad);
  if (activation_role != (d.fused_as != FusedActivation::linear))
    out.push_back(op +
                  "is kFuseActivation or kFuseActivationGrad exactly when it declares a "
                  "fused_as other than linear");
  if ((d.fusion & kFuseGradFromOutput) && !(d.fusion & kFuseActivation))
    out.push_back(op + "is kFuseGradFromOutput but not kFuseActivation");
  if (bool(d.fusion & (kFuseTakesActivation | kFuseTakesActivationGrad)) !=
      (d.takes_activations != 0))
    out.push_back(op + "is kFuseTakesActivation(Grad) exactly when it declares takes_activations");
  if (holds(d.takes_activations, FusedActivation::linear))
    out.push_back(op + "lists linear in takes_activations (every producer takes linear)");
}

}  // namespace

std::vector<std::string> fused_activation_problems(const OpRegistry& registry) {
  std::vector<std::string> out;
  for (FusedActivation a : kAllFusedActivations) {
    if (a == FusedActivation::linear) continue;
    int ops = 0, producers = 0;
    for (const OpDef* d : registry.ops()) {
      ops += (d->fusion & kFuseActivation) && d->fused_as == a;
      producers += holds(d->takes_activations, a);
    }
    const std::string name = fused_activation_name(a);
    if (ops != 1)
      out.push_back("fused activation '" + name + "': " + std::to_string(ops) +
                    " ops declare it (kFuseActivation, fused_as), expected 1");
    if (producers == 0)
      out.push_back("fused activation '" + name + "': no op takes it (takes_activations)");
  }
  return out;
}

std::vector<std::string> fact_problems(const OpRegistry& registry,
                                       const std::vector<std::string>& ids) {
  std::vector<std::string> out;
  const std::vector<std::string> names = registry.op_names();
  const std::set<std::string> declared(names.begin(), names.end()), id_set(ids.begin(), ids.end());
  for (const std::string& id : ids)
    if (!declared.count(id))
      out.push_back("op '" + id + "': has an id in op_ids.h but no declaration (misspelt?)");
  for (const std::string& name : names)
    if (!id_set.count(name))
      out.push_back("op '" + name + "': declared without an id in op_ids.h (LOCKSTEP_OPS)");
  std::map<std::string, std::string> activation_owner;
  for (const std::string& name : names) {
    const OpDef& d = registry.op(OpId::named(name));
    check_one_op(d, out);
    for (const std::string& a : d.keras_activations)
      if (!activation_owner.emplace(a, name).second)
        out.push_back("op '" + name + "': Keras activation '" + a + "' is also declared by '" +
                      activation_owner[a] + "'");
  }
  return out;
}

}  // namespace lockstep::testing
