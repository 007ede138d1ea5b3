// What a Model keeps for training between calls, and the narrow interface the fit loop
// (fit_loop.h) and the evaluate / predict loops see of it: the resolved compile configuration
// (compile_resolution.h), the step programs compiled so far (one per kind, batch size, replica
// and weighting), the replication under a strategy, the running fit's progress and a resume
// point. Model owns one; nothing here reaches into the Model.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "lockstep/trainers/model.h"
#include "trainers/compile_resolution.h"
#include "trainers/program.h"

namespace lockstep {

class ModelRuntime {
 public:
  ModelRuntime();
  ~ModelRuntime();

  // compile(): the resolved configuration, under `strategy` (nullptr: none). Drops the
  // programs compiled before.
  void compile(ResolvedCompile resolved, std::shared_ptr<distribute::StrategyImpl> strategy);
  bool compiled() const { return compiled_; }
  const ResolvedCompile& resolved() const { return resolved_; }

  // Which step program: a train program on train_replication(); train_alone, a train program on
  // replication() even under thread replicas (a batch too small to split); eval; predict.
  enum class ProgramKind { train, train_alone, eval, predict };
  // The step program of `kind` for `batch` rows on `replica`, compiled on first use from
  // `network`. weighted: 0 none, 1 one weight per sample, O (several outputs): one per sample and
  // output. Train and eval programs need compile().
  Program& program(const Network& network, ProgramKind kind, int64_t batch, int replica = 0,
                   int weighted = 0);
  // Per local replica 0, 1, ...: its train program with the most rows compiled so far (the
  // list ends at the first replica with none; empty when no train program was compiled).
  std::vector<const Program*> largest_train_programs() const;
  double compile_seconds() const { return compile_seconds_; }
  int programs_compiled() const { return int(programs_.size()); }

  // The replication under a strategy (or of gradient shards), else nullptr.
  Replication* replication() const { return replication_.get(); }
  // Thread replicas (trainers/thread_replicas.h): fit's train programs run as k in-process
  // replicas, one core each, each on its share of every batch, with every BatchNormalization
  // pooling its statistics over them; evaluate and predict do not see them. k = 1: off.
  // Train programs compiled for another count are dropped.
  void set_thread_replicas(int k);
  int thread_replicas() const { return threads_ ? threads_->local_replicas() : 1; }
  // What fit's train programs replicate over: the thread replicas when on, else replication().
  // ProgramKind::train_alone is a train program on replication() even then (a batch too small
  // to split).
  Replication* train_replication() const { return threads_ ? threads_.get() : replication_.get(); }
  // Gradient shards per local replica (lockstep/core/config.h): a model without a strategy gets
  // a replication of its own for k > 1 (and loses it for 1); programs compiled for another
  // count are dropped.
  void set_shards_per_replica(int k);

  // Where the model's weights and optimizer slots are newest (lockstep/graph/device_residence.h):
  // shared by every program this runtime compiles, for the life of the model.
  const std::shared_ptr<DeviceResidence>& residence() const { return residence_; }

  Model::FitProgress& fit_progress() { return fit_progress_; }
  // Model::set_resume_point's epoch (-1: none) and step.
  void set_resume_point(int epoch, int64_t step) { resume_epoch_ = epoch, resume_step_ = step; }
  int resume_epoch() const { return resume_epoch_; }
  int64_t resume_step() const { return resume_step_; }

 private:
  ResolvedCompile resolved_;
  bool compiled_ = false;
  std::shared_ptr<DeviceResidence> residence_ = std::make_shared<DeviceResidence>();
  std::shared_ptr<distribute::StrategyImpl> strategy_;
  std::map<std::tuple<ProgramKind, int64_t, int, int>, std::unique_ptr<Program>> programs_;
  double compile_seconds_ = 0;
  std::unique_ptr<Replication> replication_;
  std::unique_ptr<Replication> threads_;  // set_thread_replicas
  Model::FitProgress fit_progress_;
  int resume_epoch_ = -1;
  int64_t resume_step_ = 0;
};

}  // namespace lockstep
