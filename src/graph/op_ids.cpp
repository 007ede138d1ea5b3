// Names of the declared op ids (op_ids.h), and the run-time lookup from a name to its id.
#include "lockstep/graph/op_ids.h"

#include "lockstep/core/error.h"

namespace lockstep {

namespace {
constexpr const char* kOpNames[] = {
#define LOCKSTEP_OP_NAME(name) #name,
    LOCKSTEP_OPS(LOCKSTEP_OP_NAME)
#undef LOCKSTEP_OP_NAME
};
static_assert(sizeof(kOpNames) / sizeof(kOpNames[0]) == kOpCount);
}  // namespace

const char* OpId::name() const { return valid() ? kOpNames[size_t(code_)] : "<none>"; }

OpId OpId::find(std::string_view name) {
  for (size_t i = 0; i < kOpCount; ++i)
    if (name == kOpNames[i]) return OpId(OpCode(i));
  return OpId();
}

OpId OpId::named(std::string_view name) {
  const OpId id = find(name);
  LS_CHECK(id.valid(), "unknown op '", std::string(name),
           "' (not declared in lockstep/graph/op_ids.h)");
  return id;
}

}  // namespace lockstep
