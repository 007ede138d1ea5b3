// The batch split across xla replicas (src/backends/xla/replica_split.h): equal shares of the
// rows, and a batch that does not divide among the replicas is an error saying what to do.
#include <gtest/gtest.h>

#ifndef LOCKSTEP_XLA
TEST(XlaReplicaSplit, NeedsTheXlaBuild) { GTEST_SKIP() << "built without LOCKSTEP_XLA"; }
#else
#include "backends/xla/replica_split.h"
#include "test_util.h"

using namespace lockstep;

TEST(XlaReplicaSplit, EachReplicaGetsItsShareOfTheRows) {
  Tensor x = Tensor::from_vector(Shape{4, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  Tensor y = Tensor::from_vector_i32({4}, {10, 11, 12, 13});
  auto parts = xla::split_batch({x, y}, 2);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1][0].to_vector(), (std::vector<float>{4, 5, 6, 7}));
  EXPECT_EQ(parts[1][1].data<int32_t>()[0], 12);
  EXPECT_EQ(parts[0][0].shape(), (Shape{2, 2}));
}

TEST(XlaReplicaSplit, ABatchThatDoesNotDivideSaysWhatToDo) {
  Tensor x = Tensor::zeros(Shape{10, 3});
  const std::string err = test_util::error_of([&] { xla::split_batch({x}, 4); });
  EXPECT_NE(err.find("xla: a batch of 10 rows does not divide among 4 replicas (one per device); "
                     "use a batch size that is a multiple of 4 (8 or 12)"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("drop_remainder"), std::string::npos) << err;
}

TEST(XlaReplicaSplit, InputsWithDifferentRowCountsAreNamed) {
  Tensor x = Tensor::zeros(Shape{8, 3}), y = Tensor::zeros(Shape{6});
  const std::string err = test_util::error_of([&] { xla::split_batch({x, y}, 2); });
  EXPECT_NE(err.find("input 1 of the step has shape"), std::string::npos) << err;
  EXPECT_NE(err.find("input 0 has 8 rows"), std::string::npos) << err;
}

#endif
