// Shape: up to 8 dimensions stored inline (no heap), -1 marks an unknown (batch) dimension.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace lockstep {

/// A tensor's dimensions, e.g. Shape{128, 28, 28, 1} (NHWC); -1 is an unknown dimension (the
/// batch of a symbolic tensor). Rank 0 is a scalar.
class Shape {
 public:
  static constexpr int kMaxRank = 8;  ///< the most dimensions a shape holds
  Shape() = default;                  ///< rank 0 (a scalar)
  Shape(std::initializer_list<int64_t> dims);     ///< Shape{2, 3}
  explicit Shape(const std::vector<int64_t>& dims);  ///< from a vector of dims

  int rank() const { return rank_; }  ///< the number of dimensions
  /// Dimension i; a negative i counts from the end (-1: the last).
  int64_t operator[](int i) const { return dims_[i < 0 ? i + rank_ : i]; }
  /// Dimension i, writable; a negative i counts from the end.
  int64_t& operator[](int i) { return dims_[i < 0 ? i + rank_ : i]; }
  /// Product of dims; -1 when any dim is unknown.
  int64_t numel() const;
  bool is_known() const;       ///< no dimension is -1
  void push_back(int64_t d);   ///< appends a dimension (up to kMaxRank)
  std::vector<int64_t> vec() const { return {dims_, dims_ + rank_}; }  ///< the dims as a vector
  const int64_t* begin() const { return dims_; }          ///< iterates over the dims
  const int64_t* end() const { return dims_ + rank_; }    ///< past the last dim
  /// Same shape with dimension 0 replaced (used to specialise a symbolic batch).
  Shape with_dim(int i, int64_t d) const;
  /// Row-major strides in elements.
  Shape contiguous_strides() const;
  std::string str() const;  ///< "(None, 28, 28, 1)" Keras-style
  bool operator==(const Shape& o) const;  ///< same rank and dims
  bool operator!=(const Shape& o) const { return !(*this == o); }  ///< not ==

 private:
  int64_t dims_[kMaxRank] = {};
  int rank_ = 0;
};

}  // namespace lockstep
