// Implementation of the table-driven op test (see op_harness.h) and the parameterised gtest.
#include "ops/op_harness.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "lockstep/core/rng.h"
#include "lockstep/graph/autodiff.h"

namespace lockstep::testing {

std::vector<OpCase>& op_cases() {
  static std::vector<OpCase> cases;
  return cases;
}

static Tensor make_input(const OpInput& in, uint64_t seed) {
  Tensor t = Tensor::empty(in.shape, in.dtype);
  Philox rng(seed);
  int64_t n = t.numel();
  if (!in.values.empty()) {
    LS_CHECK(int64_t(in.values.size()) == n, "case input values size mismatch");
  }
  for (int64_t i = 0; i < n; ++i) {
    float v = in.values.empty() ? rng.uniform(in.lo, in.hi) : in.values[i];
    switch (in.dtype) {
      case DType::f32:
        t.data<float>()[i] = v;
        break;
      case DType::i32:
        t.data<int32_t>()[i] = int32_t(std::floor(v));
        break;
      case DType::i64:
        t.data<int64_t>()[i] = int64_t(std::floor(v));
        break;
      case DType::u8:
        t.data<uint8_t>()[i] = uint8_t(std::floor(v));
        break;
      default:
        LS_FAIL("unsupported dtype in op case");
    }
  }
  return t;
}

struct Built {
  Graph g;
  std::vector<Value> inputs;
  Value out;
  std::vector<Value> all_outs;
};

static Built build(const OpCase& c) {
  Built b;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    b.inputs.push_back(b.g.input({c.inputs[i].dtype, c.inputs[i].shape}, "in" + std::to_string(i)));
  if (c.build) {
    b.out = c.build(b.g, b.inputs);
    b.all_outs = {b.out};
  } else {
    b.all_outs = b.g.add_multi(c.op, b.inputs, c.attrs, c.name);
    b.out = b.all_outs.at(c.grad_output);
  }
  return b;
}

std::vector<Tensor> run_graph(const Graph& g, const std::vector<Value>& feeds,
                              const std::vector<Value>& outputs, const std::vector<Tensor>& tensors,
                              const std::string& backend) {
  CompileOptions o;
  o.backend = backend;
  Executable exe(g, feeds, outputs, o);
  LS_CHECK(tensors.size() == feeds.size(), "run_graph: ", tensors.size(), " tensors for ",
           feeds.size(), " inputs");
  for (size_t i = 0; i < tensors.size(); ++i) exe.input(int(i)).copy_from(tensors[i]);
  exe.run();
  std::vector<Tensor> r;
  for (int i = 0; i < exe.num_outputs(); ++i) r.push_back(exe.output(i).clone());
  return r;
}

std::vector<Tensor> run_single_op(const std::string& op, const Attrs& attrs,
                                  const std::vector<Tensor>& inputs, const std::string& backend) {
  Graph g;
  std::vector<Value> feeds;
  for (size_t i = 0; i < inputs.size(); ++i)
    feeds.push_back(g.input({inputs[i].dtype(), inputs[i].shape()}, "in" + std::to_string(i)));
  std::vector<Value> outs = g.add_multi(OpId::named(op), feeds, attrs, op);
  return run_graph(g, feeds, outs, inputs, backend);
}

static std::vector<std::vector<float>> run(Built& b, const std::vector<Tensor>& ins,
                                           const std::string& backend,
                                           const std::vector<Value>& outs) {
  std::vector<std::vector<float>> r;
  for (const Tensor& t : run_graph(b.g, b.inputs, outs, ins, backend)) r.push_back(t.to_vector());
  return r;
}

std::string gradient_mismatch(const std::vector<float>& numeric, const std::vector<float>& analytic,
                              double tol) {
  double max_ref = 0;
  for (float v : numeric) max_ref = std::max(max_ref, std::fabs(double(v)));
  // Relative per element. The floor covers finite differences' own rounding on elements far
  // below the gradient's scale (1% of the largest), not a fixed absolute slack that would let
  // a whole small gradient be wrong.
  const double floor = tol * 0.01 * max_ref + 1e-5;
  for (size_t e = 0; e < numeric.size(); ++e) {
    const double n = numeric[e], a = analytic[e], err = std::fabs(n - a);
    if (!(err <= tol * std::max(std::fabs(n), std::fabs(a)) + floor)) {
      std::ostringstream os;
      os << "element " << e << ": analytic " << a << ", numeric " << n << " (off by " << err
         << ", relative tolerance " << tol << ", max |numeric| " << max_ref << ")";
      return os.str();
    }
  }
  return "";
}

static std::string compare(const std::vector<float>& got, const std::vector<float>& want, float tol,
                           const std::string& what) {
  if (got.size() != want.size()) return what + ": size mismatch";
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(want[i])) {  // NaN where the reference has NaN
      if (std::isnan(got[i]) == std::isnan(want[i])) continue;
      std::ostringstream os;
      os << what << ": element " << i << " got " << got[i] << " want " << want[i];
      return os.str();
    }
    float d = std::fabs(got[i] - want[i]);
    if (!(d <= tol * (1.f + std::fabs(want[i])))) {
      std::ostringstream os;
      os << what << ": element " << i << " got " << got[i] << " want " << want[i];
      return os.str();
    }
  }
  return "";
}

