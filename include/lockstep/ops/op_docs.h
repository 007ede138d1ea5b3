// docs/ops.md, generated from the op declarations: `lockstep ops-doc > docs/ops.md` writes it,
// and tests/ops/registry_test.cpp fails when the committed file differs.
#pragma once
#include <string>
#include <vector>

#include "lockstep/graph/op_registry.h"

namespace lockstep {

/// The op catalogue as Markdown: an introduction, then one section per declaration group (in a
/// fixed order) with, for each op, its signature and doc, its attributes (type, default,
/// meaning), the backends with a kernel (or "reference only" and why) and whether it has a
/// gradient.
std::string render_ops_markdown(const OpRegistry& registry = OpRegistry::get());

/// The declaration groups (OpDef::group) docs/ops.md has a section for, in order.
std::vector<std::string> ops_doc_groups();

}  // namespace lockstep
