// Shape: up to 8 dimensions stored inline (no heap), -1 marks an unknown (batch) dimension.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace lockstep {

/// A tensor's dimensions, outermost first (row-major, channels-last for images: (N, H, W, C)),
/// stored inline for up to kMaxRank dims; -1 marks a dimension not known until run time (Keras's
/// None, usually the batch). Shape{} is a scalar (rank 0, numel 1).
class Shape {
 public:
  static constexpr int kMaxRank = 8;  ///< The most dimensions a Shape holds.
  Shape() = default;                  ///< A scalar: rank 0.
  /// Shape{32, 28, 28, 1}; an error when there are more than kMaxRank dims.
  Shape(std::initializer_list<int64_t> dims);
  /// The same from a vector; an error when it has more than kMaxRank dims.
  explicit Shape(const std::vector<int64_t>& dims);

  int rank() const { return rank_; }  ///< Number of dimensions (0 for a scalar).
  /// Dimension `i`; negative `i` counts from the end (-1 is the last). Not bounds-checked.
  int64_t operator[](int i) const { return dims_[i < 0 ? i + rank_ : i]; }
  /// Dimension `i` to assign; negative `i` counts from the end. Not bounds-checked.
  int64_t& operator[](int i) { return dims_[i < 0 ? i + rank_ : i]; }
  /// Product of dims; -1 when any dim is unknown. Throws lockstep::Error when the product
  /// overflows int64 (checked_numel's rule).
  int64_t numel() const;
  bool is_known() const;      ///< True when no dimension is -1 (unknown).
  void push_back(int64_t d);  ///< Appends a dimension; an error past kMaxRank.
  /// The dimensions as a vector.
  std::vector<int64_t> vec() const { return {dims_, dims_ + rank_}; }
  const int64_t* begin() const { return dims_; }        ///< First dimension, for range-for.
  const int64_t* end() const { return dims_ + rank_; }  ///< One past the last dimension.
  /// A copy with dimension `i` (negative counts from the end) set to `d`, e.g. with_dim(0, 32)
  /// to give a symbolic batch a size.
  Shape with_dim(int i, int64_t d) const;
  /// Row-major strides in elements: (2, 3, 4) gives (12, 4, 1).
  Shape contiguous_strides() const;
  std::string str() const;                ///< "(None, 28, 28, 1)" Keras-style
  bool operator==(const Shape& o) const;  ///< Same rank and the same dims (-1 equals only -1).
  /// Not operator==.
  bool operator!=(const Shape& o) const { return !(*this == o); }

 private:
  int64_t dims_[kMaxRank] = {};
  int rank_ = 0;
};

/// Overflow-checked sizes: every element count, byte size and rounded allocation computed from
/// a shape that a file, a config or a user gave goes through these, so that a huge dimension is
/// an error naming `what` ("Dense 'd': weight 'kernel'", "'w.h5': dataset 'x'") and never a
/// wrapped size that allocates too little. The product of the non-zero dims must fit in int64
/// (strides reach it even when another dim is 0), and the byte size in size_t.
///
/// checked_numel: every dim known and >= 0; returns the product.
int64_t checked_numel(const Shape& shape, const std::string& what);
/// checked_bytes: checked_numel(shape) * element_size.
size_t checked_bytes(const Shape& shape, size_t element_size, const std::string& what);
/// checked_bytes for a count already known: count * element_size.
size_t checked_bytes(int64_t count, size_t element_size, const std::string& what);
/// bytes rounded up to a multiple of `alignment` (> 0), e.g. an arena slot.
size_t checked_round_up(size_t bytes, size_t alignment, const std::string& what);

}  // namespace lockstep