std::string run_op_case(const OpCase& c, const std::string& backend) {
  Built b = build(c);
  std::vector<Tensor> ins;
  for (size_t i = 0; i < c.inputs.size(); ++i) ins.push_back(make_input(c.inputs[i], 1000 + i));
  auto ref = run(b, ins, "reference", b.all_outs);
  auto got = run(b, ins, backend, b.all_outs);
  for (size_t k = 0; k < ref.size(); ++k) {
    auto err = compare(got[k], ref[k], c.fwd_tol, backend + " output " + std::to_string(k));
    if (!err.empty()) return err;
  }
  return "";
}

std::string run_grad_check(const OpCase& c) {
  Built b = build(c);
  std::vector<Tensor> ins;
  for (size_t i = 0; i < c.inputs.size(); ++i) ins.push_back(make_input(c.inputs[i], 1000 + i));
  // L = sum(w * out) with w a fixed random input.
  const TensorType& ot = b.g.type(b.out);
  Value w = b.g.input(ot, "w");
  Value prod = b.g.add(op::mul, {b.out, w});
  std::vector<int64_t> all;
  for (int i = 0; i < ot.shape.rank(); ++i) all.push_back(i);
  Value loss = ot.shape.rank()
                   ? b.g.add(op::reduce_sum, {prod}, Attrs{{"axes", all}, {"keepdims", false}})
                   : prod;
  std::vector<Value> wrt;
  std::vector<int> wrt_idx;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (c.inputs[i].differentiable && c.inputs[i].dtype == DType::f32) {
      wrt.push_back(b.inputs[i]);
      wrt_idx.push_back(int(i));
    }
  auto grads = gradients(b.g, loss, wrt);
  Tensor wt = make_input({ot.shape, DType::f32, -1.f, 1.f}, 77);
  auto feed = b.inputs;
  feed.push_back(w);
  auto all_ins = ins;
  all_ins.push_back(wt);
  for (const std::string& backend : host_backends()) {
    CompileOptions o;
    o.backend = backend;
    Executable gexe(b.g, feed, grads, o);
    Executable lexe(b.g, feed, {loss}, CompileOptions{.backend = "reference"});
    for (size_t i = 0; i < all_ins.size(); ++i) {
      gexe.input(int(i)).copy_from(all_ins[i]);
      lexe.input(int(i)).copy_from(all_ins[i]);
    }
    gexe.run();
    for (size_t k = 0; k < wrt.size(); ++k) {
      auto analytic = gexe.output(int(k)).to_vector();
      Tensor& x = lexe.input(wrt_idx[k]);
      float* xp = x.data<float>();
      std::vector<float> numeric(analytic.size());
      for (int64_t e = 0; e < x.numel(); ++e) {
        float orig = xp[e];
        xp[e] = orig + c.fd_eps;
        lexe.run();
        double lp = lexe.output(0).item();
        xp[e] = orig - c.fd_eps;
        lexe.run();
        double lm = lexe.output(0).item();
        xp[e] = orig;
        numeric[e] = float((lp - lm) / (2 * c.fd_eps));
      }
      if (std::string why = gradient_mismatch(numeric, analytic, c.grad_tol); !why.empty()) {
        std::ostringstream os;
        os << backend << ": gradient of input " << wrt_idx[k] << ": " << why;
        for (size_t e = 0; e < std::min<size_t>(analytic.size(), 6); ++e)
          os << "\n  [" << e << "] analytic " << analytic[e] << " numeric " << numeric[e];
        return os.str();
      }
    }
  }
  return "";
}

class OpTable : public ::testing::TestWithParam<int> {};

TEST_P(OpTable, BackendsMatchReference) {
  const OpCase& c = op_cases()[GetParam()];
  for (const std::string& backend : host_backends()) {
    if (backend == kReferenceBackend) continue;
    std::string err = run_op_case(c, backend);
    EXPECT_EQ(err, "") << c.name;
  }
}

