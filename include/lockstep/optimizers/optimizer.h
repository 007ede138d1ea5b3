// Optimizers (Keras names and defaults). apply() adds the update ops for every trainable
// variable to the train-step graph, so the update is part of the compiled step. Slot
// variables (momentum, m, v, ...) are created on first use and kept per variable.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/nn/layer.h"
#include "lockstep/optimizers/schedule.h"

namespace lockstep {

/// The options every optimizer takes (Keras's keyword arguments of keras.optimizers.Optimizer).
struct OptimizerOptions {
  double learning_rate = 0.001;  ///< the rate (the factories' learning_rate argument sets it)
  SchedulePtr schedule;          ///< overrides learning_rate when set
  double weight_decay = 0.0;     ///< decoupled (Keras 3 semantics: var -= lr * wd * var)
  double clipnorm = 0.0;         ///< per-variable norm clip (0 = off)
  double global_clipnorm = 0.0;  ///< clip by the global norm of all gradients (0 = off)
};

/// An optimizer (keras.optimizers.Optimizer): apply() adds the update of every trainable
/// variable to the train step's graph; its state (iterations, slots) lives in variables.
class Optimizer {
 public:
  /// An optimizer with the common options `o`.
  explicit Optimizer(OptimizerOptions o);
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;  ///< Keras's name: "adam", "sgd", "adamw", "rmsprop"
  virtual json get_config() const;       ///< Keras's optimizer config (model.save writes it)

  /// Adds clipping, the learning rate (a read of learning_rate_variable(), or the lr_schedule
  /// op when a schedule is set), per-variable updates and iterations += 1.
  void apply(Graph& g, const std::vector<Value>& grads, const std::vector<VariablePtr>& vars);
  /// The step count (int64 scalar variable), incremented by every applied update.
  const VariablePtr& iterations() const { return iterations_; }
  /// The rate the next step uses: the schedule's value at iterations(), or the variable's.
  double learning_rate() const;
  double current_learning_rate() const { return learning_rate(); }  ///< = learning_rate()
  /// Sets the rate the compiled steps read from the next step on (no recompile). An optimizer
  /// built with a schedule has no settable rate (Keras raises TypeError): this throws.
  void set_learning_rate(double learning_rate);
  bool has_schedule() const { return opts_.schedule != nullptr; }  ///< built with a schedule
  /// The scalar f32 variable the compiled step reads the rate from (no schedule). Replicas of
  /// a strategy share it rather than copying it, so a new rate reaches every replica.
  const VariablePtr& learning_rate_variable() const { return learning_rate_; }
  /// All optimizer state (iterations first, then slots in variable order) for checkpoints.
  std::vector<VariablePtr> variables() const;

 protected:
  /// Adds the update op for one variable.
  virtual void update(Graph& g, Value var, Value grad, Value lr, Value t, const VariablePtr& v) = 0;
  /// The slot variable `slot_name` ("momentum", "m", "v") of `var`, created (zeros) on first use.
  VariablePtr slot(const VariablePtr& var, const std::string& slot_name);
  OptimizerOptions opts_;  ///< the common options

 private:
  VariablePtr iterations_;
  VariablePtr learning_rate_;
  std::map<Variable*, std::vector<std::pair<std::string, VariablePtr>>> slots_;
  std::vector<VariablePtr> slot_order_;
};
/// A shared optimizer (what the factories return and CompileConfig takes).
using OptimizerPtr = std::shared_ptr<Optimizer>;

namespace optimizers {
/// keras.optimizers.SGD: v = momentum v - lr g; w += v (nesterov: w += momentum v - lr g).
OptimizerPtr SGD(double learning_rate = 0.01, double momentum = 0.0, bool nesterov = false,
                 OptimizerOptions o = {});
/// keras.optimizers.Adam (bias-corrected first and second moments).
OptimizerPtr Adam(double learning_rate = 0.001, double beta_1 = 0.9, double beta_2 = 0.999,
                  double epsilon = 1e-7, OptimizerOptions o = {});
/// keras.optimizers.AdamW: Adam with decoupled weight decay.
OptimizerPtr AdamW(double learning_rate = 0.001, double weight_decay = 0.004, double beta_1 = 0.9,
                   double beta_2 = 0.999, double epsilon = 1e-7, OptimizerOptions o = {});
/// keras.optimizers.RMSprop (uncentered).
OptimizerPtr RMSprop(double learning_rate = 0.001, double rho = 0.9, double momentum = 0.0,
                     double epsilon = 1e-7, OptimizerOptions o = {});
OptimizerPtr get(const std::string& name);  ///< "adam", "sgd", ...
/// Scalar graph value min(1, clipnorm / global_norm(grads)), global_norm = sqrt(sum of all
/// squared gradient entries) (Keras clip_by_global_norm; 1 when the norm is 0).
Value global_norm_scale(Graph& g, const std::vector<Value>& grads, double clipnorm);
}  // namespace optimizers

}  // namespace lockstep
