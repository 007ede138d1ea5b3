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

// "" when the texts are equal, else where they first differ ("line N: committed '...',
// generated '...'").
std::string first_difference(const std::string& committed, const std::string& generated);

}  // namespace lockstep::testing
