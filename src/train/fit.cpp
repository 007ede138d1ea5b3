// Model::fit / evaluate / predict: the host loop around compiled programs. A step takes one
// batch from a Source (arrays or a Dataset), splits it across the local replicas (one when the
// model is not replicated), copies each share into its replica's program and runs the
// replicas together; the gradient all-reduce is inside the programs.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "distribute/internal/strategy_runtime.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/train/model.h"
#include "lockstep/train/progress.h"
#include "train/fit_source.h"
#include "train/program.h"

namespace lockstep {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::vector<VariablePtr> metric_variables(const Model& m) {
  std::vector<VariablePtr> v;
  for (auto& metric : m.metrics())
    for (auto& var : metric->variables()) v.push_back(var);
  return v;
}

// Resets the metrics of every local replica (the copies are folded into replica 0's first,
// which zeroes them).
void reset_metrics(const Model& m, Replication* rep) {
  if (rep) rep->fold_into_primary(metric_variables(m));
  for (auto& metric : m.metrics()) metric->reset();
}

// Rows of replica r when n rows are split over R replicas (the first n % R get one more).
std::pair<int64_t, int64_t> replica_rows(int64_t n, int R, int r) {
  int64_t base = n / R, extra = n % R;
  int64_t r0 = r * base + std::min<int64_t>(r, extra);
  return {r0, r0 + base + (r < extra ? 1 : 0)};
}

}  // namespace

// Metric values: local replicas folded into replica 0's accumulators, then (across_workers)
// summed over workers (sum(total) / sum(count)). Every worker must make the same call.
static Logs read_metrics(const Model& m, Replication* rep, const std::string& prefix = "",
                         bool across_workers = true) {
  Logs logs;
  auto vars = metric_variables(m);
  if (rep) rep->fold_into_primary(vars);
  std::vector<Tensor> saved;
  if (across_workers && rep && rep->strategy().num_workers > 1) {
    std::vector<double> all;
    for (auto& v : vars)
      for (float f : v->value.to_vector()) all.push_back(f);
    rep->strategy().allreduce_workers(all.data(), all.size());
    size_t k = 0;
    for (auto& v : vars) {
      saved.push_back(v->value.clone());
      float* p = v->value.data<float>();
      for (int64_t i = 0; i < v->value.numel(); ++i) p[i] = float(all[k++]);
    }
  }
  for (auto& metric : m.metrics()) logs[prefix + metric->name()] = metric->result();
  for (size_t i = 0; i < saved.size(); ++i) vars[i]->value.copy_from(saved[i]);
  return logs;
}

void Model::sync_replicas_for_fit() {
  if (!replication_) return;
  auto& s = replication_->strategy();
  if (s.num_workers > 1) {  // every worker starts from the chief's weights and optimizer state
    std::vector<VariablePtr> vars = weights();
    if (config_.optimizer)
      for (auto& v : config_.optimizer->variables()) vars.push_back(v);
    for (auto& v : vars)
      if (v->value.dtype() == DType::f32)
        s.broadcast_from_chief(v->value.data<float>(), size_t(v->value.numel()));
  }
  replication_->sync_from_primary();
}

History Model::fit(const Tensor& x_in, const Tensor& y_in, FitConfig cfg) {
  LS_CHECK(compiled_, "Model '", name_, "': call compile() before fit()");
  LS_CHECK(cfg.batch_size >= 1, "fit: batch_size must be >= 1, got ", cfg.batch_size);
  LS_CHECK(cfg.validation_split >= 0 && cfg.validation_split < 1,
           "fit: validation_split must be in [0, 1), got ", cfg.validation_split);
  Tensor y_all = check_model_data(*this, x_in, &y_in, "fit");
  Tensor x = x_in, y = y_all;
  if (cfg.validation_split > 0) {  // Keras: the last fraction, before shuffling
    int64_t n = x.dim(0), nv = int64_t(std::floor(double(n) * cfg.validation_split));
    LS_CHECK(nv > 0 && nv < n, "fit: validation_split ", cfg.validation_split, " leaves no data");
    cfg.validation_data =
        ValidationData(x.slice(n - nv, n).contiguous(), y.slice(n - nv, n).contiguous());
    x = x.slice(0, n - nv), y = y.slice(0, n - nv);
  } else if (cfg.validation_data.x.defined()) {
    cfg.validation_data.y = check_model_data(*this, cfg.validation_data.x, &cfg.validation_data.y,
                                             "fit(validation_data)");
  }
  if (strategy_) {
    const int replicas = strategy_->replicas_in_sync();
    LS_CHECK(cfg.batch_size % replicas == 0, "fit: batch_size ", cfg.batch_size,
             " is the global batch and must be divisible by the ", replicas,
             " replicas in sync of ", strategy_->name, " (use e.g. ",
             (cfg.batch_size / replicas + 1) * replicas, ")");
  }
  TensorSource source(x, y, cfg.batch_size, cfg.shuffle, cfg.seed, cfg.initial_epoch);
  return fit_loop(source, cfg);
}

