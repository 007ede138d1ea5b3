// Overflow-checked sizes (issue 25, item 1): a shape whose element count or byte size does not
// fit in 64 bits is a lockstep::Error naming it — from Shape::numel, checked_numel /
// checked_bytes / checked_round_up, Tensor allocation, and layer weights built from a config
// (Dense units 2^62, Conv2D filters 2^62), where it used to wrap to a tiny allocation and crash.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>

#include "lockstep/core/allocator.h"
#include "lockstep/core/shape.h"
#include "lockstep/core/tensor.h"
#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
using test_util::error_of;

using lockstep::test_util::expect_has;

namespace {

constexpr int64_t k2to62 = int64_t(1) << 62;

// A Sequential model JSON: Input(shape) then `layer` (a Keras layer entry).
std::string model_json(const std::string& input_shape, const std::string& layer) {
  return R"({"class_name": "Sequential", "config": {"name": "s", "layers": [
    {"class_name": "InputLayer", "config": {"batch_shape": [null, )" +
         input_shape + R"(], "name": "in"}}, )" + layer + "]}}";
}

}  // namespace

TEST(CheckedSizes, NumelAndBytesOverflowAreErrors) {
  expect_has(error_of([] { Shape{k2to62, 4}.numel(); }), {"(4611686018427387904, 4)", "64 bits"});
  expect_has(error_of([] { Shape{k2to62, 2}.numel(); }), {"64 bits"});  // 2^63: one past
  EXPECT_EQ((Shape{int64_t(1) << 61, 3}.numel()), 3 * (int64_t(1) << 61));
  EXPECT_EQ((Shape{3, -1}.numel()), -1);  // unknown stays -1
  EXPECT_EQ((Shape{0, int64_t(1) << 61, 3}.numel()), 0);
  expect_has(error_of([] {
               checked_numel(Shape{k2to62, k2to62, 0}, "weight 'w'");
             }),
             {"weight 'w'", "64 bits"});  // strides would still overflow past the 0
  expect_has(error_of([] { checked_numel(Shape{2, -1}, "input"); }), {"input", "unknown"});
  EXPECT_EQ(checked_bytes(Shape{3, 5}, 4, "t"), 60u);
  expect_has(error_of([] { checked_bytes(Shape{k2to62}, 4, "dataset 'x'"); }),
             {"dataset 'x'", "2^64 bytes"});
  expect_has(error_of([] { checked_bytes(int64_t(1) << 62, 8, "arena"); }), {"arena", "overflow"});
  EXPECT_EQ(checked_round_up(65, 64, "slot"), 128u);
  EXPECT_EQ(checked_round_up(0, 64, "slot"), 0u);
  expect_has(error_of([] { checked_round_up(SIZE_MAX - 3, 64, "arena buffer"); }),
             {"arena buffer", "overflow"});
}

TEST(CheckedSizes, TensorAllocationRefusesWrappingSizes) {
  // 2^62 f32 elements are 2^64 bytes: the byte count wrapped to 0 and a 64-byte block was
  // handed out for them.
  expect_has(error_of([] { Tensor::zeros(Shape{k2to62}); }), {"tensor", "(4611686018427387904,)"});
  expect_has(error_of([] { Tensor::empty(Shape{INT64_MAX, 2}, DType::u8); }), {"64 bits"});
  // Too large to allocate but no overflow: an error, not std::bad_alloc.
  expect_has(error_of([] { Tensor::zeros(Shape{int64_t(1) << 55}, DType::u8); }),
             {"cannot allocate", "36028797018963968 bytes"});
  // Rounding to the allocator's alignment used to wrap to a 64-byte block.
  expect_has(error_of([] { aligned_alloc_bytes(SIZE_MAX - 10); }), {"allocation", "overflow"});
}

TEST(CheckedSizes, HugeDenseUnitsFromAConfigAreAnError) {
  for (const std::string& units : {std::to_string(k2to62), std::to_string(int64_t(1) << 60)}) {
    const std::string j = model_json(
        "4", R"({"class_name": "Dense", "config": {"name": "d", "units": )" + units + "}}");
    expect_has(error_of([&] { model_from_json(j).summary(); }), {"Dense 'd'", "weight 'kernel'"});
  }
}

TEST(CheckedSizes, HugeConv2DFiltersFromAConfigAreAnError) {
  const std::string j = model_json("8, 8, 3", R"({"class_name": "Conv2D", "config": {
      "name": "c", "filters": )" + std::to_string(k2to62) +
                                                  R"(, "kernel_size": [3, 3]}})");
  expect_has(error_of([&] { model_from_json(j).summary(); }), {"Conv2D 'c'", "weight 'kernel'"});
}
