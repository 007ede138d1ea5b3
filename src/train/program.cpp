// Builds and compiles the step graph of a Model.
#include "train/program.h"

#include <cstdio>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "distribute/internal/strategy_runtime.h"
#include "lockstep/graph/autodiff.h"

namespace lockstep {

Program::Kind program_kind(const std::string& name) {
  if (name == "train") return Program::Kind::train;
  if (name == "eval") return Program::Kind::eval;
  return Program::Kind::predict;
}

Replication::Replication(std::shared_ptr<distribute::StrategyImpl> strategy)
    : strategy_(std::move(strategy)),
      reducer_(std::make_unique<distribute::GradientReducer>(*strategy_)) {}

Replication::~Replication() = default;

int Replication::local_replicas() const { return strategy_->local_replicas; }

VariablePtr Replication::variable(const VariablePtr& v, int replica) {
  if (replica == 0) return v;
  auto& list = copies_[v.get()];
  if (list.empty()) {
    for (int r = 1; r < local_replicas(); ++r)
      list.push_back(std::make_shared<Variable>(Variable{v->name, v->value.clone(), v->trainable}));
  }
  return list.at(size_t(replica - 1));
}

void Replication::sync_from_primary() {
  for (auto& [primary, list] : copies_)
    for (auto& c : list) c->value.copy_from(primary->value);
}

void Replication::fold_into_primary(const std::vector<VariablePtr>& accumulators) {
  for (auto& v : accumulators) {
    auto it = copies_.find(v.get());
    if (it == copies_.end()) continue;
    float* dst = v->value.data<float>();
    const int64_t n = v->value.numel();
    for (auto& c : it->second) {
      float* src = c->value.data<float>();
      for (int64_t i = 0; i < n; ++i) dst[i] += src[i], src[i] = 0.f;
    }
  }
}

void Replication::average(const std::vector<VariablePtr>& variables) {
  const double scale = 1.0 / double(strategy_->replicas_in_sync());
  for (auto& v : variables) {
    if (v->value.dtype() != DType::f32) continue;
    const int64_t n = v->value.numel();
    std::vector<double> sum(static_cast<size_t>(n));
    const float* p = v->value.data<float>();
    for (int64_t i = 0; i < n; ++i) sum[size_t(i)] = p[i];
    auto it = copies_.find(v.get());
    if (it != copies_.end())
      for (auto& c : it->second) {
        const float* q = c->value.data<float>();
        for (int64_t i = 0; i < n; ++i) sum[size_t(i)] += q[i];
      }
    strategy_->allreduce_workers(sum.data(), sum.size());
    float* dst = v->value.data<float>();
    for (int64_t i = 0; i < n; ++i) dst[i] = float(sum[size_t(i)] * scale);
    if (it != copies_.end())
      for (auto& c : it->second) c->value.copy_from(v->value);
  }
}

Program::Program(const Model& model, Kind kind, int64_t batch, MetricPtr loss_tracker,
                 const std::vector<MetricPtr>& metrics,
                 const std::vector<MetricPtr>& weighted_metrics, Replication* replication,
                 int replica, bool weighted)
    : kind_(kind), batch_(batch), weighted_(weighted && kind != Kind::predict) {
  const CompileConfig& cfg = model.compile_config();
  LS_CHECK(model.inputs().size() == 1 && model.outputs().size() == 1, "model '", model.name(),
           "': fit/evaluate/predict support one input and one output for now");
  Graph g;
  Shape xs = model.inputs()[0].shape().with_dim(0, batch);
  Value x = g.input({model.inputs()[0].dtype(), xs}, "x");
  CallContext ctx{g, kind == Kind::train, random_seed()};
  if (kind == Kind::train && replication && replication->strategy().replicated()) {
    ctx.replica_group = replication->reducer().group();
    ctx.replica = replica;
  }
  Value pred = model.call(ctx, {x})[0];
  // A mixed-precision model's output is in its compute dtype; the loss, the metrics and
  // predict() take it in f32 (as Keras's losses cast y_pred).
  if (is_float(g.type(pred).dtype) && g.type(pred).dtype != DType::f32)
    pred = g.add("cast", {pred}, Attrs{{"dtype", std::string("float32")}});
  std::vector<Value> inputs{x}, outputs;
  if (kind == Kind::predict) {
    outputs = {pred};
  } else {
    outputs =
        add_loss_and_updates(model, g, pred, inputs, {loss_tracker, metrics, weighted_metrics},
                             ctx.losses, replication, replica);
  }
  if (replication && replica > 0) {  // this replica's copies of every variable
    // ... but the learning rate, which every replica reads from one variable (set_learning_rate
    // then reaches them all; no program writes it).
    const Variable* shared_rate =
        cfg.optimizer ? cfg.optimizer->learning_rate_variable().get() : nullptr;
    for (int i = 0; i < g.size(); ++i) {
      Node& nd = g.node(i);
      if (nd.variable && nd.variable.get() != shared_rate)
        nd.variable = replication->variable(nd.variable, replica);
    }
  }
  CompileOptions opts;
  opts.backend = cfg.backend;
  opts.eager = cfg.run_eagerly;
  opts.seed = random_seed();
  if (replication)
    opts.replica =
        uint32_t(replication->strategy().worker_index * replication->local_replicas() + replica);
  {
    // Kernels plan their parallel decomposition (oneDNN primitives, per-thread scratch) for the
    // OpenMP thread count at creation; a replica thread runs with its own, smaller team, so
    // compile for that count (planning for 2 threads and running on 1 made the first conv's
    // weight gradient 6x slower).
#ifdef _OPENMP
    const int saved = omp_get_max_threads();
    const int team = replication ? replication->strategy().replica_threads : 0;
    if (team > 0) omp_set_num_threads(team);
    struct Restore {
      int n;
      ~Restore() { omp_set_num_threads(n); }
    } restore{saved};
#endif
    exe_ = std::make_unique<Executable>(g, inputs, outputs, opts);
  }
  if (cfg.verbose_compile) {
    std::fprintf(stderr, "[compile] %s program, batch %lld, replica %d: %.3f s\n",
                 kind == Kind::train  ? "train"
                 : kind == Kind::eval ? "eval"
                                      : "predict",
                 (long long)batch, replica, exe_->compile_seconds());
    for (auto& line : exe_->report()) std::fprintf(stderr, "[compile]   %s\n", line.c_str());
  }
}

// The loss — Keras's "sum_over_batch_size": mean(per_sample) unweighted, sum(per_sample * w) /
// batch weighted (so weights summing to other than the batch size scale it) — plus the layers'
// own losses, then (train) the gradients, their all-reduce and the optimizer update, and the
// metric updates. Adds the label (and weight) inputs; returns {loss, pred[, nonfinite]}.
std::vector<Value> Program::add_loss_and_updates(const Model& model, Graph& g, Value pred,
                                                 std::vector<Value>& inputs,
                                                 const StepMetrics& step_metrics,
                                                 const std::vector<Value>& layer_losses,
                                                 Replication* replication, int replica) {
  const CompileConfig& cfg = model.compile_config();
  LS_CHECK(cfg.loss, "model '", model.name(), "': compile() needs a loss");
  Shape ps = g.type(pred).shape;
  Shape ys = cfg.loss->label_dtype() == DType::i32 ? Shape{batch_} : ps;
  Value y = g.input({cfg.loss->label_dtype(), ys}, "y");
  inputs.push_back(y);
  Value sample_weight;
  if (weighted_)
    inputs.push_back(sample_weight = g.input({DType::f32, Shape{batch_}}, "sample_weight"));
  Value per = cfg.loss->per_sample(g, y, pred);
  if (weighted_) per = g.add("mul", {per, sample_weight});
  Value loss =
      g.add("reduce_mean", {per}, Attrs{{"axes", std::vector<int64_t>{0}}, {"keepdims", false}});
  for (Value extra : layer_losses) loss = g.add("add", {loss, extra});
  Value nonfinite;  // replicated: replicas (all workers) whose loss was NaN or inf
  if (kind_ == Kind::train) {
    LS_CHECK(cfg.optimizer, "model '", model.name(), "': compile() needs an optimizer to fit");
    auto vars = model.trainable_weights();
    std::vector<Value> reads;
    for (auto& v : vars) reads.push_back(g.variable(v));
    auto grads = gradients(g, loss, reads);
    if (replication && replication->strategy().replicated())
      grads = replication->reducer().insert(g, grads, replica, loss, &nonfinite);
    cfg.optimizer->apply(g, grads, vars);
  }
  // Loss tracker: Keras weights each batch's loss by its size -> per-sample copies.
  step_metrics.loss_tracker->update(
      g, y, g.add("broadcast_to", {loss}, Attrs{{"shape", std::vector<int64_t>{batch_}}}));
  for (auto& m : step_metrics.metrics) m->update(g, y, pred);
  for (auto& m : step_metrics.weighted_metrics) m->update_weighted(g, y, pred, sample_weight);
  std::vector<Value> outputs{loss, pred};
  if (nonfinite.valid()) outputs.push_back(nonfinite), has_nonfinite_ = true;
  return outputs;
}

}  // namespace lockstep
