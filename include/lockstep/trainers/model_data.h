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

/// Keras's dict structure for data: one array per model input (or output), keyed by its name
/// (Model::input_names() / output_names()); a key that is no input (output), or an input
/// (output) without a key, is an error.
struct TensorDict {
  TensorDict() = default;  ///< No arrays.
  /// TensorDict{{"image", x_img}, {"meta", x_meta}}.
  TensorDict(std::initializer_list<std::pair<const std::string, Tensor>> items) : tensors(items) {}
  /// The same from a map.
  TensorDict(std::map<std::string, Tensor> items) : tensors(std::move(items)) {}  // NOLINT
  std::map<std::string, Tensor> tensors;  ///< name -> array (all with the same number of rows)
};

/// x or y of a Model call, in one of Keras's forms (see the file comment); empty by default
/// (y of a Dataset, whose elements carry the targets).
class ModelData {
 public:
  /// Which of Keras's forms this is.
  enum class Kind {
    none,                ///< not given
    array,               ///< one Tensor: a single-input (-output) model's
    list,                ///< one Tensor per input (output), in the model's order
    dict,                ///< keyed by input (output) name
    dataset,             ///< batched elements {x_1..x_I, y_1..y_O[, weights]}
    distributed_dataset  ///< a DistributedDataset (Strategy::distribute_dataset)
  };
  ModelData() = default;                  ///< Kind::none: not given (y when x is a Dataset).
  ModelData(Tensor array);                ///< NOLINT
  ModelData(std::vector<Tensor> arrays);  ///< NOLINT
  ModelData(std::initializer_list<Tensor> arrays);                              ///< NOLINT
  ModelData(TensorDict dict);                                                   ///< NOLINT
  ModelData(std::map<std::string, Tensor> dict);                                ///< NOLINT
  ModelData(std::initializer_list<std::pair<const std::string, Tensor>> dict);  ///< NOLINT
  ModelData(data::Dataset dataset);                                             ///< NOLINT
  ModelData(const distribute::DistributedDataset& dataset);                     ///< NOLINT

  Kind kind() const { return kind_; }                 ///< The form it was made from.
  bool empty() const { return kind_ == Kind::none; }  ///< Not given.
  /// A Dataset or a DistributedDataset (dataset() holds it).
  bool is_dataset() const { return kind_ == Kind::dataset || kind_ == Kind::distributed_dataset; }
  /// array / list: the arrays (one for array).
  const std::vector<Tensor>& arrays() const { return arrays_; }
  const TensorDict& dict() const { return dict_; }  ///< dict: the arrays by name.
  /// dataset / distributed_dataset: the Dataset (a DistributedDataset's local one).
  const data::Dataset& dataset() const { return dataset_; }
  /// The form in words, for errors: "one array", "a list of 2 arrays", "a Dataset", ...
  std::string describe() const;

 private:
  Kind kind_ = Kind::none;
  std::vector<Tensor> arrays_;
  TensorDict dict_;
  data::Dataset dataset_;
};

/// predict's result: every model output's predictions (outputs(), in the model's output
/// order). A single-output model's Prediction is that output's Tensor; several outputs convert
/// to a std::vector<Tensor> or to a map keyed by output name (Keras's list and dict), and as a
/// Tensor they are undefined.
class Prediction : public Tensor {
 public:
  Prediction() = default;  ///< No outputs.
  /// The outputs, in order, with their names (Model::output_names()); one output also becomes
  /// the Tensor itself.
  Prediction(std::vector<Tensor> outputs, std::vector<std::string> output_names);
  /// Every output's predictions, [N, ...] each, in the model's output order.
  const std::vector<Tensor>& outputs() const { return outputs_; }
  /// The outputs' names (the layers computing them), as outputs().
  const std::vector<std::string>& output_names() const { return names_; }
  size_t size() const { return outputs_.size(); }  ///< Number of outputs.
  /// Output `output`'s predictions; an error (std::out_of_range) past size().
  const Tensor& operator[](size_t output) const { return outputs_.at(output); }
  /// Keras's list form: outputs().
  operator std::vector<Tensor>() const { return outputs_; }  // NOLINT
  /// Keras's dict form: output name -> predictions.
  operator std::map<std::string, Tensor>() const;  // NOLINT

 private:
  std::vector<Tensor> outputs_;
  std::vector<std::string> names_;
};

/// fit's validation data: arrays (x, y[, sample_weight]) or a Dataset of batched {x, y[, w]}
/// elements (a multi-input / multi-output model: {x_1..x_I, y_1..y_O[, w]} elements, see
/// Model), or, for a multi-input / multi-output model, arrays xs and ys (ValidationData::arrays).
struct ValidationData {
  ValidationData() = default;  ///< None (defined() is false).
  /// Keras's (x_val, y_val[, val_sample_weight]) for a single-input, single-output model.
  ValidationData(Tensor x_, Tensor y_, Tensor sample_weight_ = {})
      : x(std::move(x_)), y(std::move(y_)), sample_weight(std::move(sample_weight_)) {}
  /// {x_val, y_val} as a pair.
  ValidationData(std::pair<Tensor, Tensor> xy)
      : x(std::move(xy.first)), y(std::move(xy.second)) {}  // NOLINT
  /// A Dataset of batched validation elements (as fit's).
  ValidationData(data::Dataset ds) : dataset(std::move(ds)) {}  // NOLINT
  /// One array per model input and one per model output.
  static ValidationData arrays(std::vector<Tensor> xs, std::vector<Tensor> ys,
                               Tensor sample_weight = {}) {
    ValidationData v;
    v.xs = std::move(xs), v.ys = std::move(ys), v.sample_weight = std::move(sample_weight);
    return v;
  }
  /// Keras's dict structure: x keyed by input name, y (and the optional per-output sample
  /// weights; an output left out weighs 1) by output name.
  static ValidationData dicts(TensorDict x, TensorDict y, TensorDict sample_weights = {}) {
    ValidationData v;
    v.x_dict = std::move(x), v.y_dict = std::move(y), v.weight_dict = std::move(sample_weights);
    return v;
  }
  /// The (x, y[, sample_weight]) form: x [N, ...], y [N, ...], optional row weights [N].
  /// @{
  Tensor x, y, sample_weight;
  /// @}
  /// The arrays() form: one array per model input (xs) and per model output (ys).
  /// @{
  std::vector<Tensor> xs, ys;
  /// @}
  /// The dicts() form: arrays keyed by input name (x_dict) and output name (y_dict,
  /// weight_dict).
  /// @{
  TensorDict x_dict, y_dict, weight_dict;
  /// @}
  data::Dataset dataset;  ///< the Dataset form (invalid when not used)
  /// Whether any validation data was given (fit then validates after each epoch).
  bool defined() const {
    return x.defined() || !xs.empty() || !x_dict.tensors.empty() || dataset.valid();
  }
};

}  // namespace lockstep
