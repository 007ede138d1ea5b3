// Batch sources of fit/evaluate: arrays and Datasets.
#include "trainers/fit_source.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "lockstep/core/rng.h"
#include "lockstep/core/strings.h"
#include "trainers/program.h"

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

void copy_batch_rows(const Tensor& src, int64_t r0, int64_t r1, Tensor& dst) {
  size_t row = src.nbytes() / size_t(src.dim(0));
  LS_CHECK(dst.nbytes() == row * size_t(r1 - r0), "fit: batch rows do not fit the step's input ",
           dst.shape().str());
  std::memcpy(dst.raw(), static_cast<const char*>(src.raw()) + size_t(r0) * row, dst.nbytes());
}

}  // namespace

namespace {

std::string listed_names(const std::vector<KTensor>& tensors) {
  std::string out;
  for (size_t i = 0; i < tensors.size(); ++i)
    out += (i ? ", " : "") + (tensors[i].call && tensors[i].call->layer
                                  ? tensors[i].call->layer->name()
                                  : std::to_string(i));
  return out;
}

// One input array against model input i; what names it in errors ("x", or "x[1]").
void check_input(const Model& m, size_t i, const Tensor& x, const char* fn,
                 const std::string& what) {
  LS_CHECK(x.defined() && x.rank() >= 1, fn, ": ", what, " is empty");
  const Shape& want = m.inputs()[i].shape();
  bool ok = x.rank() == want.rank();
  for (int d = 1; ok && d < want.rank(); ++d) ok = want[d] < 0 || want[d] == x.dim(d);
  LS_CHECK(ok, fn, ": ", what, " has shape ", x.shape().str(), " but model '", m.name(), "' input",
           m.inputs().size() > 1 ? " '" + listed_names({m.inputs()[i]}) + "'" : std::string(),
           " expects ", want.str(), " (batch first; e.g. add a channel axis for images)");
  LS_CHECK(x.dtype() == m.inputs()[i].dtype(), fn, ": ", what, " has dtype ", dtype_name(x.dtype()),
           ", model input expects ", dtype_name(m.inputs()[i].dtype()));
  LS_CHECK(x.is_contiguous(), fn, ": ", what, " must be contiguous");
}

// One target array against model output o's loss; returns it as the loss wants it.
Tensor check_target(const Model& m, size_t o, const Tensor& y, int64_t rows, const char* fn,
                    const std::string& what, const std::string& x_what) {
  LS_CHECK(y.defined() && y.rank() >= 1 && y.dim(0) == rows, fn, ": ", what, " has ",
           y.defined() && y.rank() ? y.dim(0) : 0, " samples but ", x_what, " has ", rows);
  const LossPtr loss = o < m.output_losses().size() ? m.output_losses()[o] : nullptr;
  LS_CHECK(loss, fn, ": model '", m.name(), "' was compiled without a loss");
  const Shape& out = m.outputs()[o].shape();
  if (loss->label_dtype() == DType::i32) {
    // One label per sample (N,), or, for a sequence output (N, T, C), one per step (N, T) as
    // Keras takes them (a language model's next-token targets).
    const bool per_step = out.rank() > 2;
    bool steps_match = per_step && y.rank() == out.rank() - 1;
    for (int d = 1; steps_match && d < y.rank(); ++d)
      steps_match = out[d] < 0 || out[d] == y.dim(d);
    Tensor yi = y.dtype() == DType::i32 ? y
                : per_step              ? Tensor::empty(y.shape(), DType::i32)
                                        : Tensor::empty(Shape{y.dim(0)}, DType::i32);
    if (per_step) {
      Shape want = out;
      want[0] = -1;
      LS_CHECK(steps_match, fn, ": ", loss->name(), " on the sequence output ", out.str(),
               " expects integer labels of shape ",
               Shape(std::vector<int64_t>(want.begin(), want.end() - 1)).str(),
               " (one per step), got ", y.shape().str(),
               m.outputs().size() > 1 ? " for " + what : std::string());
    } else {
      LS_CHECK(y.numel() == y.dim(0), fn, ": ", loss->name(),
               " expects integer class labels of shape (N,), got ", y.shape().str(),
               m.outputs().size() > 1 ? " for " + what : std::string(),
               " (use CategoricalCrossentropy for one-hot labels)");
    }
    std::vector<float> v = y.to_vector();
    int64_t classes = out[out.rank() - 1];
    const std::string of = m.outputs().size() > 1 ? " of " + what : std::string();
    for (int64_t i = 0; i < int64_t(v.size()); ++i) {
      LS_CHECK(
          v[size_t(i)] == std::floor(v[size_t(i)]) && v[size_t(i)] >= 0 && v[size_t(i)] < classes,
          fn, ": label ", v[size_t(i)], " at index ", i, of, " is out of range for ", classes,
          " classes (expected 0..", classes - 1, ")");
      if (y.dtype() != DType::i32) yi.data<int32_t>()[i] = int32_t(v[size_t(i)]);
    }
    return yi.contiguous();
  }
  LS_CHECK(y.dtype() == DType::f32, fn, ": ", loss->name(), " expects float32 targets",
           m.outputs().size() > 1 ? " (" + what + ")" : std::string());
  return y.contiguous();
}

}  // namespace