History Model::fit(const data::Dataset& dataset, FitConfig cfg) {
  return fit_dataset(dataset, std::move(cfg), false);
}

History Model::fit_dataset(const data::Dataset& dataset, FitConfig cfg, bool distributed) {
  LS_CHECK(compiled_, "Model '", name_, "': call compile() before fit()");
  if (!distributed && strategy_ && strategy_->num_workers > 1) {
    // As Keras: fit() under a multi-worker strategy distributes a plain dataset itself
    // (AutoShardPolicy::AUTO: by file when it reads files, else by element), so the workers
    // split each epoch instead of all training on every batch.
    return fit_dataset(distribute::Strategy(strategy_).distribute_dataset(dataset).dataset(),
                       std::move(cfg), true);
  }
  LS_CHECK(cfg.validation_split == 0,
           "fit(Dataset): validation_split is not supported with a "
           "Dataset (pass validation_data, or split the dataset with take/skip)");
  if (cfg.validation_data.x.defined())
    cfg.validation_data.y = check_model_data(*this, cfg.validation_data.x, &cfg.validation_data.y,
                                             "fit(validation_data)");
  DatasetSource source(*this, dataset, true, cfg.steps_per_epoch > 0, "fit(Dataset)");
  return fit_loop(source, cfg);
}

History Model::fit(const distribute::DistributedDataset& dataset, FitConfig cfg) {
  LS_CHECK(strategy_, "fit(DistributedDataset): model '", name_,
           "' is not replicated (create or compile it inside strategy.scope())");
  return fit_dataset(dataset.dataset(), std::move(cfg), true);
}

