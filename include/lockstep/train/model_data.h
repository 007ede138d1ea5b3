// The data Model's fit / evaluate / predict and *_on_batch take, as Keras's x and y: one array,
// a list of arrays (one per model input, or output), a dict of arrays keyed by input (output)
// name, a Dataset of batched elements or a DistributedDataset. ModelData is implicit from each,
// so every form reaches the same code path:
//
//   m.fit(x, y, {.epochs = 2});                            // arrays
//   m.fit({xa, xb}, {y1, y2});                             // a list per input / output
//   m.fit(TensorDict{{"a", xa}, {"b", xb}}, {{"out", y}}); // keyed by input / output name
//   m.fit(dataset, {.epochs = 2});                         // {x, y[, sample_weight]} batches
//   m.fit(strategy.distribute_dataset(dataset));           // already split across workers
//
// predict returns a Prediction: a single-output model's predictions as a Tensor (it is one), or
// every output's, as a list or keyed by output name.
#pragma once
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/core/tensor.h"
#include "lockstep/data/dataset.h"

namespace lockstep {

namespace distribute {
class DistributedDataset;
}  // namespace distribute

// Keras's dict structure for data: one array per model input (or output), keyed by its name
// (Model::input_names() / output_names()); a key that is no input (output), or an input
// (output) without a key, is an error.
struct TensorDict {
  TensorDict() = default;
  TensorDict(std::initializer_list<std::pair<const std::string, Tensor>> items) : tensors(items) {}
  TensorDict(std::map<std::string, Tensor> items) : tensors(std::move(items)) {}  // NOLINT
  std::map<std::string, Tensor> tensors;
};

// x or y of a Model call, in one of Keras's forms (see the file comment); empty by default
// (y of a Dataset, whose elements carry the targets).
class ModelData {
 public:
  enum class Kind {
    none,                // not given
    array,               // one Tensor: a single-input (-output) model's
    list,                // one Tensor per input (output), in the model's order
    dict,                // keyed by input (output) name
    dataset,             // batched elements {x_1..x_I, y_1..y_O[, weights]}
    distributed_dataset  // a DistributedDataset (Strategy::distribute_dataset)
  };
  ModelData() = default;
  ModelData(Tensor array);                                                      // NOLINT
  ModelData(std::vector<Tensor> arrays);                                        // NOLINT
  ModelData(std::initializer_list<Tensor> arrays);                              // NOLINT
  ModelData(TensorDict dict);                                                   // NOLINT
  ModelData(std::map<std::string, Tensor> dict);                                // NOLINT
  ModelData(std::initializer_list<std::pair<const std::string, Tensor>> dict);  // NOLINT
  ModelData(data::Dataset dataset);                                             // NOLINT
  ModelData(const distribute::DistributedDataset& dataset);                     // NOLINT

  Kind kind() const { return kind_; }
  bool empty() const { return kind_ == Kind::none; }
  bool is_dataset() const { return kind_ == Kind::dataset || kind_ == Kind::distributed_dataset; }
  // array / list: the arrays (one for array).
  const std::vector<Tensor>& arrays() const { return arrays_; }
  const TensorDict& dict() const { return dict_; }
  const data::Dataset& dataset() const { return dataset_; }  // dataset / distributed_dataset
  // The form in words, for errors: "one array", "a list of 2 arrays", "a Dataset", ...
  std::string describe() const;

 private:
  Kind kind_ = Kind::none;
  std::vector<Tensor> arrays_;
  TensorDict dict_;
  data::Dataset dataset_;
};

// predict's result: every model output's predictions (outputs(), in the model's output
// order). A single-output model's Prediction is that output's Tensor; several outputs convert
// to a std::vector<Tensor> or to a map keyed by output name (Keras's list and dict), and as a
// Tensor they are undefined.
class Prediction : public Tensor {
 public:
  Prediction() = default;
  Prediction(std::vector<Tensor> outputs, std::vector<std::string> output_names);
  const std::vector<Tensor>& outputs() const { return outputs_; }
  const std::vector<std::string>& output_names() const { return names_; }
  size_t size() const { return outputs_.size(); }
  const Tensor& operator[](size_t output) const { return outputs_.at(output); }
  operator std::vector<Tensor>() const { return outputs_; }  // NOLINT
  operator std::map<std::string, Tensor>() const;            // NOLINT

 private:
  std::vector<Tensor> outputs_;
  std::vector<std::string> names_;
};

// fit's validation data: arrays (x, y[, sample_weight]) or a Dataset of batched {x, y[, w]}
// elements (a multi-input / multi-output model: {x_1..x_I, y_1..y_O[, w]} elements, see
// Model), or, for a multi-input / multi-output model, arrays xs and ys (ValidationData::arrays).
struct ValidationData {
  ValidationData() = default;
  ValidationData(Tensor x_, Tensor y_, Tensor sample_weight_ = {})
      : x(std::move(x_)), y(std::move(y_)), sample_weight(std::move(sample_weight_)) {}
  ValidationData(std::pair<Tensor, Tensor> xy)
      : x(std::move(xy.first)), y(std::move(xy.second)) {}      // NOLINT
  ValidationData(data::Dataset ds) : dataset(std::move(ds)) {}  // NOLINT
  // One array per model input and one per model output.
  static ValidationData arrays(std::vector<Tensor> xs, std::vector<Tensor> ys,
                               Tensor sample_weight = {}) {
    ValidationData v;
    v.xs = std::move(xs), v.ys = std::move(ys), v.sample_weight = std::move(sample_weight);
    return v;
  }
  // Keras's dict structure: x keyed by input name, y (and the optional per-output sample
  // weights; an output left out weighs 1) by output name.
  static ValidationData dicts(TensorDict x, TensorDict y, TensorDict sample_weights = {}) {
    ValidationData v;
    v.x_dict = std::move(x), v.y_dict = std::move(y), v.weight_dict = std::move(sample_weights);
    return v;
  }
  Tensor x, y, sample_weight;
  std::vector<Tensor> xs, ys;              // arrays(): several inputs / outputs
  TensorDict x_dict, y_dict, weight_dict;  // dicts()
  data::Dataset dataset;
  bool defined() const {
    return x.defined() || !xs.empty() || !x_dict.tensors.empty() || dataset.valid();
  }
};

}  // namespace lockstep
