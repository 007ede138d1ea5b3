// Builds and compiles the step graph of a Model.
#include "train/program.h"

#include <cstdio>

#include "lockstep/graph/autodiff.h"

namespace lockstep {

Program::Kind program_kind(const std::string& name) {
  if (name == "train") return Program::Kind::train;
  if (name == "eval") return Program::Kind::eval;
  return Program::Kind::predict;
}

Program::Program(const Model& model, Kind kind, int64_t batch, MetricPtr loss_tracker,
                 const std::vector<MetricPtr>& metrics)
    : kind_(kind) {
  const CompileConfig& cfg = model.compile_config();
  LS_CHECK(model.inputs().size() == 1 && model.outputs().size() == 1,
           "model '", model.name(), "': fit/evaluate/predict support one input and one output for now");
  Graph g;
  Shape xs = model.inputs()[0].shape().with_dim(0, batch);
  Value x = g.input({model.inputs()[0].dtype(), xs}, "x");
  CallContext ctx{g, kind == Kind::train, random_seed(), {}};
  Value pred = model.call(ctx, {x})[0];
  std::vector<Value> inputs{x}, outputs;
  if (kind == Kind::predict) {
    outputs = {pred};
  } else {
    LS_CHECK(cfg.loss, "model '", model.name(), "': compile() needs a loss");
    Shape ps = g.type(pred).shape;
    Shape ys = cfg.loss->label_dtype() == DType::i32 ? Shape{batch} : ps;
    Value y = g.input({cfg.loss->label_dtype(), ys}, "y");
    inputs.push_back(y);
    Value per = cfg.loss->per_sample(g, y, pred);
    Value loss = g.add("reduce_mean", {per}, Attrs{{"axes", std::vector<int64_t>{0}}, {"keepdims", false}});
    for (Value extra : ctx.losses) loss = g.add("add", {loss, extra});
    if (kind == Kind::train) {
      LS_CHECK(cfg.optimizer, "model '", model.name(), "': compile() needs an optimizer to fit");
      auto vars = model.trainable_weights();
      std::vector<Value> reads;
      for (auto& v : vars) reads.push_back(g.variable(v));
      auto grads = gradients(g, loss, reads);
      cfg.optimizer->apply(g, grads, vars);
    }
    // Loss tracker: Keras weights each batch's loss by its size -> per-sample copies.
    loss_tracker->update(g, y, g.add("broadcast_to", {loss}, Attrs{{"shape", std::vector<int64_t>{batch}}}));
    for (auto& m : metrics) m->update(g, y, pred);
    outputs = {loss, pred};
  }
  CompileOptions opts;
  opts.backend = cfg.backend;
  opts.eager = cfg.run_eagerly;
  opts.seed = random_seed();
  exe_ = std::make_unique<Executable>(g, inputs, outputs, opts);
  if (cfg.verbose_compile) {
    std::fprintf(stderr, "[compile] %s program, batch %lld: %.3f s\n",
                 kind == Kind::train ? "train" : kind == Kind::eval ? "eval" : "predict",
                 (long long)batch, exe_->compile_seconds());
    for (auto& line : exe_->report()) std::fprintf(stderr, "[compile]   %s\n", line.c_str());
  }
}

}  // namespace lockstep
