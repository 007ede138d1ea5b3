// The checks tests/ops/registry_test.cpp runs over the op declarations, written as functions of
// what they read (the declarations, which backends have a kernel for an op, which ops the op
// table has cases for, the committed docs), so the test can also run them on a copy with one
// entry removed and see them name it.
#pragma once
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "lockstep/graph/op_registry.h"

namespace lockstep::testing {

// op -> the backends that have a kernel registered for it (OpRegistry::kernel_backends).
using KernelLookup = std::function<std::vector<std::string>(const std::string& op)>;

// Kernel coverage, one message per problem, each naming the op:
//   (a) an op with no kernel for a non-reference backend and no reference_only reason;
//   (b) a declared backend without a registered kernel, or a kernel registered for a backend
//       the op does not declare (or that is not a known backend);
//   and an op declared without kernels that the executable would still try to run.
std::vector<std::string> kernel_coverage_problems(const OpRegistry& registry,
                                                  const KernelLookup& kernels);

// (c) ops that no op-table case builds (`case_ops`) and that `exempt` (op -> why it cannot be
// tested that way) does not list; an exemption for an op that has cases, or that does not
// exist, is a problem too (it would hide nothing, or rot).
std::vector<std::string> op_table_problems(const std::vector<std::string>& ops,
                                           const std::set<std::string>& case_ops,
                                           const std::map<std::string, std::string>& exempt);

// Declarations that would make poor docs or wrong reads: no signature or doc, an attribute
// without a doc, a default whose type is not the declared one, a group docs/ops.md lacks.
std::vector<std::string> declaration_problems(const OpRegistry& registry);

// The per-op facts (OpDef fields), one message per problem, each naming the op:
//   (d) the op ids (op_ids.h, `ids`) and the declarations are the same set: an id without a
//       declaration (a misspelt id) or a declaration without an id;
//   (e) exactly one ONNX form (op, recipe, or the reason there is none);
//   (f) rows by_attrs with a keeps_rows rule (and a rule only with by_attrs); elementwise ops
//       take rows pointwise; bf16_outputs only on a bf16 op;
//   (g) a Keras activation name declared by one op only, and an op a producer can apply as its
//       activation (kFuseActivation) names one (the producer's "activation" attribute).
// Every fused activation but linear is one op's (kFuseActivation, fused_as), and at least one
// producer takes it (takes_activations): one that no op is, or no producer takes, is a
// declaration nothing reads.
std::vector<std::string> fused_activation_problems(const OpRegistry& registry);

std::vector<std::string> fact_problems(const OpRegistry& registry,
                                       const std::vector<std::string>& ids);

// "" when the texts are equal, else where they first differ ("line N: committed '...',
// generated '...'").
std::string first_difference(const std::string& committed, const std::string& generated);

}  // namespace lockstep::testing
