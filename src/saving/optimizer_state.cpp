// The optimizer's variables in Keras 3's order (src/saving/compile_config.h): what
// model.weights.h5 holds under optimizer/vars/<i>. Keras: iteration, learning_rate (unless a
// schedule), then the slots: Adam / AdamW per variable (momentum, velocity), SGD momentum per
// variable, RMSprop every velocity then every momentum.
#include <cmath>
#include <map>
#include <set>

#include "lockstep/nn/config.h"
#include "nn/internal/keras_variable_order.h"
#include "saving/compile_config.h"

namespace lockstep::train {
namespace {

// Lockstep's slot names, in Keras's grouping: each inner list is interleaved per variable.
std::vector<std::vector<std::string>> keras_slot_blocks(const std::string& optimizer) {
  if (optimizer == "adam" || optimizer == "adamw") return {{"m", "v"}};
  if (optimizer == "SGD") return {{"momentum"}};
  if (optimizer == "rmsprop") return {{"velocity"}, {"momentum"}};
  LS_FAIL("optimizer '", optimizer, "': no Keras variable layout known");
}

// The optimizer's slots exist after the first train step; before it, create them on a
// throwaway graph (the same order as the train step: trainable weights in model order).
void ensure_slots(const Model& model) {
  auto& opt = model.compile_config().optimizer;
  if (opt->variables().size() > 1) return;
  auto weights = model.trainable_weights();
  if (weights.empty()) return;
  Graph g;
  std::vector<Value> grads;
  for (auto& w : weights) grads.push_back(g.variable(w));
  opt->apply(g, grads, weights);
}

std::vector<VariablePtr> keras_ordered_variables(const Model& model, const std::string& where) {
  auto& opt = model.compile_config().optimizer;
  ensure_slots(model);
  std::map<std::string, VariablePtr> by_name;
  const auto all = opt->variables();
  for (size_t i = 1; i < all.size(); ++i) by_name[all[i]->name] = all[i];
  // Keras builds the optimizer on model.trainable_variables: frozen layers' weights have no slots.
  std::set<const Variable*> trained;
  for (auto& w : model.trainable_weights()) trained.insert(w.get());
  std::vector<VariablePtr> trainable;
  for (auto& layer : keras_layer_order(model))
    for (auto& w : keras_variable_order(*layer))
      if (trained.count(w.get())) trainable.push_back(w);
  std::vector<VariablePtr> out{opt->iterations()};
  if (!opt->has_schedule()) out.push_back(opt->learning_rate_variable());
  for (auto& block : keras_slot_blocks(opt->name())) {
    std::vector<VariablePtr> found;
    for (auto& w : trainable)
      for (auto& slot : block) {
        auto it = by_name.find(opt->name() + "/" + w->name + "/" + slot);
        if (it != by_name.end()) found.push_back(it->second), by_name.erase(it);
      }
    LS_CHECK(found.empty() || found.size() == trainable.size() * block.size(), where,
             ": optimizer '", opt->name(), "' has slots for only some trainable variables (",
             found.size(), " of ", trainable.size() * block.size(), ")");
    out.insert(out.end(), found.begin(), found.end());
  }
  LS_CHECK(by_name.empty(), where, ": optimizer '", opt->name(), "' has ", by_name.size(),
           " variables that are not slots of the model's trainable weights (e.g. '",
           by_name.empty() ? "" : by_name.begin()->first, "')");
  return out;
}

}  // namespace

std::vector<io::NamedTensor> optimizer_state(const Model& model) {
  if (!model.compile_config().optimizer) return {};
  auto vars = keras_ordered_variables(model, "model '" + model.name() + "'");
  std::vector<io::NamedTensor> out;
  Tensor iteration = Tensor::zeros(Shape{}, DType::i64);  // Keras: an integer variable
  iteration.data<int64_t>()[0] = int64_t(vars[0]->value.item());
  out.push_back({"optimizer/vars/0", iteration});
  for (size_t i = 1; i < vars.size(); ++i)
    out.push_back({"optimizer/vars/" + std::to_string(i), vars[i]->value});
  return out;
}

void load_optimizer_state(Model& model, const std::vector<io::NamedTensor>& tensors,
                          const std::string& where) {
  auto& opt = model.compile_config().optimizer;
  LS_CHECK(opt, where, ": the model has no optimizer to load optimizer/vars into");
  std::map<std::string, const Tensor*> by_name;
  for (auto& t : tensors)
    if (t.name.rfind("optimizer/vars/", 0) == 0) by_name[t.name] = &t.value;
  auto vars = keras_ordered_variables(model, where);
  // Keras saves an optimizer that compile() made but no step built with its iteration count
  // and learning rate only (Keras loads such a file): those load, and the slots stay fresh.
  const size_t scalars = opt->has_schedule() ? 1 : 2;
  const bool unbuilt = by_name.size() == scalars && vars.size() > scalars;
  LS_CHECK(unbuilt || by_name.size() == vars.size(), where, ": optimizer/vars holds ",
           by_name.size(), " variables but optimizer '", opt->name(), "' of this model has ",
           vars.size(), " (iteration", opt->has_schedule() ? "" : ", learning_rate",
           ", slots): saved with a different optimizer or model?");
  if (unbuilt) vars.resize(scalars);
  std::vector<const Tensor*> src;
  for (size_t i = 0; i < vars.size(); ++i) {
    auto it = by_name.find("optimizer/vars/" + std::to_string(i));
    LS_CHECK(it != by_name.end(), where, ": optimizer/vars/", i, " is missing");
    const Tensor& s = *it->second;
    const Tensor& v = vars[i]->value;
    LS_CHECK(s.shape() == v.shape() && (i < 2 || s.dtype() == v.dtype()), where,
             ": optimizer/vars/", i, " is ", dtype_name(s.dtype()), s.shape().str(), " but '",
             vars[i]->name, "' is ", dtype_name(v.dtype()), v.shape().str());
    src.push_back(&s);
  }
  const float iteration = src[0]->to_vector()[0];
  LS_CHECK(std::isfinite(iteration) && iteration >= 0, where,
           ": optimizer/vars/0 (the iteration count) is ", iteration,
           " (a count of steps: the file is damaged)");
  vars[0]->value.data<float>()[0] = iteration;
  size_t first_slot = 1;
  if (!opt->has_schedule()) {
    const float lr = src[1]->to_vector()[0];
    LS_CHECK(std::isfinite(lr) && lr >= 0, where, ": optimizer/vars/1 (the learning rate) is ", lr,
             " (a learning rate is a finite number >= 0: the file is damaged)");
    opt->set_learning_rate(lr), first_slot = 2;
  }
  for (size_t i = first_slot; i < vars.size(); ++i) vars[i]->value.copy_from(*src[i]);
  note_variable_host_write();  // compiled programs refresh their weight caches
}

}  // namespace lockstep::train
