// Shape helpers for op registrations.
#include "ops/internal/op_util.h"

#include <algorithm>

namespace lockstep::ops {

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  int r = std::max(a.rank(), b.rank());
  Shape out;
  for (int i = 0; i < r; ++i) {
    int ia = i - (r - a.rank()), ib = i - (r - b.rank());
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    int64_t d;
    if (da == db)
      d = da;
    else if (da == 1)
      d = db;
    else if (db == 1)
      d = da;
    else if (da < 0 || db < 0)
      d = da < 0 ? db : da;
    else
      LS_FAIL("shapes ", a.str(), " and ", b.str(), " cannot be broadcast together");
    out.push_back(d);
  }
  return out;
}

std::vector<int64_t> normalise_axes(std::vector<int64_t> axes, int rank) {
  for (auto& a : axes) {
    if (a < 0) a += rank;
    LS_CHECK(a >= 0 && a < rank, "axis ", a, " out of range for rank ", rank);
  }
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return axes;
}

Attrs attrs_for(const std::string& to, const Attrs& from) {
  const OpDef& def = OpRegistry::get().op(to);
  Attrs out;
  for (const auto& [key, value] : from.map())
    if (def.attr(key)) out.set(key, value);
  return out;
}

}  // namespace lockstep::ops
