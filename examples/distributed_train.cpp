// A small, deterministic distributed training job: a tiny CNN on synthetic data under any
// strategy, ending with its weights in a checkpoint file and one JSON line. It is the smallest
// multi-worker example, and the equivalence / fault tests run it as worker processes.
//   distributed_train --strategy one_device|mirrored|multi_worker [--epochs N] [--batch N]
//       [--samples N] [--sync-bn] [--dataset] [--nan-sample K] [--out FILE] [--backup-dir DIR]
//       [--backup-freq epoch|N] [--step-delay-ms N] [--wait-for-signal-at K] [--units N]
//       [--replicas-per-worker N] [--timeout-ms N] [--deterministic]
//       [--all-reduce-dtype float32|bfloat16] [--steps-per-execution N] [--xla-devices N]
// multi_worker reads the cluster from TF_CONFIG, or the MPI / Slurm environment. SIGTERM or
// SIGINT stops training after the running step, writes the --backup-dir backup and exits with
// status 75 (lockstep/trainers/preemption.h); a rerun resumes.
#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "lockstep/core/parse.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/distribute/xla_strategy.h"
#include "lockstep/io/checkpoint.h"
#include "lockstep/lockstep.h"
#include "lockstep/saving/checkpoint.h"
#include "lockstep/trainers/preemption.h"

namespace ls = lockstep;
namespace dist = lockstep::distribute;

