// The sequence ops beyond the op table: gather refuses an id outside the table on the host
// backends (naming the node, the id and the range) and never reads outside it; the cpu
// scatter-add (gather_grad) equals the reference bit for bit with many repeated ids (each column
// summed in id order, whatever the threads); on xla an out-of-range id gives a row of zeros
// (StableHLO's gather would clamp it to the last row: the lowering selects zeros instead).
#include <gtest/gtest.h>

#include "backends/xla_test_util.h"
#include "lockstep/graph/executable.h"
#include "ops/op_harness.h"
#include "test_util.h"

using namespace lockstep;
using lockstep::test_util::expect_has;

namespace {

struct Lookup {
  Graph g;
  Value table, ids, y;
};

std::unique_ptr<Lookup> lookup(int64_t rows, int64_t cols, Shape id_shape) {
  auto l = std::make_unique<Lookup>();
  l->table = l->g.input({DType::f32, Shape{rows, cols}}, "table");
  l->ids = l->g.input({DType::i32, id_shape}, "ids");
  l->y = l->g.add(op::gather, {l->table, l->ids}, {}, "word_embedding");
  return l;
}

Tensor table(int64_t rows, int64_t cols) {
  std::vector<float> v(size_t(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 1.f + float(i);
  return Tensor::from_vector({rows, cols}, v);
}

}  // namespace

TEST(SequenceOps, GatherRefusesAnIdOutsideTheTableNamingTheNodeTheIdAndTheRange) {
  for (const char* backend : {"reference", "cpu"})
    for (int32_t bad : {5, -2, 1 << 30}) {
      auto l = lookup(5, 3, Shape{2, 2});
      Executable exe(l->g, {l->table, l->ids}, {l->y}, CompileOptions{.backend = backend});
      exe.input(0).copy_from(table(5, 3));
      exe.input(1).copy_from(Tensor::from_vector_i32({2, 2}, {0, 4, bad, 1}));
      std::string err;
      try {
        exe.run();
      } catch (const Error& e) {
        err = e.what();
      }
      expect_has(err, {"'word_embedding'", "id " + std::to_string(bad), "[0, 5)"});
    }
}

TEST(SequenceOps, TheCpuScatterAddEqualsTheReferenceBitForBitWithRepeatedIds) {
  // 4096 ids over 7 rows of 200 columns: each row repeated ~585 times.
  const int64_t n = 4096, rows = 7, cols = 200;
  std::vector<int32_t> idv;
  for (int64_t i = 0; i < n; ++i) idv.push_back(int32_t((i * i + 3 * i) % rows));
  std::vector<float> dyv(size_t(n * cols));
  for (size_t i = 0; i < dyv.size(); ++i) dyv[i] = 0.001f * float(int(i % 1013) - 500);
  const Tensor ids = Tensor::from_vector_i32({n}, idv), dy = Tensor::from_vector({n, cols}, dyv);
  const Attrs at{{"axis", int64_t(0)}, {"size", rows}};
  auto ref =
      lockstep::testing::run_single_op("gather_grad", at, {dy, ids}, "reference")[0].to_vector();
  auto cpu = lockstep::testing::run_single_op("gather_grad", at, {dy, ids}, "cpu")[0].to_vector();
  ASSERT_EQ(ref.size(), size_t(rows * cols));
  EXPECT_EQ(cpu, ref);
  double total = 0;
  for (float v : dyv) total += v;
  double got = 0;
  for (float v : ref) got += v;
  EXPECT_NEAR(got, total, 1e-2);
}

#ifdef LOCKSTEP_XLA
TEST(SequenceXla, OutOfRangeIdsGiveZerosNotAClampedRow) {
  auto client = XLA_CLIENT_OR_SKIP();
  (void)client;
  auto l = lookup(5, 3, Shape{4});
  Executable exe(l->g, {l->table, l->ids}, {l->y}, CompileOptions{.backend = "xla"});
  exe.input(0).copy_from(table(5, 3));
  exe.input(1).copy_from(Tensor::from_vector_i32({4}, {4, -1, 5, 0}));
  exe.run();
  EXPECT_EQ(exe.output(0).to_vector(), (std::vector<float>{13, 14, 15, 0, 0, 0, 0, 0, 0, 1, 2, 3}));
}
#endif
