// The article's job on any folder of class subfolders of images ("flower_photos" layout):
// look at training samples (samples.png), print the model summary, train a small CNN with
// augmentation layers on a tf.data-style pipeline, test it (predictions.png), and end with one
// JSON line of results.
//
//   build/bin/flowers [--data-dir DIR] [--out-dir DIR] [--epochs N] [--batch-size N]
//                     [--threads N] [--seed N] [--image-size N] [--validation-split F]
//                     [--strategy one_device|mirrored|multi_worker]
//                     [--tensorboard LOGDIR] [--csv FILE]
//                     [--report FILE.json] [--price-per-hour X | --prices FILE.json --machine NAME]
//                     [--backbone mobilenet_v2|resnet50|efficientnet_b0] [--weights FILE]
//                     [--fine-tune-at LAYER --fine-tune-epochs N] [--save-backbone PREFIX]
//                     [--backup-dir DIR] [--wait-for-signal-at K]
//                     [--model cnn|vit] [--patch-size N]
//
// --model vit trains a small Vision Transformer from scratch instead of the CNN
// (examples/vit_model.h): patches of --patch-size (default 8) pixels embedded by a strided
// Conv2D, learned position embeddings, 4 pre-norm transformer encoder blocks (d = 128, 4 heads,
// GELU MLP of 256; the fused attention op), a last layer norm, the mean over the patches and a
// Dense head, after the CNN's augmentation layers.
//
// Transfer learning (--backbone): a keras.applications backbone (include_top=false, pooling
// "avg", at --image-size) with its preprocessing, frozen, under a new head (Dropout + Dense).
// Phase "head" trains the head for --epochs; with --fine-tune-at LAYER (a name or index in the
// backbone's layers) phase "fine-tune" unfreezes the backbone from that layer on (its
// BatchNormalization layers stay frozen, in inference mode, as Keras's guide does with
// training=False) and trains --fine-tune-epochs more at a 10x lower learning rate; compiling
// again keeps the weights. --weights FILE loads pretrained backbone weights (a Keras
// .weights.h5 of the same include_top=false backbone, or a legacy Keras 2 .h5 read by layer
// name, e.g. the published keras.applications *_notop.h5 files); without it the backbone starts
// from random weights, and the run says so. --save-backbone PREFIX writes the backbone's
// weights after each phase (PREFIX.head.weights.h5, PREFIX.fine-tune.weights.h5).
// Without --backbone, --weights / --fine-tune-at apply to the small CNN (--fine-tune-at then
// names a layer of it). Both phases show in the progress output, the curves (a dashed line
// where fine-tuning starts) and the cost report (per phase and in total).
//
// SIGTERM or SIGINT (a preemptible machine going away, Ctrl-C) stops training after the running
// step; with --backup-dir DIR the BackupAndRestore state is written there (at every epoch end
// too), and the program exits with status 75 (lockstep/trainers/preemption.h): the same command
// again resumes from DIR. (With --fine-tune-at, each phase has its own backup under DIR.)
// --wait-for-signal-at K waits after training step K until a signal arrives (the preemption
// test's way to signal mid-epoch at a known step).
//
// The training curves go to <out-dir>/curves.png; --tensorboard writes TensorBoard event files
// (tensorboard --logdir LOGDIR), --csv the epoch logs as CSV (CSVLogger). --report writes the
// time-and-cost report (CostReport: FILE.json and FILE.png, time and dollars to 85/90/91%
// validation accuracy) with the machine's price from --price-per-hour or a price table.
//
// multi_worker reads the cluster from TF_CONFIG, or the MPI / Slurm environment; fit shards
// the image files across the workers (each decodes only its share); only the chief writes the
// pictures and prints the results (give each worker its own --out-dir, or a shared --data-dir).
//
// Without --data-dir it exports Fashion-MNIST (Debian's dataset-fashion-mnist) once into
// <out-dir>/fashion_mnist_images as class folders of JPEG and PNG files and trains on those
// (tf_flowers cannot be downloaded here).
#include <signal.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/core/parse.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/lockstep.h"
#include "lockstep/tools/export.h"
#include "vit_model.h"

namespace ls = lockstep;
namespace fs = std::filesystem;

