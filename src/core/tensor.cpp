// Tensor construction, views and copies.
#include "lockstep/core/tensor.h"

#include <new>

#include "lockstep/core/allocator.h"

namespace lockstep {

Storage::~Storage() {
  if (owned && data) aligned_free(data);
}

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  LS_CHECK(shape.is_known(), "cannot allocate a tensor of unknown shape ", shape.str());
  const size_t bytes = checked_bytes(shape, dtype_size(dtype), "tensor");
  Tensor t;
  t.storage_ = std::make_shared<Storage>();
  t.storage_->bytes = bytes;
  try {
    t.storage_->data = aligned_alloc_bytes(bytes);
  } catch (const std::bad_alloc&) {
    LS_FAIL("cannot allocate ", bytes, " bytes for a ", dtype_name(dtype), " tensor of shape ",
            shape.str(), " (out of memory: is a dimension far larger than meant?)");
  }
  t.storage_->owned = true;
  t.shape_ = shape;
  t.strides_ = shape.contiguous_strides();
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  std::memset(t.raw(), 0, t.nbytes());
  return t;
}

Tensor Tensor::full(const Shape& shape, float value) {
  Tensor t = empty(shape);
  t.fill(value);
  return t;
}

Tensor Tensor::from_vector(const Shape& shape, const std::vector<float>& values) {
  LS_CHECK(int64_t(values.size()) == shape.numel(), "from_vector: ", values.size(),
           " values for shape ", shape.str());
  Tensor t = empty(shape);
  std::memcpy(t.raw(), values.data(), t.nbytes());
  return t;
}

Tensor Tensor::from_vector_i32(const Shape& shape, const std::vector<int32_t>& values) {
  LS_CHECK(int64_t(values.size()) == shape.numel(), "from_vector_i32: ", values.size(),
           " values for shape ", shape.str());
  Tensor t = empty(shape, DType::i32);
  std::memcpy(t.raw(), values.data(), t.nbytes());
  return t;
}

Tensor Tensor::borrow(void* data, const Shape& shape, DType dtype) {
  Tensor t;
  t.storage_ = std::make_shared<Storage>();
  t.storage_->data = data;
  t.storage_->bytes = checked_bytes(shape, dtype_size(dtype), "borrowed tensor");
  t.storage_->owned = false;
  t.shape_ = shape;
  t.strides_ = shape.contiguous_strides();
  t.dtype_ = dtype;
  return t;
}

bool Tensor::is_contiguous() const { return strides_ == shape_.contiguous_strides(); }

Tensor Tensor::reshape(const Shape& shape) const {
  LS_CHECK(is_contiguous(), "reshape of a non-contiguous tensor; call contiguous() first");
  Shape s = shape;
  int unknown = -1;
  int64_t known = 1;
  for (int i = 0; i < s.rank(); ++i) {
    if (s[i] < 0) {
      LS_CHECK(unknown < 0, "reshape: more than one -1 in ", shape.str());
      unknown = i;
    } else {
      known *= s[i];
    }
  }
  if (unknown >= 0) s[unknown] = known ? numel() / known : 0;
  LS_CHECK(s.numel() == numel(), "reshape: cannot view ", shape_.str(), " as ", shape.str());
  Tensor t = *this;
  t.shape_ = s;
  t.strides_ = s.contiguous_strides();
  return t;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  LS_CHECK(rank() >= 1 && begin >= 0 && end <= dim(0) && begin <= end, "slice [", begin, ", ", end,
           ") out of range for ", shape_.str());
  Tensor t = *this;
  t.offset_ += size_t(begin * strides_[0]) * dtype_size(dtype_);
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::transpose(int a, int b) const {
  Tensor t = *this;
  std::swap(t.shape_[a], t.shape_[b]);
  std::swap(t.strides_[a], t.strides_[b]);
  return t;
}

template <typename Fn>
static void for_each_index(const Shape& shape, Fn&& fn) {
  int r = shape.rank();
  int64_t n = shape.numel();
  int64_t idx[Shape::kMaxRank] = {};
  for (int64_t i = 0; i < n; ++i) {
    fn(idx);
    for (int d = r - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  Tensor out = empty(shape_, dtype_);
  size_t es = dtype_size(dtype_);
  char* dst = static_cast<char*>(out.raw());
  const char* src = static_cast<const char*>(raw());
  for_each_index(shape_, [&](const int64_t* idx) {
    int64_t off = 0;
    for (int d = 0; d < rank(); ++d) off += idx[d] * strides_[d];
    std::memcpy(dst, src + off * es, es);
    dst += es;
  });
  return out;
}

Tensor Tensor::clone() const {
  Tensor c = contiguous();
  if (c.storage_ != storage_) return c;
  Tensor out = empty(shape_, dtype_);
  std::memcpy(out.raw(), raw(), nbytes());
  return out;
}

void Tensor::copy_from(const Tensor& src) {
  LS_CHECK(src.shape() == shape_ && src.dtype() == dtype_, "copy_from: shape/dtype mismatch ",
           src.shape().str(), " -> ", shape_.str());
  LS_CHECK(is_contiguous(), "copy_from into a non-contiguous tensor");
  Tensor s = src.contiguous();
  std::memcpy(raw(), s.raw(), nbytes());
}

void Tensor::fill(float v) {
  LS_CHECK(is_contiguous(), "fill of a non-contiguous tensor");
  int64_t n = numel();
  switch (dtype_) {
    case DType::f32: {
      float* p = data<float>();
      for (int64_t i = 0; i < n; ++i) p[i] = v;
      break;
    }
    case DType::i32: {
      auto* p = data<int32_t>();
      for (int64_t i = 0; i < n; ++i) p[i] = int32_t(v);
      break;
    }
    case DType::i64: {
      auto* p = data<int64_t>();
      for (int64_t i = 0; i < n; ++i) p[i] = int64_t(v);
      break;
    }
    case DType::u8: {
      auto* p = data<uint8_t>();
      for (int64_t i = 0; i < n; ++i) p[i] = uint8_t(v);
      break;
    }
    case DType::bf16: {
      auto* p = data<bf16>();
      for (int64_t i = 0; i < n; ++i) p[i] = f32_to_bf16(v);
      break;
    }
    default:
      LS_FAIL("fill: dtype ", dtype_name(dtype_), " not supported");
  }
}

std::vector<float> Tensor::to_vector() const {
  Tensor c = contiguous();
  int64_t n = numel();
  std::vector<float> v(size_t(std::max<int64_t>(n, 0)));
  switch (dtype_) {
    case DType::f32:
      std::memcpy(v.data(), c.raw(), c.nbytes());
      break;
    case DType::i32: {
      auto* p = c.data<int32_t>();
      for (int64_t i = 0; i < n; ++i) v[i] = float(p[i]);
      break;
    }
    case DType::i64: {
      auto* p = c.data<int64_t>();
      for (int64_t i = 0; i < n; ++i) v[i] = float(p[i]);
      break;
    }
    case DType::u8: {
      auto* p = c.data<uint8_t>();
      for (int64_t i = 0; i < n; ++i) v[i] = float(p[i]);
      break;
    }
    case DType::bf16:
      bf16_to_f32(c.data<bf16>(), v.data(), n);
      break;
    default:
      LS_FAIL("to_vector: dtype ", dtype_name(dtype_), " not supported");
  }
  return v;
}

float Tensor::item() const {
  LS_CHECK(numel() == 1, "item() on a tensor of shape ", shape_.str());
  return to_vector()[0];
}

}  // namespace lockstep