History Model::fit_loop(Source& source, FitConfig& cfg) {
  LS_CHECK(cfg.epochs >= 0 && cfg.initial_epoch >= 0, "fit: epochs and initial_epoch must be >= 0");
  const int R = replication_ ? replication_->local_replicas() : 1;
  distribute::StrategyImpl* strategy = replication_ ? &replication_->strategy() : nullptr;
  const int W = strategy ? strategy->num_workers : 1;
  const bool chief = !strategy || strategy->is_chief();
  if (!chief) cfg.verbose = 0;  // only the chief prints progress
  const int spe = config_.steps_per_execution;
  const bool arrays = dynamic_cast<TensorSource*>(&source) != nullptr;

  History hist;
  hist.replicas = R * W;
  hist.workers = W;
  stop_training = false;
  resume_epoch_ = -1;
  resume_step_ = 0;
  for (auto& cb : cfg.callbacks) cb->set_model(this);
  for (auto& cb : cfg.callbacks) cb->on_train_begin({});
  int first_epoch = cfg.initial_epoch;
  int64_t first_step = 0;
  if (resume_epoch_ >= 0) first_epoch = resume_epoch_, first_step = resume_step_;
  resume_epoch_ = -1;

  bool need_sync = true;
  int64_t samples = 0;
  std::vector<Program*> progs(static_cast<size_t>(R));
  std::vector<float> replica_weights(static_cast<size_t>(R));
  bool warned_small = false;
  for (int epoch = first_epoch; epoch < cfg.epochs && !stop_training; ++epoch) {
    if (cfg.verbose) std::printf("Epoch %d/%d\n", epoch + 1, cfg.epochs), std::fflush(stdout);
    for (auto& cb : cfg.callbacks) cb->on_epoch_begin(epoch, {});
    reset_metrics(*this, replication_.get());
    const int64_t start_step = epoch == first_epoch ? first_step : 0;
    auto t0 = Clock::now();
    double compile_before = compile_seconds_, input_wait = 0;
    source.begin_epoch(epoch);
    if (start_step > 0) {
      if (auto* ds = dynamic_cast<DatasetSource*>(&source)) {
        ds->skip(cfg.steps_per_epoch > 0 ? int64_t(epoch) * cfg.steps_per_epoch + start_step
                                         : start_step);
      } else {
        for (int64_t k = 0; k < start_step && source.next(); ++k) {
        }
      }
    }
    int64_t steps = source.steps();
    if (W > 1 && arrays && epoch == first_epoch) {  // all workers hold the same arrays
      double c[2] = {double(steps), double(steps) * double(steps)};
      strategy->allreduce_workers(c, 2);
      LS_CHECK(c[1] * W == c[0] * c[0],
               "fit: the workers disagree on the number of batches per epoch (this worker: ", steps,
               ", mean over workers: ", c[0] / W,
               "); under MultiWorkerMirroredStrategy every worker passes the same arrays (the "
               "strategy splits each global batch), or pass a Dataset");
    }
    if (cfg.steps_per_epoch > 0)
      steps = steps < 0 ? cfg.steps_per_epoch : std::min(steps, cfg.steps_per_epoch);
    ProgressBar bar(int(std::max<int64_t>(steps, 0)), cfg.verbose);
    if (replication_) replication_->reducer().reset_timers();
    Logs logs;
    bool end_of_data = false;
    int64_t s = start_step;
    while ((steps < 0 || s < steps) && !stop_training && !end_of_data) {
      int64_t s_end = steps < 0 ? s + spe : std::min<int64_t>(s + spe, steps);
      int64_t done = s;
      for (int64_t k = s; k < s_end; ++k) {
        for (auto& cb : cfg.callbacks) cb->on_train_batch_begin(int(k), {});
        auto t_in = Clock::now();
        double compile_in = compile_seconds_;
        bool have = source.next();
        int64_t lo = 0, n = have ? source.size() : 0, n_global = n;
        if (have && W > 1 && arrays) {                               // arrays: the global batch
          auto [a, b] = replica_rows(n, W, strategy->worker_index);  // this worker's rows
          lo = a, n = b - a;
        }
        // Arrays on several workers: the smallest worker share decides, the same on all.
        bool too_small = have && (W > 1 && arrays ? n_global / W : n) < R;
        // Arrays: every worker holds the same arrays (checked at the epoch's start) and walks
        // the same global batches, so no per-step agreement is needed. Datasets: every worker
        // steps while all have data; the global sample count.
        if (W > 1 && !arrays) {
          double flags[3] = {have ? 0.0 : 1.0, double(n), too_small ? 1.0 : 0.0};
          strategy->allreduce_workers(flags, 3);
          have = flags[0] == 0.0;
          n_global = int64_t(flags[1]);
          too_small = flags[2] > 0;
        }
        if (!have) {
          end_of_data = true;
          break;
        }
        if (too_small) {  // a tail batch smaller than the replica count is dropped
          if (!warned_small && chief)
            std::fprintf(
                stderr,
                "fit: dropping a final batch of %lld samples (fewer than the %d local replicas)\n",
                (long long)n, R);
          warned_small = true;
          done = k + 1;
          continue;
        }
        for (int r = 0; r < R; ++r) {
          auto [r0, r1] = replica_rows(n, R, r);
          Program& p = program("train", r1 - r0, r);
          source.copy(lo + r0, lo + r1, p.x(), &p.y());
          progs[size_t(r)] = &p;
          replica_weights[size_t(r)] = float(double(r1 - r0) / double(n_global));
        }
        input_wait += since(t_in) - (compile_seconds_ - compile_in);
        if (need_sync) sync_replicas_for_fit(), need_sync = false;
        if (replication_) replication_->reducer().set_weights(replica_weights);
        const uint64_t step_id = config_.optimizer
                                     ? uint64_t(config_.optimizer->iterations()->value.item())
                                     : uint64_t(k);
        if (strategy) {
          strategy->run_replicas([&](int r) {
            progs[size_t(r)]->set_step(step_id);
            progs[size_t(r)]->run();
          });
        } else {
          progs[0]->set_step(step_id);
          progs[0]->run();
        }
        samples += n;
        done = k + 1;
        // Replicated: the count of bad replicas came with the gradient all-reduce, so every
        // replica of every worker stops on this same step.
        const int bad = progs[0]->nonfinite_replicas();
        if (bad > 0) {
          const float l = progs[0]->loss();
          // (replicated: the same words on every worker, which may not see the bad value)
          const std::string what = R * W > 1 || std::isfinite(l) ? "NaN or inf"
                                   : std::isnan(l)               ? "NaN"
                                                                 : "inf";
          hist.stopped_on_nan = true;
          hist.stop_reason =
              "loss became " + what + " at epoch " + std::to_string(epoch + 1) + ", step " +
              std::to_string(k + 1) +
              (R * W > 1
                   ? " on " + std::to_string(bad) + " of " + std::to_string(R * W) + " replicas"
                   : std::string()) +
              "; training stopped (lower the learning rate, or check the inputs and labels for "
              "NaN/inf)";
          std::fprintf(stderr, "\nfit: %s\n", hist.stop_reason.c_str());
          stop_training = true;
          break;
        }
      }
      if (done == s) break;  // no step ran: end of data
      // Per-step logs are this worker's (its local replicas'): summing them over workers would
      // put a blocking round trip between every two steps. The epoch's logs are global.
      logs = read_metrics(*this, replication_.get(), "", W == 1);
      if (!stop_training) bar.update(int(done), logs);
      for (auto& cb : cfg.callbacks) cb->on_train_batch_end(int(done - 1), logs);
      s = done;
    }
    if (replication_ && R * W > 1) {  // per-replica statistics (BatchNormalization) agree again
      std::vector<VariablePtr> nt;
      for (auto& v : weights())
        if (!v->trainable) nt.push_back(v);
      replication_->average(nt);
    }
    double epoch_seconds = since(t0) - (compile_seconds_ - compile_before);
    hist.train_seconds += epoch_seconds;
    hist.input_wait_seconds += input_wait;
    if (replication_) {
      hist.allreduce_seconds += replication_->reducer().reduce_seconds();
      hist.allreduce_wait_seconds += replication_->reducer().wait_seconds();
    }
    if (logs.empty() || W > 1) logs = read_metrics(*this, replication_.get());
    if (cfg.validation_data.defined() && !hist.stopped_on_nan) {
      Logs v = cfg.validation_data.dataset.valid()
                   ? evaluate(cfg.validation_data.dataset, {.verbose = 0})
                   : evaluate(cfg.validation_data.x, cfg.validation_data.y,
                              {.batch_size = cfg.batch_size, .verbose = 0});
      for (auto& [k, val] : v) logs["val_" + k] = val;
    }
    if (cfg.verbose && !hist.stopped_on_nan) {
      bar.finish(logs);
      if (epoch_seconds > 0)
        std::printf("input wait: %.3f s (%.1f%% of step time)\n", input_wait,
                    100.0 * input_wait / epoch_seconds);
      std::fflush(stdout);
    }
    for (auto& [k, val] : logs) hist.history[k].push_back(val);
    logs["input_wait_seconds"] = input_wait;
    logs["input_wait_fraction"] = epoch_seconds > 0 ? input_wait / epoch_seconds : 0;
    hist.history["input_wait_seconds"].push_back(input_wait);
    hist.history["input_wait_fraction"].push_back(logs["input_wait_fraction"]);
    hist.epoch.push_back(epoch);
    for (auto& cb : cfg.callbacks) cb->on_epoch_end(epoch, logs);
  }
  for (auto& cb : cfg.callbacks) cb->on_train_end({});
  hist.compile_seconds = compile_seconds_;
  hist.samples = samples;
  hist.images_per_second = hist.train_seconds > 0 ? double(samples) / hist.train_seconds : 0;
  hist.input_wait_fraction =
      hist.train_seconds > 0 ? hist.input_wait_seconds / hist.train_seconds : 0;
  return hist;
}