struct Args {
  std::string data_dir, out_dir = "flowers_out", strategy;
  int epochs = 10, batch_size = 32, threads = 0, image_size = 64;
  int64_t per_class = 600;  // images per class when exporting Fashion-MNIST
  uint64_t seed = 123;
  double validation_split = 0.2;
  std::string tensorboard, csv;  // --tensorboard LOGDIR, --csv FILE
  // --report FILE.json, --prices FILE.json, --machine NAME
  std::string report, prices, machine;
  double price_per_hour = 0;
  std::string dtype_policy = "float32";
  // Transfer learning: --weights FILE (a Keras .weights.h5 or legacy .h5, loaded by layer name),
  // --fine-tune-at LAYER (name or index in model.layers) and --fine-tune-epochs N.
  std::string weights, fine_tune_at;
  int fine_tune_epochs = 0;
  std::string backup_dir;      // --backup-dir: BackupAndRestore there
  int wait_for_signal_at = 0;  // the preemption test's hook
  std::string backbone;        // --backbone NAME: transfer learning on a keras.applications model
  std::string save_backbone;   // --save-backbone PREFIX
  std::string model = "cnn";   // --model cnn|vit
  int patch_size = 8;          // --patch-size: the ViT's patches
};

static void usage() {
  std::fprintf(
      stderr,
      "usage: flowers [--data-dir DIR] [--out-dir DIR] [--epochs N] [--batch-size N] "
      "[--threads N] [--seed N] [--image-size N] [--validation-split F] "
      "[--per-class N] [--strategy one_device|mirrored|multi_worker]\n"
      "       [--tensorboard LOGDIR] [--csv FILE] [--dtype-policy float32|mixed_bfloat16]\n"
      "       [--report FILE.json] [--price-per-hour X]\n"
      "       [--backbone mobilenet_v2|resnet50|efficientnet_b0] [--weights FILE]\n"
      "       [--fine-tune-at LAYER --fine-tune-epochs N] [--save-backbone PREFIX]\n"
      "       [--prices FILE.json --machine NAME]\n"
      "       [--backup-dir DIR] [--wait-for-signal-at K]\n"
      "       [--model cnn|vit] [--patch-size N]\n"
      "SIGTERM/SIGINT: stops after the running step, writes the --backup-dir backup, exits with "
      "status 75\n(run the same command again to resume).\n");
}

[[noreturn]] static void fail(const std::string& msg) {
  std::fprintf(stderr, "flowers: %s\n", msg.c_str());
  usage();
  std::exit(2);
}

static Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--help" || k == "-h") usage(), std::exit(0);
    if (i + 1 >= argc) fail(k + " needs a value (or is unknown)");
    std::string v = argv[++i];
    auto num = [&](int64_t lo, int64_t hi) { return ls::parse_int(k, v, lo, hi); };
    if (k == "--data-dir")
      a.data_dir = v;
    else if (k == "--out-dir")
      a.out_dir = v;
    else if (k == "--epochs")
      a.epochs = int(num(0, 1000000));
    else if (k == "--batch-size")
      a.batch_size = int(num(1, int64_t(1) << 24));
    else if (k == "--threads")
      a.threads = ls::parse_thread_count(k, v);
    else if (k == "--seed")
      a.seed = uint64_t(num(0, INT64_MAX));
    else if (k == "--image-size")
      a.image_size = int(num(8, 4096));
    else if (k == "--strategy") {
      a.strategy = v;
      if (v != "one_device" && v != "mirrored" && v != "multi_worker")
        fail("--strategy must be one_device, mirrored or multi_worker, got '" + v + "'");
    } else if (k == "--per-class")
      a.per_class = num(1, int64_t(1) << 40);
    else if (k == "--validation-split") {
      a.validation_split = ls::parse_double(k, v, 0.0, 1.0);
      if (a.validation_split <= 0 || a.validation_split >= 1)
        fail("--validation-split must be in (0, 1), got '" + v + "'");
    } else if (k == "--tensorboard")
      a.tensorboard = v;
    else if (k == "--csv")
      a.csv = v;
    else if (k == "--report")
      a.report = v;
    else if (k == "--price-per-hour")
      a.price_per_hour = ls::parse_double(k, v, 0.0, 1e9);
    else if (k == "--prices")
      a.prices = v;
    else if (k == "--machine")
      a.machine = v;
    else if (k == "--weights")
      a.weights = v;
    else if (k == "--fine-tune-at")
      a.fine_tune_at = v;
    else if (k == "--fine-tune-epochs")
      a.fine_tune_epochs = int(num(0, 1000000));
    else if (k == "--dtype-policy")
      a.dtype_policy = v;
    else if (k == "--backup-dir")
      a.backup_dir = v;
    else if (k == "--wait-for-signal-at")
      a.wait_for_signal_at = int(num(1, INT32_MAX));
    else if (k == "--backbone") {
      if (v != "mobilenet_v2" && v != "resnet50" && v != "efficientnet_b0")
        fail("--backbone must be mobilenet_v2, resnet50 or efficientnet_b0, got '" + v + "'");
      a.backbone = v;
    } else if (k == "--save-backbone")
      a.save_backbone = v;
    else if (k == "--model") {
      if (v != "cnn" && v != "vit") fail("--model must be cnn or vit, got '" + v + "'");
      a.model = v;
    } else if (k == "--patch-size")
      a.patch_size = int(num(1, 4096));
    else
      fail("unknown argument '" + k + "'");
  }
  if (a.fine_tune_at.empty() != (a.fine_tune_epochs == 0))
    fail("--fine-tune-at and --fine-tune-epochs go together");
  if (!a.save_backbone.empty() && a.backbone.empty()) fail("--save-backbone needs --backbone");
  if (a.model == "vit" && !a.backbone.empty()) fail("--model vit and --backbone exclude each other");
  if (a.model == "vit" && a.image_size % a.patch_size != 0)
    fail("--model vit: --image-size " + std::to_string(a.image_size) +
         " is not a multiple of --patch-size " + std::to_string(a.patch_size));
  return a;
}