std::vector<Tensor> check_model_arrays(const Model& m, const std::vector<Tensor>& xs,
                                       const std::vector<Tensor>* ys, const char* fn,
                                       const char* what_x, const char* what_y) {
  const size_t inputs = m.inputs().size(), outputs = m.outputs().size();
  LS_CHECK(xs.size() == inputs, fn, ": ", what_x, " has ", xs.size(), " array",
           xs.size() == 1 ? "" : "s", " but model '", m.name(), "' has ", inputs, " input",
           inputs == 1 ? "" : "s", " (", listed_names(m.inputs()),
           "); pass one array per input, in the model's input order");
  auto name = [](const char* what, size_t i, size_t count) {
    return count == 1 ? std::string(what) : std::string(what) + "[" + std::to_string(i) + "]";
  };
  for (size_t i = 0; i < inputs; ++i) check_input(m, i, xs[i], fn, name(what_x, i, inputs));
  for (size_t i = 1; i < inputs; ++i)
    LS_CHECK(xs[i].dim(0) == xs[0].dim(0), fn, ": ", name(what_x, i, inputs), " has ", xs[i].dim(0),
             " samples but ", name(what_x, 0, inputs), " has ", xs[0].dim(0));
  if (!ys) return {};
  LS_CHECK(ys->size() == outputs, fn, ": ", what_y, " has ", ys->size(), " array",
           ys->size() == 1 ? "" : "s", " but model '", m.name(), "' has ", outputs, " output",
           outputs == 1 ? "" : "s", " (", listed_names(m.outputs()),
           "); pass one target array per output, in the model's output order");
  std::vector<Tensor> out;
  for (size_t o = 0; o < outputs; ++o)
    out.push_back(check_target(m, o, (*ys)[o], xs[0].dim(0), fn, name(what_y, o, outputs),
                               name(what_x, 0, inputs)));
  return out;
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

std::vector<Tensor> arrays_by_name(const Model& m, const TensorDict& dict, bool outputs,
                                   const char* fn, const char* what) {
  const std::vector<std::string> names = outputs ? m.output_names() : m.input_names();
  const char* kind = outputs ? "output" : "input";
  const std::string listed = join(names);
  for (auto& [key, value] : dict.tensors)
    LS_CHECK(std::find(names.begin(), names.end(), key) != names.end(), fn, ": ", what,
             " has key '", key, "', which is not an ", kind, " of model '", m.name(), "' (", kind,
             "s: ", listed, ")");
  std::vector<Tensor> arrays;
  for (auto& name : names) {
    auto it = dict.tensors.find(name);
    LS_CHECK(it != dict.tensors.end(), fn, ": ", what, " has no array for ", kind, " '", name,
             "' of model '", m.name(), "' (", kind, "s: ", listed, ")");
    arrays.push_back(it->second);
  }
  return arrays;
}

Tensor output_sample_weights(const Model& m, const std::vector<Tensor>& list,
                             const std::map<std::string, Tensor>& dict, int64_t n, const char* fn) {
  if (list.empty() && dict.empty()) return {};
  LS_CHECK(list.empty() || dict.empty(), fn,
           ": pass output_sample_weights (a list) or sample_weight_by_output (keyed by output "
           "name), not both");
  const std::vector<std::string> names = m.output_names();
  const size_t outputs = names.size();
  std::vector<Tensor> per_output = list;
  if (!dict.empty()) {
    const std::string listed = join(names);
    for (auto& [key, value] : dict)
      LS_CHECK(std::find(names.begin(), names.end(), key) != names.end(), fn,
               ": sample_weight_by_output has key '", key, "', which is not an output of model '",
               m.name(), "' (outputs: ", listed, ")");
    for (auto& name : names) per_output.push_back(dict.count(name) ? dict.at(name) : Tensor());
  }
  LS_CHECK(per_output.size() == outputs, fn, ": output_sample_weights has ", per_output.size(),
           " entries but model '", m.name(), "' has ", outputs, " output", outputs == 1 ? "" : "s",
           "; pass one per output, in the model's output order");
  const int64_t columns = int64_t(outputs);
  Tensor out = Tensor::empty(outputs == 1 ? Shape{n} : Shape{n, columns}, DType::f32);
  float* dst = out.data<float>();
  for (size_t o = 0; o < outputs; ++o) {
    const std::string what = "the sample weights of output '" + names[o] + "'";
    Tensor w = per_output[o].defined() ? check_sample_weight(per_output[o], n, fn, what.c_str())
                                       : Tensor();
    for (int64_t i = 0; i < n; ++i)
      dst[i * columns + int64_t(o)] = w.defined() ? w.data<float>()[i] : 1.f;
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

TensorSource::TensorSource(std::vector<Tensor> xs, std::vector<Tensor> ys, int64_t batch,
                           bool shuffle, uint64_t seed, int first_epoch, Tensor sample_weight)
    : xs_(std::move(xs)),
      ys_(std::move(ys)),
      sample_weight_(std::move(sample_weight)),
      rows_(xs_.at(0).dim(0)),
      batch_(batch),
      shuffle_(shuffle),
      seed_(seed),
      first_epoch_(first_epoch) {
  perm_.resize(size_t(rows_));
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
    const int64_t n = rows_;
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
  const int64_t n = rows_;
  if (next_ >= n) return false;
  b0_ = next_;
  b1_ = std::min(n, b0_ + batch_);
  next_ = b1_;
  return true;
}

void TensorSource::copy_rows(int64_t r0, int64_t r1, const std::vector<Tensor*>& xs,
                             const std::vector<Tensor*>& ys, Tensor* sample_weight) {
  for (size_t i = 0; i < xs.size(); ++i) gather_rows(xs_.at(i), perm_, b0_ + r0, b0_ + r1, *xs[i]);
  for (size_t i = 0; i < ys.size(); ++i) gather_rows(ys_.at(i), perm_, b0_ + r0, b0_ + r1, *ys[i]);
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
  const size_t inputs = model_.inputs().size(), outputs = model_.outputs().size();
  const bool one = inputs == 1 && outputs == 1;
  const size_t want = inputs + (with_labels_ ? outputs : 0);
  LS_CHECK(e->size() >= want, fn_, ": dataset elements must be batched ",
           one ? std::string(with_labels_ ? "{x, y} tensors" : "{x, y} tensors (or {x})")
               : "{x_1..x_" + std::to_string(inputs) +
                     (with_labels_ ? ", y_1..y_" + std::to_string(outputs) : std::string()) +
                     "} tensors (model '" + model_.name() + "' has " + std::to_string(inputs) +
                     " inputs and " + std::to_string(outputs) + " outputs)",
           ", got ", e->str());
  if (one)
    LS_CHECK(e->is_tensor(0), fn_, ": dataset elements must be batched {x, y} tensors",
             with_labels_ ? "" : " (or {x})", ", got ", e->str());
  std::vector<Tensor> xs, ys;
  for (size_t i = 0; i < inputs; ++i) {
    LS_CHECK(e->is_tensor(i), fn_, ": component ", i, " (an input) must be a tensor, got ",
             e->str());
    xs.push_back(e->tensor(i).contiguous());
  }
  sample_weight_ = Tensor();
  if (with_labels_) {
    for (size_t o = 0; o < outputs; ++o) {
      LS_CHECK(e->is_tensor(inputs + o), fn_, ": the label component", one ? "" : "s",
               " must be a tensor, got ", e->str());
      ys.push_back(e->tensor(inputs + o));
    }
    ys_ = check_model_arrays(model_, xs, &ys, fn_);
    const size_t w = inputs + outputs;
    if (e->size() > w) {
      LS_CHECK(class_weight_.empty(), fn_,
               ": You cannot `class_weight` and `sample_weight` at the same time (the dataset's "
               "elements carry sample weights; drop class_weight or the third component)");
      if (outputs > 1 && e->size() == w + outputs) {  // {.., w_1..w_O}: per-output weights
        std::vector<Tensor> per_output;
        for (size_t o = 0; o < outputs; ++o) {
          LS_CHECK(e->is_tensor(w + o), fn_, ": sample-weight component ", w + o,
                   " must be a tensor, got ", e->str());
          per_output.push_back(e->tensor(w + o));
        }
        sample_weight_ = output_sample_weights(model_, per_output, {}, xs[0].dim(0), fn_);
      } else {
        LS_CHECK(e->is_tensor(w), fn_, ": the sample-weight component must be a tensor, got ",
                 e->str());
        const Tensor& weights = e->tensor(w);
        if (outputs > 1 && weights.rank() == 2 && weights.dim(1) == int64_t(outputs)) {
          // [batch, outputs]: each output's weights (fit's validation split of them)
          const std::vector<float> values = weights.to_vector();
          const int64_t n = weights.dim(0);
          std::vector<Tensor> per_output;
          for (size_t o = 0; o < outputs; ++o) {
            std::vector<float> column(static_cast<size_t>(n));
            for (int64_t i = 0; i < n; ++i) column[size_t(i)] = values[size_t(i) * outputs + o];
            per_output.push_back(Tensor::from_vector(Shape{n}, column));
          }
          sample_weight_ = output_sample_weights(model_, per_output, {}, xs[0].dim(0), fn_);
        } else {
          sample_weight_ = check_sample_weight(weights, xs[0].dim(0), fn_, "the sample weights");
        }
      }
    } else if (!class_weight_.empty()) {
      LS_CHECK(outputs == 1, fn_,
               ": class_weight is only supported for models with a single output (model '",
               model_.name(), "' has ", outputs, "); pass sample weights");
      sample_weight_ = class_weight_to_sample_weights(e->tensor(inputs), class_weight_);
    }
  } else {
    check_model_arrays(model_, xs, nullptr, fn_);
  }
  xs_ = std::move(xs);
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

void DatasetSource::copy_rows(int64_t r0, int64_t r1, const std::vector<Tensor*>& xs,
                              const std::vector<Tensor*>& ys, Tensor* sample_weight) {
  for (size_t i = 0; i < xs.size(); ++i) copy_batch_rows(xs_.at(i), r0, r1, *xs[i]);
  for (size_t i = 0; i < ys.size(); ++i) copy_batch_rows(ys_.at(i), r0, r1, *ys[i]);
  if (sample_weight) copy_batch_rows(sample_weight_, r0, r1, *sample_weight);
}

void Model::Source::copy(int64_t r0, int64_t r1, Program& program) {
  std::vector<Tensor*> xs, ys;
  for (int i = 0; i < program.inputs(); ++i) xs.push_back(&program.x(i));
  for (int i = 0; i < program.targets(); ++i) ys.push_back(&program.y(i));
  copy_rows(r0, r1, xs, ys, program.sample_weight());
}

void Model::Source::copy_to_slot(int64_t r0, int64_t r1, Program& program, int slot) {
  program.stage(slot + 1);
  slot_xs_.clear(), slot_ys_.clear();
  for (int i = 0; i < program.inputs(); ++i) slot_xs_.push_back(&program.staged_x(slot, i));
  for (int i = 0; i < program.targets(); ++i) slot_ys_.push_back(&program.staged_y(slot, i));
  copy_rows(r0, r1, slot_xs_, slot_ys_, program.staged_sample_weight(slot));
}

int64_t DatasetSource::steps() const {
  if (continue_) return -1;
  int64_t c = ds_.cardinality();
  return c >= 0 ? c : -1;
}

}  // namespace lockstep
