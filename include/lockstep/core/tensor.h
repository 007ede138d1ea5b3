// Tensor: a typed, shaped, strided view into reference-counted storage.
#pragma once
#include <cstring>
#include <memory>
#include <vector>

#include "lockstep/core/dtype.h"
#include "lockstep/core/error.h"
#include "lockstep/core/shape.h"

namespace lockstep {

// A block of memory. Owned blocks are freed with the storage; borrowed ones (arena slices,
// user buffers) are not.
struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  bool owned = false;
  Device device;
  ~Storage();
};

class Tensor {
 public:
  Tensor() = default;
  // New zero-initialised contiguous tensor.
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32);
  static Tensor empty(const Shape& shape, DType dtype = DType::f32);
  static Tensor full(const Shape& shape, float value);
  static Tensor from_vector(const Shape& shape, const std::vector<float>& values);
  static Tensor from_vector_i32(const Shape& shape, const std::vector<int32_t>& values);
  // A non-owning view of memory someone else keeps alive.
  static Tensor borrow(void* data, const Shape& shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device : Device{}; }
  int rank() const { return shape_.rank(); }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;

  void* raw() const { return static_cast<char*>(storage_->data) + offset_; }
  template <typename T> T* data() const {
    LS_CHECK(dtype_ == dtype_of<T>(), "tensor has dtype ", dtype_name(dtype_),
             ", accessed as another type");
    return static_cast<T*>(raw());
  }

  // Views sharing storage.
  Tensor reshape(const Shape& shape) const;  // contiguous only; one -1 allowed
  Tensor slice(int64_t begin, int64_t end) const;  // along dim 0
  Tensor transpose(int a, int b) const;            // strided view
  Tensor contiguous() const;                       // copy if not contiguous
  Tensor clone() const;
  void copy_from(const Tensor& src);  // same shape and dtype; contiguous src and dst
  void fill(float v);

  std::vector<float> to_vector() const;  // f32 (or i32/u8/i64 converted) in row-major order
  float item() const;

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes
  Shape shape_, strides_;
  DType dtype_ = DType::f32;
};

}  // namespace lockstep
