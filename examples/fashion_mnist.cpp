// The reference job: train the reference CNN on Fashion-MNIST, print the summary, per-epoch
// progress and test accuracy, and end with one JSON line of results.
//   build/bin/fashion_mnist [--epochs N] [--batch-size N] [--threads N] [--data-dir DIR] [--seed N]
//       [--strategy one_device|mirrored|multi_worker] [--bytes-per-pack N]
//       [--device cpu|xla:cpu|xla:PLUGIN]   (xla: the whole step compiled by XLA via PJRT)
//       [--replicas N]   (with xla: one replica per device, TPUStrategy's way: XlaStrategy)
//       [--dtype-policy float32|mixed_bfloat16] [--all-reduce-dtype float32|bfloat16]
//       [--out-dir DIR] [--tensorboard LOGDIR] [--csv FILE]
//       [--report FILE.json] [--price-per-hour X | --prices FILE.json --machine NAME]
//       [--backup-dir DIR] [--train-samples N] [--test-samples N] [--wait-for-signal-at K]
// Writes <out-dir>/curves.png (loss and accuracy per epoch, training and test); --tensorboard
// writes TensorBoard event files (tensorboard --logdir LOGDIR), --csv the epoch logs as CSV.
// --report writes the time-and-cost report (FILE.json and FILE.png: time and dollars to 85/90/91%
// test accuracy) at --price-per-hour X or the named machine's price in a --prices table.
// --batch-size is the global batch (split across replicas). multi_worker reads the cluster from
// TF_CONFIG, or the MPI (mpirun) or Slurm (srun) environment; only the chief prints the JSON line.
// SIGTERM or SIGINT (a preemptible machine going away, Ctrl-C) stops training after the running
// step; with --backup-dir DIR the BackupAndRestore state is written there (at every epoch end
// too), and the program exits with status 75 (lockstep/trainers/preemption.h): the same command
// again resumes from DIR. --train-samples / --test-samples use the first N images (quick runs);
// --wait-for-signal-at K waits after training step K until a signal arrives (the preemption
// test's way to signal mid-epoch at a known step).
#include <signal.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/device_flag.h"
#include "lockstep/core/parse.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/lockstep.h"
#include "reference_cnn.h"

namespace ls = lockstep;

struct Args {
  int epochs = 5, batch_size = 128, threads = 0;
  std::string data_dir;
  uint64_t seed = 42;
  int steps_per_execution = 1;
  bool verbose_compile = false;
  std::string strategy;        // "" = no strategy (the plain single-device loop)
  std::string device = "cpu";  // cpu | xla:cpu | xla:PLUGIN (examples/cli/device_flag.h)
  int replicas = 1;            // --replicas N with --device xla:PLUGIN: XlaStrategy on N devices
  std::string all_reduce_dtype = "float32";
  long long bytes_per_pack = -1;
  std::string out_dir = "fashion_mnist_out", tensorboard, csv;
  std::string dtype_policy = "float32";
  // --report FILE.json, --prices FILE.json, --machine NAME
  std::string report, prices, machine;
  double price_per_hour = 0;
  // Time to accuracy: evaluate on the test set K times per epoch (every ceil(steps/K) steps)
  // and report the training seconds (evaluation excluded) until test accuracy first reaches
  // --target-accuracy.
  int evals_per_epoch = 1;
  double target_accuracy = 0.91;
  std::string backup_dir;                       // --backup-dir: BackupAndRestore there
  int64_t train_samples = 0, test_samples = 0;  // the first N images (0: all)
  int wait_for_signal_at = 0;                   // the preemption test's hook
};

static void usage() {
  std::fprintf(
      stderr,
      "usage: fashion_mnist [--epochs N] [--batch-size N] [--threads N] [--data-dir DIR] "
      "[--seed N] [--steps-per-execution N] [--verbose-compile]\n"
      "       [--device cpu|xla:cpu|xla:PLUGIN] [--replicas N (xla: one replica per "
      "device, the batch split across them)]\n"
      "       [--strategy one_device|mirrored|multi_worker] [--bytes-per-pack N]\n"
      "       [--out-dir DIR] [--tensorboard LOGDIR] [--csv FILE]\n"
      "       [--dtype-policy float32|mixed_bfloat16] [--all-reduce-dtype "
      "float32|bfloat16]\n"
      "       [--report FILE.json] [--price-per-hour X]\n"
      "       [--prices FILE.json --machine NAME]\n"
      "       [--evals-per-epoch K] [--target-accuracy A]\n"
      "       [--backup-dir DIR] [--train-samples N] [--test-samples N]\n"
      "       [--wait-for-signal-at K]\n"
      "SIGTERM/SIGINT: stops after the running step, writes the --backup-dir backup, exits "
      "with status 75\n(run the same command again to resume).\n");
}

static Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "fashion_mnist: %s needs a value\n", k.c_str());
        usage();
        std::exit(2);
      }
      return argv[++i];
    };
    auto num = [&](int64_t lo, int64_t hi) { return ls::parse_int(k, next(), lo, hi); };
    if (k == "--epochs")
      a.epochs = int(num(0, 1000000));
    else if (k == "--batch-size")
      a.batch_size = int(num(1, int64_t(1) << 24));
    else if (k == "--threads")
      a.threads = ls::parse_thread_count(k, next());
    else if (k == "--data-dir")
      a.data_dir = next();
    else if (k == "--seed")
      a.seed = uint64_t(num(0, INT64_MAX));
    else if (k == "--steps-per-execution")
      a.steps_per_execution = int(num(1, 1 << 20));
    else if (k == "--verbose-compile")
      a.verbose_compile = true;
    else if (k == "--strategy")
      a.strategy = next();
    else if (k == "--device")
      a.device = next();
    else if (k == "--replicas")
      a.replicas = int(num(1, 1 << 16));
    else if (k == "--bytes-per-pack")
      a.bytes_per_pack = num(0, int64_t(1) << 40);
    else if (k == "--out-dir")
      a.out_dir = next();
    else if (k == "--tensorboard")
      a.tensorboard = next();
    else if (k == "--csv")
      a.csv = next();
    else if (k == "--report")
      a.report = next();
    else if (k == "--price-per-hour")
      a.price_per_hour = ls::parse_double(k, next(), 0.0, 1e9);
    else if (k == "--prices")
      a.prices = next();
    else if (k == "--machine")
      a.machine = next();
    else if (k == "--dtype-policy")
      a.dtype_policy = next();
    else if (k == "--all-reduce-dtype")  // multi_worker: gradients cross workers as bf16
      a.all_reduce_dtype = next();
    else if (k == "--evals-per-epoch")
      a.evals_per_epoch = int(num(1, 1000));
    else if (k == "--target-accuracy")
      a.target_accuracy = ls::parse_double(k, next(), 0.0, 1.0);
    else if (k == "--backup-dir")
      a.backup_dir = next();
    else if (k == "--train-samples")
      a.train_samples = num(1, INT64_MAX);
    else if (k == "--test-samples")
      a.test_samples = num(1, INT64_MAX);
    else if (k == "--wait-for-signal-at")
      a.wait_for_signal_at = int(num(1, INT32_MAX));
    else if (k == "--help" || k == "-h")
      usage(), std::exit(0);
    else {
      std::fprintf(stderr, "fashion_mnist: unknown argument '%s'\n", k.c_str());
      usage();
      std::exit(2);
    }
  }
  if (!a.strategy.empty() && a.strategy != "one_device" && a.strategy != "mirrored" &&
      a.strategy != "multi_worker") {
    std::fprintf(
        stderr,
        "fashion_mnist: --strategy must be one_device, mirrored or multi_worker, got '%s'\n",
        a.strategy.c_str());
    std::exit(2);
  }
  if (a.replicas > 1 && !a.strategy.empty()) {
    std::fprintf(stderr,
                 "fashion_mnist: --replicas (XlaStrategy on the devices of --device xla:...) "
                 "and --strategy are two strategies; give one\n");
    std::exit(2);
  }
  return a;
}

// The logging callbacks the flags ask for (the chief's: other workers write nothing).
static std::vector<ls::CallbackPtr> log_callbacks(const Args& a, bool chief) {
  std::vector<ls::CallbackPtr> cbs;
  if (!a.tensorboard.empty()) cbs.push_back(ls::callbacks::TensorBoard({.log_dir = a.tensorboard}));
  if (!a.csv.empty() && chief) cbs.push_back(ls::callbacks::CSVLogger(a.csv));
  return cbs;
}

// <out-dir>/curves.png: the History's training curves with the per-epoch test results as the
// second line.
static void write_curves(const Args& a, ls::History hist, std::vector<double> test_loss,
                         std::vector<double> test_accuracy) {
  std::filesystem::create_directories(a.out_dir);
  hist.history["val_loss"] = std::move(test_loss);
  hist.history["val_accuracy"] = std::move(test_accuracy);
  const std::string path = (std::filesystem::path(a.out_dir) / "curves.png").string();
  ls::viz::save_history_plot(hist.history, path,
                             {.title = "Fashion-MNIST, reference CNN", .validation_label = "test"});
  std::printf("wrote %s\n", path.c_str());
}

static double peak_rss_mb() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;
}

