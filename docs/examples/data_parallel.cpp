// Synchronous data-parallel training (docs/distributed.md): the same program runs on one core
// group, on several replicas in one process, or as one worker of many processes and hosts.
//   build/bin/data_parallel [one_device|mirrored|multi_worker] [--epochs N] [--backup DIR]
// multi_worker reads the cluster from TF_CONFIG, or from mpirun's or srun's environment.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <lockstep/distribute/strategy.h>
#include <lockstep/lockstep.h>
#include <lockstep/tools/example_args.h>
namespace ls = lockstep;
namespace dist = ls::distribute;
using namespace ls::layers;

static const char kUsage[] =
    "usage: data_parallel [one_device|mirrored|multi_worker] [--epochs N] [--backup DIR]\n"
    "Trains a small CNN on Fashion-MNIST under a tf.distribute-style strategy (default\n"
    "mirrored); multi_worker reads the cluster from TF_CONFIG, mpirun or srun.\n"
    "  --epochs N    epochs to train (default 2)\n"
    "  --backup DIR  BackupAndRestore's folder: a restarted run resumes there (default backup)\n";

int main(int argc, char** argv) {
  const auto args = ls::tools::parse_example_args(argc, argv, kUsage, {"--epochs", "--backup"}, 1);
  const std::string name = args.positional_or(0, "mirrored");
  const std::string backup = args.value_or("--backup", "backup");
  const int epochs = int(args.integer("--epochs", 2, 0, 1000000));
  signal(SIGPIPE, SIG_IGN);  // a worker whose peer died reports it instead of being killed
  // docs: begin strategy
  dist::Strategy strategy = dist::strategy_from_name(name);  // tf.distribute.MirroredStrategy()...
  auto data = ls::data::load_fashion_mnist();  // every worker reads the same arrays
  ls::Model model;
  {
    auto scope = strategy.scope();  // models built and compiled here are replicated
    model = ls::Sequential({Input({28, 28, 1}), Conv2D(16, 3, {.activation = "relu"}),
                            MaxPooling2D(), Flatten(), Dense(10)});
    model.compile({.optimizer = ls::optimizers::Adam(1e-3),
                   .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                   .metrics = {"accuracy"}});
  }
  // batch_size is the global batch: 64 rows per replica, split across them every step.
  ls::History hist = model.fit(
      data.x_train, data.y_train,
      {.batch_size = 64 * strategy.num_replicas_in_sync(), .epochs = epochs, .verbose = 2,
       .callbacks = {ls::callbacks::BackupAndRestore(backup)}, .seed = 1});
  // docs: end strategy
  ls::Logs test = model.evaluate(data.x_test, data.y_test, {.verbose = 0});  // all workers
  if (strategy.is_chief())
    std::printf("%s: %d replicas on %d workers, test accuracy %.4f, %.0f img/s per worker\n",
                strategy.name().c_str(), strategy.num_replicas_in_sync(), strategy.num_workers(),
                test["accuracy"], hist.images_per_second);
  return 0;
}
