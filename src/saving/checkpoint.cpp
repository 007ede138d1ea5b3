// Checkpoints of a Model: its weights, optionally with the optimizer's state and training
// progress, mapped onto io's checkpoint files (lockstep/io/checkpoint.h).
#include "lockstep/saving/checkpoint.h"

#include "distribute/internal/strategy_runtime.h"
#include "lockstep/trainers/model.h"

namespace lockstep::train {

using io::CheckpointFile;
using io::NamedTensor;
using io::read_checkpoint_file;
using io::TrainingProgress;
using io::write_checkpoint_file;

namespace {

std::vector<VariablePtr> optimizer_variables(Model& model, bool create_slots) {
  auto& opt = model.compile_config().optimizer;
  if (!opt) return {};
  auto vars = opt->variables();
  if (create_slots && vars.size() == 1) {
    // No train program yet: let the optimizer create its slots on a throwaway graph (same
    // order as the real train step: trainable weights in model order).
    Graph g;
    std::vector<Value> grads;
    auto weights = model.trainable_weights();
    for (auto& w : weights) grads.push_back(g.variable(w));
    opt->apply(g, grads, weights);
    vars = opt->variables();
  }
  return vars;
}

bool is_chief(const Model& model) { return !model.strategy() || model.strategy()->is_chief(); }

// Copies file tensors [first, first + vars.size()) with names starting with `prefix` into vars.
void assign(const std::vector<VariablePtr>& vars, const CheckpointFile& f,
            const std::string& prefix, const std::string& path, const std::string& what) {
  std::vector<const NamedTensor*> src;
  for (auto& t : f.tensors)
    if (t.name.rfind(prefix, 0) == 0) src.push_back(&t);
  LS_CHECK(src.size() == vars.size(), "checkpoint '", path, "': holds ", src.size(), " ", what,
           " tensors but the model has ", vars.size(),
           " (was it saved from a different architecture or optimizer?)");
  for (size_t i = 0; i < vars.size(); ++i) {
    const Tensor& v = vars[i]->value;
    const Tensor& s = src[i]->value;
    LS_CHECK(s.shape() == v.shape() && s.dtype() == v.dtype(), "checkpoint '", path, "': ", what,
             " #", i, " '", src[i]->name.substr(prefix.size()), "' is ", dtype_name(s.dtype()),
             s.shape().str(), " in the file but the model's '", vars[i]->name, "' is ",
             dtype_name(v.dtype()), v.shape().str(), " (different architecture?)");
  }
  for (size_t i = 0; i < vars.size(); ++i) vars[i]->value.copy_from(src[i]->value);
  note_variable_host_write();  // compiled programs refresh their weight caches
}

}  // namespace

bool save_weights(const Model& model, const std::string& path) {
  if (!is_chief(model)) return false;
  CheckpointFile f;
  f.metadata = {{"format", "lockstep-checkpoint"}, {"kind", "weights"}, {"model", model.name()}};
  for (auto& v : model.weights()) f.tensors.push_back({"weights/" + v->name, v->value});
  write_checkpoint_file(path, f);
  return true;
}

void load_weights(Model& model, const std::string& path) {
  CheckpointFile f = read_checkpoint_file(path);
  assign(model.weights(), f, "weights/", path, "weight");
}

bool Checkpoint::save(const std::string& path, const TrainingProgress& progress) const {
  if (!is_chief(model_)) return false;
  CheckpointFile f;
  f.metadata = {{"format", "lockstep-checkpoint"}, {"kind", "training"},
                {"model", model_.name()},          {"epoch", progress.epoch},
                {"step", progress.step},           {"extra", progress.extra}};
  if (auto& opt = model_.compile_config().optimizer) f.metadata["optimizer"] = opt->get_config();
  for (auto& v : model_.weights()) f.tensors.push_back({"weights/" + v->name, v->value});
  for (auto& v : optimizer_variables(model_, false))
    f.tensors.push_back({"optimizer/" + v->name, v->value});
  write_checkpoint_file(path, f);
  return true;
}

TrainingProgress Checkpoint::restore(const std::string& path) {
  CheckpointFile f = read_checkpoint_file(path);
  assign(model_.weights(), f, "weights/", path, "weight");
  bool has_opt = false;
  for (auto& t : f.tensors) has_opt |= t.name.rfind("optimizer/", 0) == 0;
  if (has_opt) {
    LS_CHECK(model_.compile_config().optimizer, "checkpoint '", path,
             "': holds optimizer state but model '", model_.name(),
             "' has no optimizer (compile it first)");
    assign(optimizer_variables(model_, true), f, "optimizer/", path, "optimizer variable");
  }
  TrainingProgress p;
  p.epoch = f.metadata.value("epoch", 0);
  p.step = f.metadata.value("step", int64_t(0));
  if (f.metadata.contains("extra")) p.extra = f.metadata["extra"];
  return p;
}

}  // namespace lockstep::train