Logs Model::evaluate_loop(Source& source, int verbose) {
  const int R = replication_ ? replication_->local_replicas() : 1;
  distribute::StrategyImpl* strategy = replication_ ? &replication_->strategy() : nullptr;
  if (strategy && !strategy->is_chief()) verbose = 0;
  if (replication_) replication_->sync_from_primary();
  reset_metrics(*this, replication_.get());
  source.begin_epoch(0);
  ProgressBar bar(int(std::max<int64_t>(source.steps(), 0)), verbose);
  std::vector<Program*> progs(static_cast<size_t>(R));
  // Several workers with arrays: each evaluates its rows of every batch (no step needs the
  // others; the metrics are summed over workers at the end).
  const bool split_rows =
      strategy && strategy->num_workers > 1 && dynamic_cast<TensorSource*>(&source) != nullptr;
  while (source.next()) {
    int64_t lo = 0, n = source.size();
    if (split_rows) {
      auto [a, b] = replica_rows(n, strategy->num_workers, strategy->worker_index);
      lo = a, n = b - a;
    }
    if (n == 0) continue;
    const int use = int(std::min<int64_t>(R, n));
    for (int r = 0; r < use; ++r) {
      auto [r0, r1] = replica_rows(n, use, r);
      Program& p = program("eval", r1 - r0, r);
      source.copy(lo + r0, lo + r1, p.x(), &p.y());
      progs[size_t(r)] = &p;
    }
    if (strategy && use > 1) {
      strategy->run_replicas([&](int r) {
        if (r < use) progs[size_t(r)]->run();
      });
    } else {
      for (int r = 0; r < use; ++r) progs[size_t(r)]->run();
    }
  }
  Logs logs = read_metrics(*this, replication_.get());
  if (verbose) bar.finish(logs);
  return logs;
}

