// Program: one compiled step of a model (train, eval or predict) for one batch size. It builds
// the step graph (forward, loss, autodiff, optimizer update, metric updates) and compiles it
// into an Executable.
#pragma once
#include <memory>
#include <string>

#include "lockstep/graph/executable.h"
#include "lockstep/nn/model.h"

namespace lockstep {

class Program {
 public:
  enum class Kind { train, eval, predict };
  Program(const Model& model, Kind kind, int64_t batch, MetricPtr loss_tracker,
          const std::vector<MetricPtr>& metrics);
  Tensor& x() { return exe_->input(0); }
  Tensor& y() { return exe_->input(1); }
  void run() { exe_->run(); }
  float loss() const { return exe_->output(0).item(); }
  const Tensor& predictions() const { return exe_->output(kind_ == Kind::predict ? 0 : 1); }
  double compile_seconds() const { return exe_->compile_seconds(); }
  const Executable& executable() const { return *exe_; }

 private:
  Kind kind_;
  std::unique_ptr<Executable> exe_;
};

Program::Kind program_kind(const std::string& name);

}  // namespace lockstep
