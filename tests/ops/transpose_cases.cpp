// Op-table cases for transpose: the cpu kernel's canonical forms (a kept innermost axis copied in
// runs, tiled swaps of the innermost axis, merged neighbours, unit axes) against the reference,
// and the gradient (a transpose by the inverse permutation) against finite differences.
#include "ops/op_harness.h"

namespace lockstep::testing {
namespace {

using I = std::vector<int64_t>;

OpCase transpose_case(const std::string& name, Shape s, I perm, bool grad = true) {
  return OpCase{.name = name,
                .op = "transpose",
                .attrs = Attrs{{"perm", perm}},
                .inputs = {OpInput{.shape = s}},
                .check_grad = grad};
}

}  // namespace

LS_OP_CASES(transpose_ops) {
  std::vector<OpCase> c;
  c.push_back(transpose_case("transpose_2d", {5, 7}, {1, 0}));
  c.push_back(transpose_case("transpose_0_2_1", {2, 3, 5}, {0, 2, 1}));
  c.push_back(transpose_case("transpose_heads_0_2_1_3", {2, 3, 4, 5}, {0, 2, 1, 3}));
  c.push_back(transpose_case("transpose_last_two_0_1_3_2", {2, 3, 4, 5}, {0, 1, 3, 2}));
  c.push_back(transpose_case("transpose_cycle_2_0_1", {3, 4, 2}, {2, 0, 1}));
  c.push_back(transpose_case("transpose_negative_perm", {2, 3, 4}, {0, -1, -2}));
  c.push_back(transpose_case("transpose_unit_axes", {1, 3, 1, 4}, {3, 2, 0, 1}));
  c.push_back(transpose_case("transpose_identity", {2, 3}, {0, 1}));
  c.push_back(transpose_case("transpose_1d", {6}, {0}));
  // Past the 16 x 16 tile and the single-thread threshold, with ragged tile edges: forward only.
  c.push_back(transpose_case("transpose_tiled_large", {3, 67, 131}, {0, 2, 1}, false));
  c.push_back(transpose_case("transpose_runs_large", {2, 40, 9, 70}, {0, 2, 1, 3}, false));
  c.push_back(transpose_case("transpose_5d_mixed", {2, 3, 4, 5, 3}, {4, 1, 3, 0, 2}, false));
  return c;
}

}  // namespace lockstep::testing