// --report's callback (writes on the chief only), or nullptr. One for the whole run: each
// phase of transfer learning calls begin_phase on it, so the report covers both and the total.
static std::shared_ptr<ls::CostReportCallback> cost_report(const Args& a) {
  if (a.report.empty()) return nullptr;
  return ls::callbacks::CostReport({.path = a.report,
                                    .price_per_hour = a.price_per_hour,
                                    .prices_file = a.prices,
                                    .machine = a.machine});
}

// The logging callbacks the flags ask for (the chief's: other workers write nothing).
// phase: the transfer-learning phase ("" without one); append: the fine-tuning phase's (the
// CSV log goes on after the first phase's rows).
static std::vector<ls::CallbackPtr> log_callbacks(
    const Args& a, bool chief, const std::shared_ptr<ls::CostReportCallback>& report,
    const std::string& phase = "", bool append = false) {
  std::vector<ls::CallbackPtr> cbs;
  if (!a.tensorboard.empty()) cbs.push_back(ls::callbacks::TensorBoard({.log_dir = a.tensorboard}));
  if (!a.csv.empty() && chief) cbs.push_back(ls::callbacks::CSVLogger(a.csv, ",", append));
  if (report) {
    if (!phase.empty()) report->begin_phase(phase);
    cbs.push_back(report);
  }
  return cbs;
}

static double peak_rss_mb() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;
}

// Exports Fashion-MNIST to class folders once; a marker file says the export finished, so an
// interrupted export is redone rather than trained on.
static std::string default_image_folder(const Args& a) {
  fs::path dir = fs::path(a.out_dir) / "fashion_mnist_images";
  fs::path done = dir / ".complete";
  if (fs::exists(done)) return dir.string();
  std::printf("flowers: no --data-dir; exporting %lld Fashion-MNIST images per class to %s\n",
              (long long)a.per_class, dir.string().c_str());
  fs::remove_all(dir);
  auto fm = ls::data::load_fashion_mnist();
  ls::tools::export_image_folder(fm.x_train, fm.y_train, ls::data::FashionMnist::class_names(),
                                 dir.string(), {.limit_per_class = a.per_class, .format = "mixed"});
  std::FILE* f = std::fopen(done.c_str(), "w");
  if (f) std::fclose(f);
  return dir.string();
}

