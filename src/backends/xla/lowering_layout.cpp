// Lowering of the layout ops: transpose (stablehlo.transpose).
#include "backends/xla/lowering.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep::xla {

namespace {

std::vector<HloValue> transpose(LoweringContext& cx, const Node& n) {
  HloValue x = cx.raw(n, 0);
  std::vector<int64_t> perm = attr_ints(n, "perm");
  for (auto& p : perm)
    if (p < 0) p += int64_t(x.type.rank());
  return {cx.b.transpose(x, perm)};
}

}  // namespace

LOCKSTEP_REGISTER(xla_layout_lowerings) { register_lowering(op::transpose, transpose); }

}  // namespace lockstep::xla