static const char* kUsage =
    "usage: distributed_train --strategy one_device|mirrored|multi_worker [--epochs N] [--batch "
    "N]\n"
    "       [--samples N] [--sync-bn] [--dataset] [--nan-sample K] [--out FILE] [--backup-dir "
    "DIR]\n"
    "       [--backup-freq epoch|N] [--step-delay-ms N] [--wait-for-signal-at K] [--units N]\n"
    "       [--replicas-per-worker N] [--timeout-ms N] [--deterministic]\n"
    "       [--all-reduce-dtype float32|bfloat16] [--steps-per-execution N] [--xla-devices N]\n"
    "SIGTERM/SIGINT: stops after the running step, writes the backup, exits with status 75.\n";

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);  // a dying peer must not kill this worker
  ls::install_preemption_handler();
  std::string strategy_name = "one_device", out, backup_dir, backup_freq = "1";
  int wait_for_signal_at = 0;  // after this step (counted over the run from 1): wait for one
  int epochs = 2, batch = 16, samples = 96, delay_ms = 0, timeout_ms = 10000;
  int units = 16;               // the hidden Dense layer's width (the mismatch tests vary it)
  int replicas_per_worker = 1;  // multi_worker: local replicas per worker
  int steps_per_execution = 1;  // CompileConfig::steps_per_execution
  int xla_devices = 0;          // > 0: XlaStrategy on this many CPU-plugin devices per worker
  bool sync_bn = false;         // a BatchNormalization(synchronized=true) after the convolution
  bool dataset = false;         // fit a Dataset (unshuffled global batches) instead of arrays
  int nan_sample = -1;          // a NaN in this sample, and a linear model (stop-on-NaN tests)
  bool deterministic = false;   // op determinism, and a RandomFlip and a Dropout in the model
  ls::DType all_reduce_dtype = ls::DType::f32;  // bfloat16: gradients cross workers as bf16
  try {
    for (int i = 1; i < argc; ++i) {
      std::string k = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc)
          std::fprintf(stderr, "distributed_train: %s needs a value\n", k.c_str()), std::exit(2);
        return argv[++i];
      };
      auto num = [&](int64_t lo, int64_t hi) { return int(ls::parse_int(k, next(), lo, hi)); };
      if (k == "--help" || k == "-h")
        std::fputs(kUsage, stdout), std::exit(0);
      else if (k == "--strategy")
        strategy_name = next();
      else if (k == "--epochs")
        epochs = num(0, 1000000);
      else if (k == "--batch")
        batch = num(1, 1 << 24);
      else if (k == "--samples")
        samples = num(1, 1 << 24);
      else if (k == "--sync-bn")
        sync_bn = true;
      else if (k == "--dataset")
        dataset = true;
      else if (k == "--nan-sample")
        nan_sample = num(-1, INT32_MAX);
      else if (k == "--out")
        out = next();
      else if (k == "--backup-dir")
        backup_dir = next();
      else if (k == "--backup-freq")
        backup_freq = next();
      else if (k == "--wait-for-signal-at")
        wait_for_signal_at = num(0, INT32_MAX);
      else if (k == "--step-delay-ms")
        delay_ms = num(0, 24 * 3600 * 1000);
      else if (k == "--units")
        units = num(1, 1 << 16);
      else if (k == "--replicas-per-worker")
        replicas_per_worker = num(1, 64);
      else if (k == "--timeout-ms")
        timeout_ms = num(1, 24 * 3600 * 1000);
      else if (k == "--steps-per-execution")
        steps_per_execution = num(1, 1000);
      else if (k == "--deterministic")
        deterministic = true;
      else if (k == "--xla-devices")
        xla_devices = num(1, 64);
      else if (k == "--all-reduce-dtype")
        all_reduce_dtype = ls::dtype_from_name(next());
      else
        std::fprintf(stderr, "distributed_train: unknown argument '%s'\n%s", k.c_str(), kUsage),
            std::exit(2);
    }
  } catch (const std::exception& e) {  // a flag's value: lockstep::parse_int says which and why
    std::fprintf(stderr, "distributed_train: %s\n", e.what());
    return 2;
  }
  try {
    dist::StrategyOptions opts;
    opts.communication.timeout = std::chrono::milliseconds(timeout_ms);
    opts.replicas_per_worker = replicas_per_worker;
    opts.all_reduce_dtype = all_reduce_dtype;
    // mirrored: always two replicas (the equivalence tests compare against exactly two).
    dist::Strategy strategy;
    if (xla_devices > 0) {  // one_device: one worker; multi_worker: the TF_CONFIG cluster
      auto devices = dist::XlaClusterResolver::connect("cpu", xla_devices);
      strategy = strategy_name == "multi_worker"
                     ? dist::XlaStrategy(devices, dist::ClusterResolver::from_environment(), opts)
                     : dist::XlaStrategy(devices, opts);
    } else {
      strategy = strategy_name == "mirrored" ? dist::MirroredStrategy({"cpu:0", "cpu:1"}, opts)
                                             : dist::strategy_from_name(strategy_name, opts);
    }
    if (!strategy.impl()) throw ls::Error("--strategy is required");

    // Synthetic data, identical on every worker (the strategy shards the global batches).
    ls::Tensor x = ls::Tensor::empty(ls::Shape{samples, 8, 8, 2});
    ls::Tensor y = ls::Tensor::empty(ls::Shape{samples}, ls::DType::i32);
    ls::Philox rng(11);
    for (int64_t i = 0; i < samples; ++i) {
      int c = int(rng.next_u32() % 3);
      y.data<int32_t>()[i] = c;
      for (int k = 0; k < 128; ++k)
        x.data<float>()[i * 128 + k] = (k % 3 == c ? 0.7f : 0.f) + 0.3f * rng.uniform();
    }
    if (nan_sample >= 0 && nan_sample < samples) x.data<float>()[nan_sample * 128] = std::nanf("");
    if (deterministic) ls::config::enable_op_determinism();
    ls::set_random_seed(3);
    ls::Model model;
    {
      auto scope = strategy.scope();
      using namespace ls::layers;
      if (nan_sample >= 0)  // linear, so the NaN reaches the loss (a ReLU would zero it)
        model = ls::Sequential({Input({8, 8, 2}), Flatten(), Dense(3)});
      else if (sync_bn)
        model = ls::Sequential({Input({8, 8, 2}), Conv2D(4, 3, {.use_bias = false}),
                                BatchNormalization({.synchronized = true}), Activation("relu"),
                                MaxPooling2D({2, 2}), Flatten(),
                                Dense(units, {.activation = "relu"}), Dense(3)});
      else if (deterministic)  // every random op keyed by the example's global row
        model =
            ls::Sequential({Input({8, 8, 2}), RandomFlip("horizontal", 3),
                            Conv2D(4, 3, {.activation = "relu"}), MaxPooling2D({2, 2}), Flatten(),
                            Dropout(0.25, 5), Dense(units, {.activation = "relu"}), Dense(3)});
      else
        model = ls::Sequential({Input({8, 8, 2}), Conv2D(4, 3, {.activation = "relu"}),
                                MaxPooling2D({2, 2}), Flatten(),
                                Dense(units, {.activation = "relu"}), Dense(3)});
      model.compile({.optimizer = ls::optimizers::Adam(0.01),
                     .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                     .metrics = {"accuracy"},
                     .steps_per_execution = steps_per_execution});
    }
    std::vector<ls::CallbackPtr> cbs;
    std::variant<std::string, int64_t> save_freq = backup_freq;  // "epoch", or every N steps
    if (backup_freq != "epoch")
      save_freq = ls::parse_int("--backup-freq", backup_freq, 1, INT32_MAX);
    if (!backup_dir.empty()) cbs.push_back(ls::callbacks::BackupAndRestore(backup_dir, save_freq));
    int steps_run = 0;
    if (wait_for_signal_at > 0)  // the preemption test: a signal mid-epoch, at a known step
      cbs.push_back(ls::callbacks::LambdaCallback({}, [&](int, const ls::Logs&) {
        if (++steps_run != wait_for_signal_at) return;
        std::fprintf(stderr, "waiting for a signal after step %d\n", steps_run);
        std::fflush(stderr);
        for (int i = 0; i < 120000 && ls::preemption_signal() == 0; ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }));
    if (delay_ms > 0)
      cbs.push_back(ls::callbacks::LambdaCallback({}, [&](int, const ls::Logs&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      }));
    const auto ds = ls::data::Dataset::from_tensor_slices({x, y}).batch(batch);
    auto hist = dataset
                    ? model.fit(ds, {.epochs = epochs, .verbose = 0, .callbacks = cbs, .seed = 5})
                    : model.fit(x, y,
                                {.batch_size = batch,
                                 .epochs = epochs,
                                 .verbose = 0,
                                 .callbacks = cbs,
                                 .seed = 5});
    // Evaluated the same way (each worker on its share, metrics summed over workers).
    auto eval = dataset ? model.evaluate(ds, {.verbose = 0})
                        : model.evaluate(x, y, {.batch_size = batch, .verbose = 0});
    std::fprintf(stderr, "worker %d trained on %lld samples\n", strategy.worker_index(),
                 (long long)hist.samples);
    if (hist.stopped_on_nan)
      std::fprintf(stderr, "worker %d: %s\n", strategy.worker_index(), hist.stop_reason.c_str());
    if (!out.empty()) ls::train::Checkpoint(model).save(out);
    if (strategy.is_chief())
      std::printf(
          "{\"loss\": %.6f, \"accuracy\": %.4f, \"eval_loss\": %.6f, \"eval_accuracy\": %.4f, "
          "\"replicas\": %d, \"workers\": %d}\n",
          hist.history["loss"].empty() ? 0.0 : hist.history["loss"].back(),
          hist.history["accuracy"].empty() ? 0.0 : hist.history["accuracy"].back(), eval["loss"],
          eval["accuracy"], strategy.num_replicas_in_sync(), strategy.num_workers());
    return 0;
  } catch (const ls::TrainingPreempted& e) {
    std::fprintf(stderr, "distributed_train: %s (exit status %d)\n", e.what(),
                 ls::kPreemptedExitCode);
    return ls::kPreemptedExitCode;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "distributed_train: error: %s\n", e.what());
    return 1;
  }
}
