// Tensor: a typed, shaped, strided view into reference-counted storage.
#pragma once
#include <cstring>
#include <memory>
#include <vector>

#include "lockstep/core/dtype.h"
#include "lockstep/core/error.h"
#include "lockstep/core/shape.h"

namespace lockstep {

/// A block of memory. Owned blocks are freed with the storage; borrowed ones (arena slices,
/// user buffers) are not.
struct Storage {
  void* data = nullptr;  ///< the first byte
  size_t bytes = 0;      ///< the size
  bool owned = false;    ///< freed by ~Storage
  Device device;         ///< where the bytes are
  ~Storage();
};

/// An n-dimensional array: a shape, a dtype and strides over shared, reference-counted storage
/// (copies of a Tensor share the data; clone() copies it). Images are NHWC, labels i32 [N].
class Tensor {
 public:
  Tensor() = default;  ///< undefined: no storage (defined() is false)
  /// New zero-initialised contiguous tensor.
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32);
  /// New contiguous tensor, contents unspecified.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32);
  /// New float32 tensor with every element `value`.
  static Tensor full(const Shape& shape, float value);
  /// New float32 tensor holding `values` in row-major order (their count must be the numel).
  static Tensor from_vector(const Shape& shape, const std::vector<float>& values);
  /// New int32 tensor holding `values` in row-major order (labels).
  static Tensor from_vector_i32(const Shape& shape, const std::vector<int32_t>& values);
  /// A non-owning view of memory someone else keeps alive.
  static Tensor borrow(void* data, const Shape& shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }  ///< has storage
  const Shape& shape() const { return shape_; }         ///< the dimensions
  const Shape& strides() const { return strides_; }     ///< per dimension, in elements
  DType dtype() const { return dtype_; }                ///< the element type
  /// Where the data lives (cpu:0 for an undefined tensor).
  Device device() const { return storage_ ? storage_->device : Device{}; }
  int rank() const { return shape_.rank(); }        ///< the number of dimensions
  int64_t dim(int i) const { return shape_[i]; }    ///< dimension i (negative: from the end)
  int64_t numel() const { return shape_.numel(); }  ///< the number of elements
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }  ///< numel * element size
  bool is_contiguous() const;  ///< row-major with no gaps (a strided view may not be)

  /// The first element's address, untyped.
  void* raw() const { return static_cast<char*>(storage_->data) + offset_; }
  /// The first element's address as T (float, int32_t, bf16, ...); throws unless T is the dtype.
  template <typename T>
  T* data() const {
    LS_CHECK(dtype_ == dtype_of<T>(), "tensor has dtype ", dtype_name(dtype_),
             ", accessed as another type");
    return static_cast<T*>(raw());
  }

  /// Views sharing storage.
  Tensor reshape(const Shape& shape) const;        ///< contiguous only; one -1 allowed
  Tensor slice(int64_t begin, int64_t end) const;  ///< along dim 0
  Tensor transpose(int a, int b) const;            ///< strided view
  Tensor contiguous() const;                       ///< copy if not contiguous
  Tensor clone() const;                            ///< a contiguous copy with its own storage
  void copy_from(const Tensor& src);               ///< same shape and dtype; contiguous src and dst
  void fill(float v);  ///< sets every element to v (converted to the dtype)

  std::vector<float> to_vector() const;  ///< f32 (or i32/u8/i64 converted) in row-major order
  float item() const;                    ///< the only element of a one-element tensor, as float

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  ///< bytes
  Shape shape_, strides_;
  DType dtype_ = DType::f32;
};

}  // namespace lockstep
