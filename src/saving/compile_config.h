// Keras 3's "compile_config" (config.json of a .keras file) and the optimizer's state in
// model.weights.h5 ("optimizer/vars/<i>": iteration, learning_rate when it is a number, then
// the slot variables in Keras's order), both ways.
#pragma once
#include <string>
#include <vector>

#include "lockstep/io/checkpoint.h"
#include "lockstep/trainers/model.h"

namespace lockstep::train {

// {"optimizer": {...}, "loss": {...}, "metrics": [...], ...} as Keras's get_compile_config.
json compile_config_json(const CompileConfig& config);
// The CompileConfig a compile_config describes. Throws naming the key Lockstep cannot follow
// (an unknown optimizer or loss class, clipvalue, amsgrad, ...).
CompileConfig compile_config_from_json(const json& compile_config);
OptimizerPtr optimizer_from_config(const json& optimizer);  // {"class_name", "config"}
LossPtr loss_from_config(const json& loss);                 // a name or {"class_name", ...}

// The compiled model's optimizer variables as Keras names them in model.weights.h5, creating
// the slots first when no train step has run. Empty when the model has no optimizer.
std::vector<io::NamedTensor> optimizer_state(const Model& model);
// Loads optimizer/vars/<i> from `tensors` into the compiled model's optimizer (its slots
// created first). Throws naming `where` on a count, shape or dtype mismatch.
void load_optimizer_state(Model& model, const std::vector<io::NamedTensor>& tensors,
                          const std::string& where);

}  // namespace lockstep::train
