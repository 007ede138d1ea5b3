// Optimizers (Keras names and defaults). apply() adds the update ops for every trainable
// variable to the train-step graph, so the update is part of the compiled step. Slot
// variables (momentum, m, v, ...) are created on first use and kept per variable.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/nn/layer.h"
#include "lockstep/train/schedule.h"

namespace lockstep {

struct OptimizerOptions {
  double learning_rate = 0.001;
  SchedulePtr schedule;          // overrides learning_rate when set
  double weight_decay = 0.0;     // decoupled (Keras 3 semantics: var -= lr * wd * var)
  double clipnorm = 0.0;         // per-variable norm clip (0 = off)
  double global_clipnorm = 0.0;  // clip by the global norm of all gradients (0 = off)
};

class Optimizer {
 public:
  explicit Optimizer(OptimizerOptions o);
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  virtual json get_config() const;

  // Adds clipping, the learning rate (a read of learning_rate_variable(), or the lr_schedule
  // op when a schedule is set), per-variable updates and iterations += 1.
  void apply(Graph& g, const std::vector<Value>& grads, const std::vector<VariablePtr>& vars);
  const VariablePtr& iterations() const { return iterations_; }
  // The rate the next step uses: the schedule's value at iterations(), or the variable's.
  double learning_rate() const;
  double current_learning_rate() const { return learning_rate(); }
  // Sets the rate the compiled steps read from the next step on (no recompile). An optimizer
  // built with a schedule has no settable rate (Keras raises TypeError): this throws.
  void set_learning_rate(double learning_rate);
  bool has_schedule() const { return opts_.schedule != nullptr; }
  // The scalar f32 variable the compiled step reads the rate from (no schedule). Replicas of
  // a strategy share it rather than copying it, so a new rate reaches every replica.
  const VariablePtr& learning_rate_variable() const { return learning_rate_; }
  // All optimizer state (iterations first, then slots in variable order) for checkpoints.
  std::vector<VariablePtr> variables() const;

 protected:
  // Adds the update op for one variable.
  virtual void update(Graph& g, Value var, Value grad, Value lr, Value t, const VariablePtr& v) = 0;
  VariablePtr slot(const VariablePtr& var, const std::string& slot_name);
  OptimizerOptions opts_;

 private:
  VariablePtr iterations_;
  VariablePtr learning_rate_;
  std::map<Variable*, std::vector<std::pair<std::string, VariablePtr>>> slots_;
  std::vector<VariablePtr> slot_order_;
};
using OptimizerPtr = std::shared_ptr<Optimizer>;

namespace optimizers {
OptimizerPtr SGD(double learning_rate = 0.01, double momentum = 0.0, bool nesterov = false,
                 OptimizerOptions o = {});
OptimizerPtr Adam(double learning_rate = 0.001, double beta_1 = 0.9, double beta_2 = 0.999,
                  double epsilon = 1e-7, OptimizerOptions o = {});
OptimizerPtr AdamW(double learning_rate = 0.001, double weight_decay = 0.004, double beta_1 = 0.9,
                   double beta_2 = 0.999, double epsilon = 1e-7, OptimizerOptions o = {});
OptimizerPtr RMSprop(double learning_rate = 0.001, double rho = 0.9, double momentum = 0.0,
                     double epsilon = 1e-7, OptimizerOptions o = {});
OptimizerPtr get(const std::string& name);  // "adam", "sgd", ...
// Scalar graph value min(1, clipnorm / global_norm(grads)), global_norm = sqrt(sum of all
// squared gradient entries) (Keras clip_by_global_norm; 1 when the norm is 0).
Value global_norm_scale(Graph& g, const std::vector<Value>& grads, double clipnorm);
}  // namespace optimizers

}  // namespace lockstep
