// Core: shapes, tensors, views, allocator alignment, Philox determinism, thread pool.
#include <gtest/gtest.h>

#include <atomic>
#include <set>

#include "lockstep/core/allocator.h"
#include "lockstep/core/rng.h"
#include "lockstep/core/tensor.h"
#include "lockstep/core/thread_pool.h"

using namespace lockstep;

TEST(Shape, NumelAndStrides) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.contiguous_strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(Shape({-1, 28, 28, 1}).str(), "(None, 28, 28, 1)");
  EXPECT_EQ(Shape({-1, 3}).numel(), -1);
}

TEST(Tensor, AlignedAndViews) {
  Tensor t = Tensor::from_vector(Shape{2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % kAlignment, 0u);
  EXPECT_EQ(t.reshape(Shape{3, -1}).shape(), (Shape{3, 2}));
  EXPECT_EQ(t.slice(1, 2).to_vector(), (std::vector<float>{4, 5, 6}));
  Tensor tt = t.transpose(0, 1);
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.contiguous().to_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_THROW(t.reshape(Shape{4, 2}), Error);
}

TEST(Tensor, DtypesCarried) {
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8}) {
    Tensor t = Tensor::zeros(Shape{3, 5}, d);
    EXPECT_EQ(t.nbytes(), 15 * dtype_size(d));
    EXPECT_EQ(dtype_from_name(dtype_name(d)), d);
  }
}

TEST(Philox, KnownAnswerAndCounterBased) {
  // Random123 known-answer test for philox4x32-10 with zero key and counter.
  auto r = philox4x32(0, 0, 0);
  EXPECT_EQ(r[0], 0x6627e8d5u);
  EXPECT_EQ(r[1], 0xe169c58du);
  EXPECT_EQ(r[2], 0xbc57ac4cu);
  EXPECT_EQ(r[3], 0x9b00dbd8u);
  Philox a(42, 7), b(42, 7), c(42, 8);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.next_u32(), b.next_u32());
  Philox a2(42, 7);
  int same = 0;
  for (int i = 0; i < 100; ++i) same += a2.next_u32() == c.next_u32();
  EXPECT_LT(same, 3);
  double sum = 0;
  Philox u(1);
  for (int i = 0; i < 10000; ++i) sum += u.uniform();
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

TEST(ThreadPool, ParallelForCoversAllAndRethrows) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(1000);
  pool.parallel_for(1000, [&](int64_t i) { hits[i]++; });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  EXPECT_THROW(pool.parallel_for(10, [](int64_t i) { if (i == 5) throw Error("boom"); }), Error);
}