// Mixed precision: every case of an op that computes in bf16 (OpDef::bf16) runs with its float
// inputs cast to bf16 and its float outputs cast back, on every backend (the cpu kernels that
// take bf16, and the conversion adapter elsewhere), against the f32 reference kernel run on the
// same bf16-rounded inputs. The tolerance allows the outputs' own rounding to bf16 (2^-8
// relative) plus f32 accumulation-order differences.
static std::vector<int> bf16_cases() {
  std::vector<int> r;
  for (int i = 0; i < int(op_cases().size()); ++i) {
    const OpCase& c = op_cases()[i];
    if (!c.build && OpRegistry::get().op(c.op).bf16) r.push_back(i);
  }
  return r;
}

// The case's node on f32 placeholders whose float inputs pass through a cast to bf16 (or, for
// the f32 oracle, an identity: the op node gets the same id, which keys dropout's randomness),
// with bf16 outputs cast back to f32.
static Built build_mixed(const OpCase& c, bool bf16) {
  Built b;
  std::vector<Value> ins;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    b.inputs.push_back(b.g.input({c.inputs[i].dtype, c.inputs[i].shape}, "in" + std::to_string(i)));
    if (c.inputs[i].dtype != DType::f32)
      ins.push_back(b.inputs.back());
    else if (bf16)
      ins.push_back(
          b.g.add(op::cast, {b.inputs.back()}, Attrs{{"dtype", std::string("bfloat16")}}));
    else
      ins.push_back(b.g.add(op::identity, {b.inputs.back()}));
  }
  for (Value v : b.g.add_multi(c.op, ins, c.attrs, c.name))
    b.all_outs.push_back(b.g.type(v).dtype == DType::bf16
                             ? b.g.add(op::cast, {v}, Attrs{{"dtype", std::string("float32")}})
                             : v);
  return b;
}

static std::string run_bf16_case(const OpCase& c, const std::string& backend) {
  std::vector<Tensor> ins;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    ins.push_back(make_input(c.inputs[i], 1000 + i));
    if (ins.back().dtype() != DType::f32) continue;
    float* p = ins.back().data<float>();
    for (int64_t k = 0; k < ins.back().numel(); ++k) p[k] = bf16_to_f32(f32_to_bf16(p[k]));
  }
  Built want = build_mixed(c, false), got_graph = build_mixed(c, true);
  const Node& cast0 = got_graph.g.node(got_graph.all_outs[0].node);
  if (cast0.op != op::cast || got_graph.g.type(cast0.inputs[0]).dtype != DType::bf16)
    return c.op + ": output 0 is not computed in bfloat16";
  auto ref = run(want, ins, "reference", want.all_outs);
  auto got = run(got_graph, ins, backend, got_graph.all_outs);
  for (size_t k = 0; k < ref.size(); ++k) {
    auto err = compare(got[k], ref[k], std::max(c.fwd_tol, 2e-2f),
                       backend + " bf16 output " + std::to_string(k));
    if (!err.empty()) return err;
  }
  return "";
}

class OpTableBf16 : public ::testing::TestWithParam<int> {};

TEST_P(OpTableBf16, MatchesF32ReferenceOnRoundedInputs) {
  const OpCase& c = op_cases()[GetParam()];
  for (const std::string& backend : host_backends())
    EXPECT_EQ(run_bf16_case(c, backend), "") << c.name;
}

// Only the cases with a gradient to check (a case with check_grad = false would otherwise be a
// test that always skips).
class OpTableGradient : public ::testing::TestWithParam<int> {};

TEST_P(OpTableGradient, MatchesFiniteDifferences) {
  const OpCase& c = op_cases()[GetParam()];
  ASSERT_TRUE(c.check_grad);
  std::string err = run_grad_check(c);
  EXPECT_EQ(err, "") << c.name;
}

static std::string case_test_name(const ::testing::TestParamInfo<int>& info) {
  std::string n = op_cases()[info.param].name;
  for (char& ch : n)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

static std::vector<int> cases_with_gradient() {
  std::vector<int> r;
  for (int i = 0; i < int(op_cases().size()); ++i)
    if (op_cases()[i].check_grad) r.push_back(i);
  return r;
}

// (gtest evaluates these generators after static initialisation, when every LS_OP_CASES file
// has registered its cases.)
INSTANTIATE_TEST_SUITE_P(All, OpTable, ::testing::Range(0, int(op_cases().size())), case_test_name);
INSTANTIATE_TEST_SUITE_P(All, OpTableBf16, ::testing::ValuesIn(bf16_cases()), case_test_name);
INSTANTIATE_TEST_SUITE_P(All, OpTableGradient, ::testing::ValuesIn(cases_with_gradient()),
                         case_test_name);

}  // namespace lockstep::testing
