// Where fit/evaluate get their batches from: arrays (shuffled per epoch with a counter-based
// stream) or a Dataset of batched {x, y} elements. One interface, so the step loop (and its
// split across replicas) is written once.
#pragma once
#include <map>
#include <optional>

#include "lockstep/data/dataset.h"
#include "lockstep/trainers/model.h"

namespace lockstep {

class Program;

// Checks the inputs and targets against the model (fn names the caller in errors): xs one per
// model input (checked), ys (when given) one per model output; returns the targets as each output's
// loss wants them. what_x / what_y name the arguments in errors.
std::vector<Tensor> check_model_arrays(const Model& m, const std::vector<Tensor>& xs,
                                       const std::vector<Tensor>* ys, const char* fn,
                                       const char* what_x = "x", const char* what_y = "y");

// Sample weights as the step takes them: f32 [N] (accepts [N] or [N, 1] of any float or int
// dtype); n is the sample count they must match; fn names the caller (and `what` the argument)
// in errors.
Tensor check_sample_weight(const Tensor& w, int64_t n, const char* fn,
                           const char* what = "sample_weight");

// fit / train_on_batch's per-sample training weights: sample_weight (checked), or class_weight
// applied to the labels y (not both, as in Keras), or none (undefined). fn names the caller.
Tensor training_weights(const Tensor& x, const Tensor& y, const Tensor& sample_weight,
                        const std::map<int, double>& class_weight, const char* fn);

// Keras's dict structure: the arrays of `dict` (keyed by input name, or by output name when
// `outputs`) in the model's input (output) order; an unknown key or a missing name is an error
// naming it and the model's names. fn and what ("x", "y") name the caller and argument.
std::vector<Tensor> arrays_by_name(const Model& m, const TensorDict& dict, bool outputs,
                                   const char* fn, const char* what);

// Per-output sample weights (FitConfig::output_sample_weights / sample_weight_by_output, one of
// them) as the step takes them: f32 [n] for a single-output model, else [n, outputs] (an output
// without weights weighs 1); undefined when both are empty. fn names the caller in errors.
Tensor output_sample_weights(const Model& m, const std::vector<Tensor>& list,
                             const std::map<std::string, Tensor>& dict, int64_t n, const char* fn);

// Keras's class_weight_to_sample_weights: each sample weighs class_weight[its class] (1 when
// the class is not listed); the class is the label ([N] or [N, 1], rounded) or the argmax of
// a one-hot row [N, C].
Tensor class_weight_to_sample_weights(const Tensor& y, const std::map<int, double>& class_weight);

// Sample weights [N] or [N, O]: their columns (0: undefined).
inline int weight_columns(const Tensor& w) {
  return !w.defined() ? 0 : w.rank() == 2 ? int(w.dim(1)) : 1;
}

struct Model::Source {
  virtual ~Source() = default;
  // Starts epoch `epoch` (reshuffle / fresh iterator).
  virtual void begin_epoch(int epoch) = 0;
  // Advances to the next batch; false at the end of the epoch's data.
  virtual bool next() = 0;
  virtual int64_t size() const = 0;  // samples in the current batch
  // Copies rows [r0, r1) of the current batch into xs (one per model input), ys (one per
  // output, or none) and sample_weight (when not null).
  virtual void copy_rows(int64_t r0, int64_t r1, const std::vector<Tensor*>& xs,
                         const std::vector<Tensor*>& ys, Tensor* sample_weight) = 0;
  // Copies rows [r0, r1) into a program's inputs: the model inputs, and (train / eval programs)
  // the targets and the sample weights when it takes them.
  void copy(int64_t r0, int64_t r1, Program& program);
  // The same into staging slot `slot` of the program (CompileConfig::steps_per_execution > 1),
  // which it makes when the program has fewer.
  void copy_to_slot(int64_t r0, int64_t r1, Program& program, int slot);
  // The current batch's sample weights: 0 none, 1 one per sample, O (a model of O outputs): one
  // per sample and output (Model::program's `weighted`).
  virtual int weighted() const = 0;
  // Steps per epoch when known, else -1.
  virtual int64_t steps() const = 0;

 private:
  std::vector<Tensor*> slot_xs_, slot_ys_;  // copy_to_slot's scratch
};

// Arrays: batches of `batch` rows, in a permutation redrawn every epoch when shuffling (the
// permutation of epoch e depends only on (seed, first_epoch..e), so a resumed fit replays it).
class TensorSource : public Model::Source {
 public:
  // xs: one array per model input; ys: one per output (or none, to predict). sample_weight:
  // f32 [N] (check_sample_weight), or undefined for none.
  TensorSource(std::vector<Tensor> xs, std::vector<Tensor> ys, int64_t batch, bool shuffle,
               uint64_t seed, int first_epoch, Tensor sample_weight = {});
  void begin_epoch(int epoch) override;
  bool next() override;
  int64_t size() const override { return b1_ - b0_; }
  void copy_rows(int64_t r0, int64_t r1, const std::vector<Tensor*>& xs,
                 const std::vector<Tensor*>& ys, Tensor* sample_weight) override;
  int weighted() const override { return weight_columns(sample_weight_); }
  int64_t steps() const override { return (rows_ + batch_ - 1) / batch_; }

 private:
  std::vector<Tensor> xs_, ys_;
  Tensor sample_weight_;
  int64_t rows_;
  int64_t batch_;
  bool shuffle_;
  uint64_t seed_;
  int first_epoch_, shuffled_through_ = -1;
  std::vector<int64_t> perm_;
  int64_t b0_ = 0, b1_ = 0, next_ = 0;
};

// A Dataset of batched {x, y[, sample_weight]} (or {x}) elements; for a model of I inputs and
// O outputs {x_1..x_I, y_1..y_O[, sample_weight]} (or {x_1..x_I}). continue_across_epochs: one
// iterator runs on across epochs (steps_per_epoch given) and restarts only when it runs out.
// class_weight (fit): each batch's weights come from its labels (elements must not carry
// weights then, as in Keras).
class DatasetSource : public Model::Source {
 public:
  DatasetSource(const Model& model, data::Dataset ds, bool with_labels, bool continue_across_epochs,
                const char* fn, std::map<int, double> class_weight = {});
  void begin_epoch(int epoch) override;
  bool next() override;
  int64_t size() const override { return xs_.at(0).dim(0); }
  void copy_rows(int64_t r0, int64_t r1, const std::vector<Tensor*>& xs,
                 const std::vector<Tensor*>& ys, Tensor* sample_weight) override;
  int weighted() const override { return weight_columns(sample_weight_); }
  int64_t steps() const override;
  // Skips `count` batches (resuming inside an epoch).
  void skip(int64_t count);

 private:
  const Model& model_;
  data::Dataset ds_;
  bool with_labels_, continue_;
  const char* fn_;
  std::optional<data::Iterator> it_;
  int64_t passes_ = 0;  // iterators made (continuing mode)
  bool exhausted_ = false;
  std::map<int, double> class_weight_;
  std::vector<Tensor> xs_, ys_;
  Tensor sample_weight_;
};

}  // namespace lockstep
