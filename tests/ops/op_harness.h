// The table-driven op test: each case builds one op node and checks
//   1. every backend that has a kernel against the reference backend (forward outputs), and
//   2. the op's gradient (through autodiff, run on the reference and cpu backends) against
//      central finite differences of L = sum(w * out0) with fixed random w.
// Cases register themselves with LS_OP_CASE in any tests/ops/*_cases.cpp file.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "lockstep/graph/executable.h"

namespace lockstep::testing {

struct OpInput {
  Shape shape;
  DType dtype = DType::f32;
  float lo = -1.f, hi = 1.f;   // uniform init range (ints: [lo, hi) integers)
  bool differentiable = true;  // checked by finite differences (f32 only)
  std::vector<float> values;   // explicit values instead of random (optional)
};

// The op of a table case: written as its name in the tables ("relu"), held as its id (an
// undeclared name is an error naming it when the table is built).
struct CaseOp : OpId {
  CaseOp() = default;
  CaseOp(OpId id) : OpId(id) {}                                 // NOLINT: implicit on purpose
  CaseOp(const char* name) : OpId(OpId::named(name)) {}         // NOLINT
  CaseOp(const std::string& name) : OpId(OpId::named(name)) {}  // NOLINT
};

struct OpCase {
  std::string name;  // unique test-case name
  CaseOp op;
  Attrs attrs;
  std::vector<OpInput> inputs;
  bool check_grad = true;
  float fwd_tol = 1e-4f;   // relative+absolute tolerance backend vs reference
  float grad_tol = 2e-2f;  // relative tolerance of FD check
  float fd_eps = 1e-2f;    // finite-difference step (float32: keep ~1e-2..1e-3)
  int grad_output = 0;     // which output L is built from
  // Optional: builds the node(s) itself from the placeholders and returns the output value.
  std::function<Value(Graph&, const std::vector<Value>&)> build;
};

std::vector<OpCase>& op_cases();
struct OpCaseRegistrar {
  explicit OpCaseRegistrar(std::function<std::vector<OpCase>()> f) {
    for (auto& c : f()) op_cases().push_back(std::move(c));
  }
};

#define LS_OP_CASES(id)                                                        \
  static std::vector<::lockstep::testing::OpCase> ls_cases_##id();             \
  static ::lockstep::testing::OpCaseRegistrar ls_case_reg_##id(ls_cases_##id); \
  static std::vector<::lockstep::testing::OpCase> ls_cases_##id()

// The finite-difference check's verdict: "" when every element of `analytic` is within `tol`
// of `numeric`, relative to the element (with a floor of tol/100 of the largest numeric
// value, for rounding); else which element is off and by how much.
std::string gradient_mismatch(const std::vector<float>& numeric, const std::vector<float>& analytic,
                              double tol);

// Compiles `outputs` of `g` for `backend` (CompileOptions.backend), copies `tensors` into the
// placeholders `feeds`, runs one step and returns copies of the outputs.
std::vector<Tensor> run_graph(const Graph& g, const std::vector<Value>& feeds,
                              const std::vector<Value>& outputs, const std::vector<Tensor>& tensors,
                              const std::string& backend);

// Builds one `op` node (Graph::add_multi, every output) on placeholders shaped like `inputs`,
// runs it on `backend` and returns its outputs. The op table and the known-value table both
// build their nodes this way.
std::vector<Tensor> run_single_op(const std::string& op, const Attrs& attrs,
                                  const std::vector<Tensor>& inputs, const std::string& backend);

// Runs one case; returns "" on success, else a description of the mismatch.
std::string run_op_case(const OpCase& c, const std::string& backend);
std::string run_grad_check(const OpCase& c);

}  // namespace lockstep::testing