// The article's model: augmentation, rescaling, three conv blocks, a dense head.
// docs: begin model
static ls::Model flowers_cnn(int size, int channels, int classes, uint64_t seed) {
  using namespace ls::layers;
  return ls::Sequential(
      {
          Input({size, size, channels}),
          RandomFlip("horizontal", seed),
          RandomRotation(0.1, {.seed = seed + 1}),
          RandomZoom(0.1, std::nullopt, {.seed = seed + 2}),
          Rescaling(1.0 / 255),
          Conv2D(16, 3, {.padding = "same", .activation = "relu"}),
          MaxPooling2D(),
          Conv2D(32, 3, {.padding = "same", .activation = "relu"}),
          MaxPooling2D(),
          Conv2D(64, 3, {.padding = "same", .activation = "relu"}),
          MaxPooling2D(),
          Dropout(0.2),
          Flatten(),
          Dense(128, {.activation = "relu"}),
          Dense(classes),
      },
      "flowers_cnn");
}
// docs: end model

// The transfer model: augmentation, the backbone's preprocessing, the backbone (a nested model,
// include_top=false, global average pooling), Dropout and a new Dense head (logits).
// docs: begin transfer
static ls::Model transfer_model(const ls::Model& base, const std::string& backbone, int size,
                                int classes, uint64_t seed) {
  using namespace ls::layers;
  ls::KTensor in = Input({size, size, 3});
  ls::KTensor x = RandomFlip("horizontal", seed)(in);
  x = RandomRotation(0.1, {.seed = seed + 1})(x);
  x = ls::applications::preprocess_input(backbone, x);  // Keras's, as layers on 0..255 pixels
  x = base(x);
  x = Dropout(0.2, seed + 2, "head_dropout")(x);
  return ls::Model(in, Dense(classes, {.name = "head"})(x), "flowers_" + backbone);
}
// docs: end transfer

// --fine-tune-at LAYER: its index in model.layers(), by name or as a number.
static size_t layer_index(const ls::Model& m, const std::string& layer) {
  const auto& layers = m.layers();
  for (size_t i = 0; i < layers.size(); ++i)
    if (layers[i]->name() == layer) return i;
  try {
    return size_t(ls::parse_int("--fine-tune-at", layer, 0, int64_t(layers.size()) - 1));
  } catch (const std::exception&) {
    LS_FAIL("--fine-tune-at '", layer, "': no layer of that name, nor an index in 0..",
            layers.size() - 1, " (`lockstep summary` lists the layers)");
  }
}

// Layers [0, from) frozen, the rest trainable (compile again for it to take effect).
static void freeze_before(ls::Model& m, size_t from) {
  for (size_t i = 0; i < m.layers().size(); ++i) m.layers()[i]->trainable = i >= from;
}

// The classifier head: the last layer with weights.
static size_t head_index(const ls::Model& m) {
  size_t head = 0;
  for (size_t i = 0; i < m.layers().size(); ++i)
    if (!m.layers()[i]->weights().empty()) head = i;
  return head;
}

