// Batch sources of fit/evaluate: arrays and Datasets.
#include "train/fit_source.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "lockstep/core/rng.h"

namespace lockstep {

namespace {

// Copies rows idx[begin, end) of src into dst (dst has end-begin rows).
void gather_rows(const Tensor& src, const std::vector<int64_t>& idx, int64_t begin, int64_t end,
                 Tensor& dst) {
  size_t row = src.nbytes() / size_t(src.dim(0));
  const char* s = static_cast<const char*>(src.raw());
  char* d = static_cast<char*>(dst.raw());
  for (int64_t i = begin; i < end; ++i)
    std::memcpy(d + (i - begin) * row, s + idx[size_t(i)] * row, row);
}

void copy_rows(const Tensor& src, int64_t r0, int64_t r1, Tensor& dst) {
  size_t row = src.nbytes() / size_t(src.dim(0));
  LS_CHECK(dst.nbytes() == row * size_t(r1 - r0), "fit: batch rows do not fit the step's input ",
           dst.shape().str());
  std::memcpy(dst.raw(), static_cast<const char*>(src.raw()) + size_t(r0) * row, dst.nbytes());
}

}  // namespace

Tensor check_model_data(const Model& m, const Tensor& x, const Tensor* y, const char* fn) {
  LS_CHECK(x.defined() && x.rank() >= 1, fn, ": x is empty");
  const Shape& want = m.inputs()[0].shape();
  bool ok = x.rank() == want.rank();
  for (int i = 1; ok && i < want.rank(); ++i) ok = want[i] < 0 || want[i] == x.dim(i);
  LS_CHECK(ok, fn, ": x has shape ", x.shape().str(), " but model '", m.name(), "' input expects ",
           want.str(), " (batch first; e.g. add a channel axis for images)");
  LS_CHECK(x.dtype() == m.inputs()[0].dtype(), fn, ": x has dtype ", dtype_name(x.dtype()),
           ", model input expects ", dtype_name(m.inputs()[0].dtype()));
  LS_CHECK(x.is_contiguous(), fn, ": x must be contiguous");
  if (!y) return {};
  LS_CHECK(y->defined() && y->rank() >= 1 && y->dim(0) == x.dim(0), fn, ": y has ",
           y->defined() && y->rank() ? y->dim(0) : 0, " samples but x has ", x.dim(0));
  const auto& loss = m.compile_config().loss;
  LS_CHECK(loss, fn, ": model '", m.name(), "' was compiled without a loss");
  const Shape& out = m.outputs()[0].shape();
  if (loss->label_dtype() == DType::i32) {
    Tensor yi = y->dtype() == DType::i32 ? *y : Tensor::empty(Shape{y->dim(0)}, DType::i32);
    LS_CHECK(y->numel() == y->dim(0), fn, ": ", loss->name(),
             " expects integer class labels of shape (N,), got ", y->shape().str(),
             " (use CategoricalCrossentropy for one-hot labels)");
    std::vector<float> v = y->to_vector();
    int64_t classes = out[out.rank() - 1];
    for (int64_t i = 0; i < int64_t(v.size()); ++i) {
      LS_CHECK(
          v[size_t(i)] == std::floor(v[size_t(i)]) && v[size_t(i)] >= 0 && v[size_t(i)] < classes,
          fn, ": label ", v[size_t(i)], " at index ", i, " is out of range for ", classes,
          " classes (expected 0..", classes - 1, ")");
      if (y->dtype() != DType::i32) yi.data<int32_t>()[i] = int32_t(v[size_t(i)]);
    }
    return yi.contiguous();
  }
  LS_CHECK(y->dtype() == DType::f32, fn, ": ", loss->name(), " expects float32 targets");
  return y->contiguous();
}

Tensor check_sample_weight(const Tensor& w, int64_t n, const char* fn, const char* what) {
  LS_CHECK(w.defined() && (w.rank() == 1 || (w.rank() == 2 && w.dim(1) == 1)), fn, ": ", what,
           " must have shape (N,) or (N, 1), one weight per sample, got ",
           w.defined() ? w.shape().str() : std::string("nothing"));
  LS_CHECK(w.dim(0) == n, fn, ": ", what, " has ", w.dim(0), " weights but there are ", n,
           " samples");
  Tensor out = Tensor::empty(Shape{n}, DType::f32);
  std::vector<float> values = w.to_vector();
  for (int64_t i = 0; i < n; ++i) {
    LS_CHECK(std::isfinite(values[size_t(i)]), fn, ": ", what, " at index ", i, " is ",
             values[size_t(i)], " (weights must be finite)");
    out.data<float>()[i] = values[size_t(i)];
  }
  return out;
}

Tensor class_weight_to_sample_weights(const Tensor& y, const std::map<int, double>& class_weight) {
  LS_CHECK(y.defined() && y.rank() >= 1, "fit: class_weight needs labels");
  const int64_t n = y.dim(0);
  const int64_t width = y.rank() >= 2 ? y.numel() / n : 1;
  std::vector<float> labels = y.to_vector();
  Tensor out = Tensor::empty(Shape{n}, DType::f32);
  for (int64_t i = 0; i < n; ++i) {
    const float* row = labels.data() + i * width;
    const int cls = width > 1 ? int(std::max_element(row, row + width) - row)
                              : int(std::nearbyint(double(row[0])));
    auto it = class_weight.find(cls);
    out.data<float>()[i] = it == class_weight.end() ? 1.f : float(it->second);
  }
  return out;
}

// ----------------------------------------------------------------------------- TensorSource

TensorSource::TensorSource(Tensor x, Tensor y, int64_t batch, bool shuffle, uint64_t seed,
                           int first_epoch, Tensor sample_weight)
    : x_(std::move(x)),
      y_(std::move(y)),
      sample_weight_(std::move(sample_weight)),
      batch_(batch),
      shuffle_(shuffle),
      seed_(seed),
      first_epoch_(first_epoch) {
  perm_.resize(size_t(x_.dim(0)));
  std::iota(perm_.begin(), perm_.end(), 0);
}

void TensorSource::begin_epoch(int epoch) {
  if (shuffle_) {
    // Fisher-Yates with a counter-based stream per epoch, applied cumulatively from the first
    // epoch of the fit call (replayed when starting later, e.g. after a restore).
    if (shuffled_through_ >= epoch) {
      std::iota(perm_.begin(), perm_.end(), 0);
      shuffled_through_ = -1;
    }
    const int64_t n = x_.dim(0);
    for (int e = std::max(first_epoch_, shuffled_through_ + 1); e <= epoch; ++e) {
      Philox rng(seed_ ^ 0x5EED, uint64_t(e));
      for (int64_t i = n - 1; i > 0; --i)
        std::swap(perm_[size_t(i)], perm_[rng.next_u64() % uint64_t(i + 1)]);
    }
    shuffled_through_ = epoch;
  }
  next_ = 0;
  b0_ = b1_ = 0;
}

bool TensorSource::next() {
  const int64_t n = x_.dim(0);
  if (next_ >= n) return false;
  b0_ = next_;
  b1_ = std::min(n, b0_ + batch_);
  next_ = b1_;
  return true;
}

void TensorSource::copy(int64_t r0, int64_t r1, Tensor& x, Tensor* y, Tensor* sample_weight) {
  gather_rows(x_, perm_, b0_ + r0, b0_ + r1, x);
  if (y) gather_rows(y_, perm_, b0_ + r0, b0_ + r1, *y);
  if (sample_weight) gather_rows(sample_weight_, perm_, b0_ + r0, b0_ + r1, *sample_weight);
}

// ----------------------------------------------------------------------------- DatasetSource

DatasetSource::DatasetSource(const Model& model, data::Dataset ds, bool with_labels,
                             bool continue_across_epochs, const char* fn,
                             std::map<int, double> class_weight)
    : model_(model),
      ds_(std::move(ds)),
      with_labels_(with_labels),
      continue_(continue_across_epochs),
      fn_(fn),
      class_weight_(std::move(class_weight)) {
  LS_CHECK(ds_.valid(), fn_, ": the dataset is empty (default-constructed)");
}

void DatasetSource::begin_epoch(int epoch) {
  if (!continue_) {
    it_.reset();
    it_.emplace(ds_.iterator(epoch));
  } else if (!it_ || exhausted_) {
    it_.reset();
    it_.emplace(ds_.iterator(passes_++));
    exhausted_ = false;
  }
}

bool DatasetSource::next() {
  std::optional<data::Element> e = it_->next();
  if (!e && continue_ && !exhausted_) {
    exhausted_ = true;  // the next epoch starts a fresh pass
    return false;
  }
  if (!e) return false;
  LS_CHECK(e->size() >= (with_labels_ ? 2u : 1u) && e->is_tensor(0), fn_,
           ": dataset elements must be batched {x, y} tensors", with_labels_ ? "" : " (or {x})",
           ", got ", e->str());
  const Tensor& x = e->tensor(0);
  sample_weight_ = Tensor();
  if (with_labels_) {
    LS_CHECK(e->is_tensor(1), fn_, ": the label component must be a tensor, got ", e->str());
    y_ = check_model_data(model_, x.contiguous(), &e->tensor(1), fn_);
    if (e->size() >= 3) {
      LS_CHECK(class_weight_.empty(), fn_,
               ": You cannot `class_weight` and `sample_weight` at the same time (the dataset's "
               "elements carry sample weights; drop class_weight or the third component)");
      LS_CHECK(e->is_tensor(2), fn_, ": the sample-weight component must be a tensor, got ",
               e->str());
      sample_weight_ = check_sample_weight(e->tensor(2), x.dim(0), fn_, "the sample weights");
    } else if (!class_weight_.empty()) {
      sample_weight_ = class_weight_to_sample_weights(e->tensor(1), class_weight_);
    }
  } else {
    check_model_data(model_, x.contiguous(), nullptr, fn_);
  }
  x_ = x.contiguous();
  return true;
}

void DatasetSource::skip(int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    if (!it_->next()) {
      if (!continue_) return;
      it_.reset();
      it_.emplace(ds_.iterator(passes_++));
      --i;
    }
  }
}

void DatasetSource::copy(int64_t r0, int64_t r1, Tensor& x, Tensor* y, Tensor* sample_weight) {
  copy_rows(x_, r0, r1, x);
  if (y) copy_rows(y_, r0, r1, *y);
  if (sample_weight) copy_rows(sample_weight_, r0, r1, *sample_weight);
}

int64_t DatasetSource::steps() const {
  if (continue_) return -1;
  int64_t c = ds_.cardinality();
  return c >= 0 ? c : -1;
}

}  // namespace lockstep