int main(int argc, char** argv) {
  Args args;
  try {
    args = parse(argc, argv);
  } catch (const std::exception& e) {  // a flag's value: lockstep::parse_int says which and why
    std::fprintf(stderr, "fashion_mnist: %s\n", e.what());
    usage();
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);  // multi_worker: a dying peer must not kill this worker
  // SIGTERM/SIGINT: fit stops after the running step (writing the backup) and throws
  // TrainingPreempted, which main turns into exit status 75.
  ls::install_preemption_handler();
  try {
    if (args.threads > 0) ls::set_num_threads(args.threads);
    ls::set_random_seed(args.seed);
    ls::mixed_precision::set_global_policy(args.dtype_policy);  // before the model is built
    namespace dist = ls::distribute;
    dist::StrategyOptions opts;
    if (args.bytes_per_pack >= 0) opts.bytes_per_pack = args.bytes_per_pack;
    opts.all_reduce_dtype = ls::dtype_from_name(args.all_reduce_dtype);
    dist::Strategy strategy = args.replicas > 1
                                  ? ls::cli::replica_strategy(args.device, args.replicas)
                                  : dist::strategy_from_name(args.strategy, opts);
    const bool chief = strategy.is_chief();
    if (!chief && !std::freopen("/dev/null", "w", stdout)) return 1;  // only the chief reports
    auto data = ls::data::load_fashion_mnist(args.data_dir);
    if (args.train_samples > 0 && args.train_samples < data.x_train.dim(0)) {
      data.x_train = data.x_train.slice(0, args.train_samples);
      data.y_train = data.y_train.slice(0, args.train_samples);
    }
    if (args.test_samples > 0 && args.test_samples < data.x_test.dim(0)) {
      data.x_test = data.x_test.slice(0, args.test_samples);
      data.y_test = data.y_test.slice(0, args.test_samples);
    }
    std::printf("Fashion-MNIST: %lld training and %lld test images from %s\n",
                (long long)data.x_train.dim(0), (long long)data.x_test.dim(0),
                ls::data::fashion_mnist_dir(args.data_dir).c_str());
    if (strategy.impl())
      std::printf("Strategy: %s, %d replicas in sync (%d workers)\n", strategy.name().c_str(),
                  strategy.num_replicas_in_sync(), strategy.num_workers());
    ls::Model model;
    {
      std::optional<dist::Strategy::Scope> scope;
      if (strategy.impl()) scope.emplace(strategy.impl());
      model = reference_cnn();
      model.compile({.optimizer = ls::optimizers::Adam(1e-3),
                     .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                     .metrics = {"accuracy"},
                     .steps_per_execution = args.steps_per_execution,
                     .backend = ls::cli::backend_for_device(args.device),
                     .verbose_compile = args.verbose_compile});
    }
    model.step_memory(args.batch_size);  // the train step, compiled: its memory in the summary
    model.summary();
    double test_acc = 0, best_acc = 0;
    int best_epoch = 0;
    std::vector<double> test_losses, test_accs;  // per epoch, for curves.png
    // Time to accuracy: training seconds (wall time since training began, less the time spent
    // evaluating) when the test accuracy first reaches the target; -1 if never.
    using Clock = std::chrono::steady_clock;
    Clock::time_point train_start{};
    double eval_seconds = 0, time_to_target = -1, epochs_to_target = -1;
    const int64_t steps_per_epoch = (data.x_train.dim(0) + args.batch_size - 1) / args.batch_size;
    const int64_t eval_every = (steps_per_epoch + args.evals_per_epoch - 1) / args.evals_per_epoch;
    auto evaluate = [&](double epochs_done) {
      const auto t0 = Clock::now();
      auto r = model.evaluate(data.x_test, data.y_test, {.batch_size = 512, .verbose = 0});
      const auto t1 = Clock::now();
      const double trained = std::chrono::duration<double>(t0 - train_start).count() - eval_seconds;
      eval_seconds += std::chrono::duration<double>(t1 - t0).count();
      if (time_to_target < 0 && r["accuracy"] >= args.target_accuracy) {
        time_to_target = trained;
        epochs_to_target = epochs_done;
        std::printf("reached test accuracy %.4f >= %.4f after %.2f epochs, %.1f s of training\n",
                    r["accuracy"], args.target_accuracy, epochs_done, trained);
      }
      return r;
    };
    int current_epoch = 0;
    ls::LambdaHooks eval_hooks;
    eval_hooks.on_train_begin = [&](const ls::Logs&) { train_start = Clock::now(); };
    eval_hooks.on_epoch_begin = [&](int epoch, const ls::Logs&) { current_epoch = epoch; };
    eval_hooks.on_train_batch_end = [&](int batch, const ls::Logs&) {
      // The in-epoch evaluations; the epoch's last one is test_cb's.
      if (args.evals_per_epoch > 1 && (batch + 1) % eval_every == 0 &&
          batch + 1 < steps_per_epoch) {
        auto r = evaluate(current_epoch + double(batch + 1) / double(steps_per_epoch));
        std::printf("  epoch %.2f: test_accuracy %.4f\n",
                    current_epoch + double(batch + 1) / double(steps_per_epoch), r["accuracy"]);
      }
    };
    auto test_cb = ls::callbacks::LambdaCallback([&](int epoch, const ls::Logs&) {
      auto r = evaluate(epoch + 1);
      test_acc = r["accuracy"];
      if (test_acc > best_acc) best_acc = test_acc, best_epoch = epoch + 1;
      test_losses.push_back(r["loss"]), test_accs.push_back(test_acc);
      std::printf("epoch %d: test_loss %.4f - test_accuracy %.4f\n", epoch + 1, r["loss"],
                  test_acc);
      std::fflush(stdout);
    });
    auto callbacks = log_callbacks(args, chief);
    callbacks.insert(callbacks.begin(), test_cb);
    callbacks.insert(callbacks.begin(), ls::callbacks::LambdaCallback(eval_hooks));
    if (!args.report.empty())  // after test_cb, which sets test_acc; writes on the chief only
      callbacks.push_back(ls::callbacks::CostReport(
          {.path = args.report,
           .monitor = "test_accuracy",
           .monitor_fn = [&test_acc](int, const ls::Logs&) { return test_acc; },
           .price_per_hour = args.price_per_hour,
           .prices_file = args.prices,
           .machine = args.machine}));
    if (!args.backup_dir.empty())  // resumes from DIR when a preempted run left a backup there
      callbacks.push_back(ls::callbacks::BackupAndRestore(args.backup_dir));
    int steps_run = 0;
    if (args.wait_for_signal_at > 0)  // the preemption test: a signal mid-epoch, at a known step
      callbacks.push_back(ls::callbacks::LambdaCallback({}, [&](int, const ls::Logs&) {
        if (++steps_run != args.wait_for_signal_at) return;
        std::fprintf(stderr, "waiting for a signal after step %d\n", steps_run);
        std::fflush(stderr);
        for (int i = 0; i < 120000 && ls::preemption_signal() == 0; ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }));
    auto hist = model.fit(data.x_train, data.y_train,
                          {.batch_size = args.batch_size,
                           .epochs = args.epochs,
                           .callbacks = callbacks,
                           .seed = args.seed});
    if (hist.stopped_on_nan) {
      std::fprintf(stderr, "fashion_mnist: %s\n", hist.stop_reason.c_str());
      return 1;
    }
    if (chief && args.epochs > 0) write_curves(args, hist, test_losses, test_accs);
    if (!strategy.impl()) {
      std::printf(
          "{\"test_accuracy\": %.4f, \"best_test_accuracy\": %.4f, \"best_epoch\": %d, "
          "\"epochs\": %d, \"train_images_per_sec\": %.1f, "
          "\"compile_seconds\": %.3f, \"peak_rss_mb\": %.1f, \"target_accuracy\": %.4f, "
          "\"evals_per_epoch\": %d, \"epochs_to_target\": %.2f, "
          "\"seconds_to_target\": %.1f}\n",
          test_acc, best_acc, best_epoch, args.epochs, hist.images_per_second, hist.compile_seconds,
          peak_rss_mb(), args.target_accuracy, args.evals_per_epoch, epochs_to_target,
          time_to_target);
    } else if (chief) {  // images/s: the whole cluster's samples per second
      double hidden = hist.allreduce_seconds > 0
                          ? 1.0 - hist.allreduce_wait_seconds / hist.allreduce_seconds
                          : 0;
      std::printf(
          "{\"test_accuracy\": %.4f, \"best_test_accuracy\": %.4f, \"best_epoch\": %d, "
          "\"epochs\": %d, \"train_images_per_sec\": %.1f, "
          "\"compile_seconds\": %.3f, \"peak_rss_mb\": %.1f, \"replicas\": %d, \"workers\": %d, "
          "\"allreduce_hidden_fraction\": %.3f}\n",
          test_acc, best_acc, best_epoch, args.epochs, hist.images_per_second * hist.workers,
          hist.compile_seconds, peak_rss_mb(), hist.replicas, hist.workers, hidden);
    }
    return 0;
  } catch (const ls::TrainingPreempted& e) {  // SIGTERM/SIGINT: resumable with --backup-dir
    std::fprintf(stderr, "fashion_mnist: %s (exit status %d)\n", e.what(), ls::kPreemptedExitCode);
    return ls::kPreemptedExitCode;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fashion_mnist: error: %s\n", e.what());
    return 1;
  }
}
