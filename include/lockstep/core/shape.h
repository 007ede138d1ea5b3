// Shape: up to 8 dimensions stored inline (no heap), -1 marks an unknown (batch) dimension.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace lockstep {

class Shape {
 public:
  static constexpr int kMaxRank = 8;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[i < 0 ? i + rank_ : i]; }
  int64_t& operator[](int i) { return dims_[i < 0 ? i + rank_ : i]; }
  // Product of dims; -1 when any dim is unknown.
  int64_t numel() const;
  bool is_known() const;
  void push_back(int64_t d);
  std::vector<int64_t> vec() const { return {dims_, dims_ + rank_}; }
  const int64_t* begin() const { return dims_; }
  const int64_t* end() const { return dims_ + rank_; }
  // Same shape with dimension 0 replaced (used to specialise a symbolic batch).
  Shape with_dim(int i, int64_t d) const;
  // Row-major strides in elements.
  Shape contiguous_strides() const;
  std::string str() const;  // "(None, 28, 28, 1)" Keras-style
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }

 private:
  int64_t dims_[kMaxRank] = {};
  int rank_ = 0;
};

}  // namespace lockstep