// The fine-tuning phase's compile: the first phase's, at `learning_rate`.
static void compile(ls::Model& m, double learning_rate) {
  m.compile({.optimizer = ls::optimizers::Adam(learning_rate),
             .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy"}});
}

// --weights: a Keras weights file by layer name (the layers it lacks keep their initialisation).
static void load_pretrained(ls::Model& m, const std::string& path) {
  auto r = m.load_weights(path);
  std::printf("weights: %zu layers from %s", r.loaded.size(), path.c_str());
  if (!r.not_in_file.empty())
    std::printf(" (%zu not in the file keep their random initialisation, e.g. '%s')",
                r.not_in_file.size(), r.not_in_file[0].c_str());
  std::printf("\n");
}

// The number of weights (variables) and parameters of `m` that fit trains now.
static std::pair<size_t, int64_t> trained(const ls::Model& m) {
  int64_t params = 0;
  auto w = m.trainable_weights();
  for (auto& v : w) params += v->value.numel();
  return {w.size(), params};
}

// The backbone's weights (copies), to tell which ones a phase changed.
static std::vector<ls::Tensor> snapshot(const ls::Model& base) { return base.get_weights(); }

// How many of `before`'s tensors differ from the backbone's weights now (bit for bit).
static size_t changed_since(const ls::Model& base, const std::vector<ls::Tensor>& before) {
  auto now = base.get_weights();
  size_t n = 0;
  for (size_t i = 0; i < now.size(); ++i)
    n += std::memcmp(now[i].raw(), before[i].raw(), size_t(now[i].nbytes())) != 0;
  return n;
}

// Appends the fine-tuning phase's epochs to the first phase's history (one set of curves).
static void append_history(ls::History& all, const ls::History& more) {
  for (auto& [k, v] : more.history) all.history[k].insert(all.history[k].end(), v.begin(), v.end());
  all.epoch.insert(all.epoch.end(), more.epoch.begin(), more.epoch.end());
  all.train_seconds += more.train_seconds;
}

int main(int argc, char** argv) {
  Args args;
  try {
    args = parse(argc, argv);
  } catch (const std::exception& e) {  // a flag's value: lockstep::parse_int says which and why
    fail(e.what());
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
    dist::Strategy strategy = dist::strategy_from_name(args.strategy);
    const bool chief = strategy.is_chief();
    if (!chief && !std::freopen("/dev/null", "w", stdout)) return 1;  // only the chief reports
    if (strategy.impl())
      std::printf("Strategy: %s, %d replicas in sync (%d workers)\n", strategy.name().c_str(),
                  strategy.num_replicas_in_sync(), strategy.num_workers());
    fs::create_directories(args.out_dir);
    std::string data_dir = args.data_dir.empty() ? default_image_folder(args) : args.data_dir;

    // docs: begin dataset
    auto [train, val] = ls::data::image_dataset_from_directory(
        data_dir, {.validation_split = args.validation_split,
                   .subset = "both",
                   .seed = args.seed,
                   .image_size = {args.image_size, args.image_size},
                   .batch_size = args.batch_size});
    // docs: end dataset
    const auto& class_names = train.class_names();
    const int classes = int(class_names.size());

    // "Visualize the training samples".
    // docs: begin samples
    std::string samples = (fs::path(args.out_dir) / "samples.png").string();
    if (chief) {
      ls::viz::save_sample_grid(train, samples, {.rows = 3, .cols = 3});
      std::printf("wrote %s\n", samples.c_str());
    }
    // docs: end samples

    // Decoded images are cached in memory after the first epoch; shuffling happens inside
    // image_dataset_from_directory's file order and its per-epoch shuffle buffer.
    // docs: begin pipeline
    auto train_ds = train.cache().prefetch(ls::data::AUTOTUNE);
    auto val_ds = val.cache().prefetch(ls::data::AUTOTUNE);
    // docs: end pipeline

    // docs: begin compile
    ls::Model model, base;  // base: the --backbone model inside `model`
    const bool transfer = !args.backbone.empty();
    {
      std::optional<dist::Strategy::Scope> scope;
      if (strategy.impl()) scope.emplace(strategy.impl());
      if (transfer) {
        base = ls::applications::by_name(args.backbone,
                                         {.include_top = false,
                                          .input_shape = {args.image_size, args.image_size, 3},
                                          .pooling = "avg"});
        if (!args.weights.empty())
          load_pretrained(base, args.weights);
        else
          std::printf(
              "backbone %s: RANDOM initial weights (no --weights FILE given): this is "
              "training from scratch, not transfer learning\n",
              args.backbone.c_str());
        model = transfer_model(base, args.backbone, args.image_size, classes, args.seed);
        base.set_trainable(false);  // phase "head": the backbone frozen (BatchNorm in inference)
      } else {
        model = args.model == "vit"
                    ? vision_transformer({.image_size = args.image_size,
                                          .classes = classes,
                                          .patch = args.patch_size,
                                          .seed = args.seed})
                    : flowers_cnn(args.image_size, 3, classes, args.seed);
        if (!args.weights.empty()) load_pretrained(model, args.weights);
        if (args.fine_tune_epochs > 0) freeze_before(model, head_index(model));  // train the head
      }
      compile(model, 1e-3);
    }
    model.step_memory(args.batch_size);  // compiles the train step fit runs: its peak memory
    model.summary();                     // ... shows on the summary's last line
    // docs: end compile
    // --fine-tune-at, checked before the first phase trains: in the backbone's layers, or the
    // model's.
    const bool fine_tune = args.fine_tune_epochs > 0;
    const bool phased = transfer || fine_tune;
    const size_t fine_tune_from =
        fine_tune ? layer_index(transfer ? base : model, args.fine_tune_at) : 0;
    auto report = cost_report(args);
    const std::vector<ls::Tensor> base_before =
        transfer ? snapshot(base) : std::vector<ls::Tensor>{};
    if (phased) {
      auto [n, params] = trained(model);
      std::printf(
          "phase 1/%d 'head': training %s for %d epoch%s (%zu trainable weights, %lld "
          "parameters; the rest frozen)\n",
          fine_tune ? 2 : 1, transfer ? "the new head" : "the last layer", args.epochs,
          args.epochs == 1 ? "" : "s", n, (long long)params);
    }

    // --backup-dir: each phase's BackupAndRestore in its own folder (the second phase's fit
    // must not restore the first's state). A rerun after a preemption in the fine-tuning phase
    // repeats the first phase (its backup was deleted when it completed), then resumes the
    // second from its backup, which holds every weight.
    int steps_run = 0;
    auto phase_callbacks = [&](std::vector<ls::CallbackPtr> cbs, const char* phase) {
      if (!args.backup_dir.empty())
        cbs.push_back(
            ls::callbacks::BackupAndRestore((fs::path(args.backup_dir) / phase).string()));
      if (args.wait_for_signal_at > 0)  // the preemption test: a signal at a known step
        cbs.push_back(ls::callbacks::LambdaCallback({}, [&](int, const ls::Logs&) {
          if (++steps_run != args.wait_for_signal_at) return;
          std::fprintf(stderr, "waiting for a signal after step %d\n", steps_run);
          std::fflush(stderr);
          for (int i = 0; i < 120000 && ls::preemption_signal() == 0; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }));
      return cbs;
    };
    // The logging callbacks, and with --backup-dir a BackupAndRestore.
    const std::vector<ls::CallbackPtr> callbacks =
        phase_callbacks(log_callbacks(args, chief, report, phased ? "head" : ""), "train");
    auto t0 = std::chrono::steady_clock::now();
    // docs: begin fit
    auto hist = model.fit(train_ds, {.epochs = args.epochs,
                                     .callbacks = callbacks,
                                     .validation_data = val_ds,
                                     .seed = args.seed});
    // docs: end fit
    if (transfer) {
      const size_t changed = changed_since(base, base_before);
      std::printf("phase 'head' done: frozen backbone %s (%zu of its %zu weights changed)\n",
                  changed == 0 ? "unchanged bit for bit" : "CHANGED", changed, base_before.size());
      if (!args.save_backbone.empty() && chief)
        base.save_weights(args.save_backbone + ".head.weights.h5");
    }
    if (fine_tune && !hist.stopped_on_nan) {  // then fine-tune, 10x slower
      const size_t at = fine_tune_from;
      ls::Model& target = transfer ? base : model;
      size_t batch_norms = 0;
      if (transfer) {
        base.set_trainable(true);
        for (size_t i = 0; i < base.layers().size(); ++i) {
          auto& l = base.layers()[i];
          const bool bn = l->class_name() == "BatchNormalization";
          l->trainable = i >= at && !bn;
          batch_norms += bn && i >= at;
        }
      } else {
        freeze_before(model, at);
      }
      {
        std::optional<dist::Strategy::Scope> scope;
        if (strategy.impl()) scope.emplace(strategy.impl());
        compile(model, 1e-4);  // keeps the weights
      }
      auto [n, params] = trained(model);
      std::printf(
          "phase 2/2 'fine-tune': unfreezing %s from layer %zu ('%s') for %d epoch%s at "
          "learning rate 1e-4 (%zu trainable weights, %lld parameters",
          transfer ? "the backbone" : "the model", at, target.layers()[at]->name().c_str(),
          args.fine_tune_epochs, args.fine_tune_epochs == 1 ? "" : "s", n, (long long)params);
      if (transfer)
        std::printf("; its %zu BatchNormalization layers there stay frozen", batch_norms);
      std::printf(")\n");
      const std::vector<ls::Tensor> base_mid =
          transfer ? snapshot(base) : std::vector<ls::Tensor>{};
      auto more = model.fit(
          train_ds, {.epochs = args.epochs + args.fine_tune_epochs,
                     .callbacks = phase_callbacks(
                         log_callbacks(args, chief, report, "fine-tune", true), "fine_tune"),
                     .validation_data = val_ds,
                     .initial_epoch = args.epochs,
                     .seed = args.seed});
      append_history(hist, more);
      hist.stopped_on_nan = more.stopped_on_nan, hist.stop_reason = more.stop_reason;
      if (transfer) {
        std::printf("phase 'fine-tune' done: %zu of the backbone's %zu weights changed\n",
                    changed_since(base, base_mid), base_mid.size());
        if (!args.save_backbone.empty() && chief)
          base.save_weights(args.save_backbone + ".fine-tune.weights.h5");
      }
    }
    double train_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (hist.stopped_on_nan) {
      std::fprintf(stderr, "flowers: %s\n", hist.stop_reason.c_str());
      return 1;
    }

    // "Testing the model": accuracy on the held-out split and a grid of predictions.
    // docs: begin test
    auto result = model.evaluate(val_ds, {.verbose = 0});
    std::printf("validation: loss %.4f - accuracy %.4f\n", result["loss"], result["accuracy"]);
    auto it = val.iterator(0);
    auto batch = it.next();
    LS_CHECK(batch, "flowers: the validation split of ", data_dir, " is empty");
    ls::Tensor images = batch->tensor(0), labels = batch->tensor(1);
    ls::Tensor logits = model.predict(images, args.batch_size);
    std::string predictions = (fs::path(args.out_dir) / "predictions.png").string();
    if (!chief) return 0;
    ls::viz::save_prediction_grid(images, labels, logits, class_names, predictions,
                                  {.rows = 3, .cols = 3});
    std::printf("wrote %s\n", predictions.c_str());
    // docs: end test
    // The training curves (loss and accuracy, train and validation), both phases.
    if (args.epochs + args.fine_tune_epochs > 0) {
      std::string curves = (fs::path(args.out_dir) / "curves.png").string();
      ls::viz::HistoryPlotOptions plot{.title = transfer ? "Transfer learning: " + args.backbone
                                                         : args.model == "vit"
                                                             ? "Image folder ViT"
                                                             : "Image folder CNN"};
      if (phased && args.epochs > 0) plot.phases.push_back({0, "head"});
      if (fine_tune && int(hist.epoch.size()) > args.epochs)
        plot.phases.push_back({args.epochs, "fine-tune"});
      if (plot.phases.size() == 1 && !fine_tune) plot.phases.clear();  // one phase: no marks
      ls::viz::save_history_plot(hist.history, curves, plot);
      std::printf("wrote %s\n", curves.c_str());
    }

    // images/s: the whole cluster's (every worker steps at the same rate on its share).
    std::string replicas;  // and the other optional fields
    if (phased) {
      replicas += ", \"phases\": [\"head\"";
      if (fine_tune) replicas += ", \"fine-tune\"";
      replicas += "]";
    }
    if (args.model != "cnn") replicas += ", \"model\": \"" + args.model + "\"";
    if (transfer)
      replicas += ", \"backbone\": \"" + args.backbone +
                  "\", \"pretrained\": " + (args.weights.empty() ? "false" : "true");
    if (strategy.impl())
      replicas = ", \"replicas\": " + std::to_string(hist.replicas) +
                 ", \"workers\": " + std::to_string(hist.workers);
    std::printf(
        "{\"test_accuracy\": %.4f, \"epochs\": %d, \"train_images_per_sec\": %.1f, "
        "\"compile_seconds\": %.3f, \"peak_rss_mb\": %.1f, \"input_wait_fraction\": %.4f, "
        "\"train_seconds\": %.1f, \"classes\": %d%s}\n",
        result["accuracy"], args.epochs + args.fine_tune_epochs,
        hist.images_per_second * hist.workers, hist.compile_seconds, peak_rss_mb(),
        hist.input_wait_fraction, train_seconds, classes, replicas.c_str());
    return 0;
  } catch (const ls::TrainingPreempted& e) {  // SIGTERM/SIGINT: resumable with --backup-dir
    std::fprintf(stderr, "flowers: %s (exit status %d)\n", e.what(), ls::kPreemptedExitCode);
    return ls::kPreemptedExitCode;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flowers: error: %s\n", e.what());
    return 1;
  }
}
