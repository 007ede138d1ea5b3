// Model: a graph of layer calls from inputs to outputs (functional API), or a Sequential
// list. compile() records the training configuration; fit/evaluate/predict compile one
// static program per (kind, batch size) and run it.
#pragma once
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <variant>
#include <vector>

#include "lockstep/nn/layer.h"
#include "lockstep/train/callback.h"
#include "lockstep/train/loss.h"
#include "lockstep/train/metric.h"
#include "lockstep/train/optimizer.h"

namespace lockstep {

struct CompileConfig {
  OptimizerPtr optimizer;
  LossPtr loss;
  std::vector<std::string> metrics;  // Keras strings: "accuracy", "top_k" ...
  std::vector<MetricPtr> metric_objects;
  int steps_per_execution = 1;
  bool run_eagerly = false;
  std::string backend = "cpu";
  bool verbose_compile = false;  // print the compiler's report (fusions, memory)
};

struct FitConfig {
  int batch_size = 32;
  int epochs = 1;
  int verbose = 1;  // 0 silent, 1 progress bar, 2 one line per epoch
  std::vector<CallbackPtr> callbacks;
  double validation_split = 0.0;
  std::pair<Tensor, Tensor> validation_data;
  bool shuffle = true;
  int initial_epoch = 0;
  int64_t steps_per_epoch = 0;  // 0 = whole dataset
  uint64_t seed = 0;            // shuffle seed
};

struct EvaluateConfig {
  int batch_size = 32;
  int verbose = 1;
};

class Program;  // a compiled train/eval/predict step (src/train/program.h)

class Model {
 public:
  Model() = default;
  Model(std::vector<KTensor> inputs, std::vector<KTensor> outputs, std::string name = "");
  Model(KTensor input, KTensor output, std::string name = "")
      : Model(std::vector<KTensor>{input}, std::vector<KTensor>{output}, std::move(name)) {}
  ~Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  void compile(CompileConfig config);
  History fit(const Tensor& x, const Tensor& y, FitConfig config = {});
  Logs evaluate(const Tensor& x, const Tensor& y, EvaluateConfig config = {});
  Tensor predict(const Tensor& x, int batch_size = 32, int verbose = 0);

  void summary(std::ostream& os) const;
  void summary() const;
  std::string name() const { return name_; }
  const std::vector<LayerPtr>& layers() const { return layers_; }
  LayerPtr get_layer(const std::string& name) const;
  std::vector<VariablePtr> weights() const;  // Keras order: by layer, then weight order
  std::vector<VariablePtr> trainable_weights() const;
  std::vector<Tensor> get_weights() const;
  void set_weights(const std::vector<Tensor>& values);
  int64_t count_params() const;
  json get_config() const;
  bool stop_training = false;

  const CompileConfig& compile_config() const { return config_; }
  const std::vector<KTensor>& inputs() const { return inputs_; }
  const std::vector<KTensor>& outputs() const { return outputs_; }
  // Adds the model's computation to ctx.graph for the given input values (replay).
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& inputs) const;
  // Seconds spent compiling programs so far, and how many were compiled.
  double compile_seconds() const { return compile_seconds_; }
  int programs_compiled() const { return int(programs_.size()); }
  std::vector<MetricPtr> metrics() const;  // loss tracker first

 private:
  Program& program(const std::string& kind, int64_t batch);
  std::string name_;
  std::vector<KTensor> inputs_, outputs_;
  std::vector<std::shared_ptr<LayerCall>> calls_;  // topological order
  std::vector<LayerPtr> layers_;
  CompileConfig config_;
  bool compiled_ = false;
  MetricPtr loss_tracker_;
  std::vector<MetricPtr> metrics_;
  std::map<std::pair<std::string, int64_t>, std::unique_ptr<Program>> programs_;
  double compile_seconds_ = 0;
};

// One entry of a Sequential list: a layer, or an Input (KTensor) as the first item.
struct SequentialItem {
  SequentialItem(LayerHandle l) : layer(l.ptr()) {}  // NOLINT
  SequentialItem(LayerPtr l) : layer(std::move(l)) {}  // NOLINT
  SequentialItem(KTensor t) : input(std::move(t)), is_input(true) {}  // NOLINT
  LayerPtr layer;
  KTensor input;
  bool is_input = false;
};
// keras.Sequential: the first item must be an Input (so shapes are known when built).
Model Sequential(std::vector<SequentialItem> items, std::string name = "sequential");

}  // namespace lockstep
