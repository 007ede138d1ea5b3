// Shape arithmetic and printing.
#include "lockstep/core/shape.h"

#include <climits>
#include <cstdint>

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

namespace {
// The product of the non-zero dims, or false when it overflows int64.
bool extent(const int64_t* dims, int rank, int64_t* out, bool* has_zero) {
  int64_t n = 1;
  *has_zero = false;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] == 0) {
      *has_zero = true;
      continue;
    }
    if (__builtin_mul_overflow(n, dims[i], &n)) return false;
  }
  *out = n;
  return true;
}
}  // namespace

int64_t Shape::numel() const {
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] < 0) return -1;
  int64_t n = 0;
  bool has_zero = false;
  if (!extent(dims_, rank_, &n, &has_zero)) checked_numel(*this, "Shape::numel");  // throws
  return has_zero ? 0 : n;
}

int64_t checked_numel(const Shape& shape, const std::string& what) {
  for (int64_t d : shape)
    LS_CHECK(d >= 0, what, ": shape ", shape.str(), " has an unknown or negative dimension");
  int64_t n = 0;
  bool has_zero = false;
  LS_CHECK(extent(shape.begin(), shape.rank(), &n, &has_zero), what, ": shape ", shape.str(),
           " has more elements than fit in 64 bits (a dimension is far too large)");
  return has_zero ? 0 : n;
}

size_t checked_bytes(int64_t count, size_t element_size, const std::string& what) {
  LS_CHECK(count >= 0, what, ": negative element count ", count);
  uint64_t bytes = 0;
  LS_CHECK(!__builtin_mul_overflow(uint64_t(count), uint64_t(element_size), &bytes) &&
               bytes <= uint64_t(SIZE_MAX),
           what, ": ", count, " elements of ", element_size,
           " bytes overflow a 64-bit byte count (a dimension is far too large)");
  return size_t(bytes);
}

size_t checked_bytes(const Shape& shape, size_t element_size, const std::string& what) {
  const int64_t n = checked_numel(shape, what);
  try {
    return checked_bytes(n, element_size, what);
  } catch (const Error&) {
    LS_FAIL(what, ": shape ", shape.str(),
            " needs more than 2^64 bytes (a dimension is far too "
            "large)");
  }
}

size_t checked_round_up(size_t bytes, size_t alignment, const std::string& what) {
  LS_CHECK(alignment > 0, what, ": alignment must be positive");
  size_t r = 0;
  LS_CHECK(!__builtin_add_overflow(bytes, alignment - 1, &r), what, ": ", bytes,
           " bytes cannot be rounded up to a multiple of ", alignment, " (overflow)");
  return r / alignment * alignment;
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
    // A stride past int64 means a shape no tensor can have; checked_numel refuses those
    // before anything is allocated, so saturate here rather than wrap.
    if (dims_[i] >= 0 && __builtin_mul_overflow(st, dims_[i], &st)) st = INT64_MAX;
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