Logs Model::evaluate(const Tensor& x, const Tensor& y_in, EvaluateConfig cfg) {
  LS_CHECK(compiled_, "Model '", name_, "': call compile() before evaluate()");
  LS_CHECK(cfg.batch_size >= 1, "evaluate: batch_size must be >= 1, got ", cfg.batch_size);
  Tensor y = check_model_data(*this, x, &y_in, "evaluate");
  TensorSource source(x, y, cfg.batch_size, false, 0, 0);
  return evaluate_loop(source, cfg.verbose);
}

Logs Model::evaluate(const data::Dataset& dataset, EvaluateConfig cfg) {
  LS_CHECK(compiled_, "Model '", name_, "': call compile() before evaluate()");
  data::Dataset ds = cfg.steps > 0 ? dataset.take(cfg.steps) : dataset;
  if (strategy_ && strategy_->num_workers > 1) {
    // Each worker evaluates its share (by file when the pipeline reads files, else by
    // element), in batches of about global / workers; the metrics are summed over workers.
    const int W = strategy_->num_workers, i = strategy_->worker_index;
    const data::ElementSpec spec = ds.probe_element_spec();
    LS_CHECK(!spec.components.empty() && spec.components[0].shape.rank() >= 1,
             "evaluate(Dataset): elements must be batched, got ", spec.str());
    const int64_t per_worker = std::max<int64_t>(1, spec.components[0].shape[0] / W);
    ds = distribute::shard_for_worker(ds, W, i, per_worker, distribute::AutoShardPolicy::AUTO);
  }
  DatasetSource source(*this, ds, true, false, "evaluate(Dataset)");
  return evaluate_loop(source, cfg.verbose);
}

void Model::predict_batch(Source& source, const std::function<void(int64_t, const Tensor&)>& take) {
  const int R = replication_ ? replication_->local_replicas() : 1;
  const int64_t b = source.size();
  const int use = int(std::min<int64_t>(R, b));
  std::vector<Program*> progs(static_cast<size_t>(use));
  std::vector<int64_t> first(static_cast<size_t>(use));
  for (int r = 0; r < use; ++r) {
    auto [r0, r1] = replica_rows(b, use, r);
    Program& p = program("predict", r1 - r0, r);
    source.copy(r0, r1, p.x(), nullptr);
    progs[size_t(r)] = &p, first[size_t(r)] = r0;
  }
  if (use > 1) {
    replication_->strategy().run_replicas([&](int r) {
      if (r < use) progs[size_t(r)]->run();
    });
  } else {
    progs[0]->run();
  }
  for (int r = 0; r < use; ++r) take(first[size_t(r)], progs[size_t(r)]->predictions());
}

Tensor Model::predict(const Tensor& x, int batch_size, int verbose) {
  check_model_data(*this, x, nullptr, "predict");
  LS_CHECK(batch_size >= 1, "predict: batch_size must be >= 1, got ", batch_size);
  if (replication_) replication_->sync_from_primary();
  const int64_t n = x.dim(0);
  TensorSource source(x, Tensor(), batch_size, false, 0, 0);
  source.begin_epoch(0);
  Tensor out;
  int64_t b0 = 0;
  while (source.next()) {
    predict_batch(source, [&](int64_t row, const Tensor& pr) {
      if (!out.defined()) out = Tensor::empty(pr.shape().with_dim(0, n), pr.dtype());
      const size_t row_bytes = pr.nbytes() / size_t(pr.dim(0));
      std::memcpy(static_cast<char*>(out.raw()) + size_t(b0 + row) * row_bytes, pr.raw(),
                  pr.nbytes());
    });
    b0 += source.size();
  }
  return out;
}

Tensor Model::predict(const data::Dataset& dataset, int verbose) {
  if (replication_) replication_->sync_from_primary();
  DatasetSource source(*this, dataset, false, false, "predict(Dataset)");
  source.begin_epoch(0);
  std::vector<Tensor> parts;  // in row order: replicas hand their parts in order
  int64_t total = 0;
  while (source.next()) {
    predict_batch(source, [&](int64_t, const Tensor& pr) { parts.push_back(pr.clone()); });
    total += source.size();
  }
  LS_CHECK(!parts.empty(), "predict(Dataset): the dataset yielded no batches");
  Tensor out = Tensor::empty(parts[0].shape().with_dim(0, total), parts[0].dtype());
  size_t off = 0;
  for (auto& t : parts) {
    std::memcpy(static_cast<char*>(out.raw()) + off, t.raw(), t.nbytes());
    off += t.nbytes();
  }
  return out;
}

}  // namespace lockstep
