// Shape arithmetic and printing.
#include "lockstep/core/shape.h"

#include "lockstep/core/error.h"

namespace lockstep {

Shape::Shape(std::initializer_list<int64_t> dims) {
  LS_CHECK(dims.size() <= kMaxRank, "shape rank ", dims.size(), " exceeds ", kMaxRank);
  for (int64_t d : dims) dims_[rank_++] = d;
}

Shape::Shape(const std::vector<int64_t>& dims) {
  LS_CHECK(dims.size() <= kMaxRank, "shape rank ", dims.size(), " exceeds ", kMaxRank);
  for (int64_t d : dims) dims_[rank_++] = d;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) {
    if (dims_[i] < 0) return -1;
    n *= dims_[i];
  }
  return n;
}

bool Shape::is_known() const { return numel() >= 0; }

void Shape::push_back(int64_t d) {
  LS_CHECK(rank_ < kMaxRank, "shape rank exceeds ", kMaxRank);
  dims_[rank_++] = d;
}

Shape Shape::with_dim(int i, int64_t d) const {
  Shape s = *this;
  s[i] = d;
  return s;
}

Shape Shape::contiguous_strides() const {
  Shape s;
  s.rank_ = rank_;
  int64_t st = 1;
  for (int i = rank_ - 1; i >= 0; --i) {
    s.dims_[i] = st;
    st *= dims_[i] < 0 ? 1 : dims_[i];
  }
  return s;
}

std::string Shape::str() const {
  std::string s = "(";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ", ";
    s += dims_[i] < 0 ? "None" : std::to_string(dims_[i]);
  }
  if (rank_ == 1) s += ",";
  return s + ")";
}

bool Shape::operator==(const Shape& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

}  // namespace lockstep
