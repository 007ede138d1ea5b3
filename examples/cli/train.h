// The `lockstep train` command: a model from a Keras model JSON or a .keras file, trained on a
// folder of class subfolders of images with the flowers example's pipeline, saved as .keras, with
// its training curves (curves.png next to the .keras file) and, on request, the logging and cost
// callbacks of the examples (TensorBoard, CSVLogger, CostReport).
#pragma once
#include <cstdio>
#include <filesystem>
#include <optional>

#include "device_flag.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/trainers/preemption.h"
#include "mesh_flag.h"
#include "model_files.h"

namespace lockstep::cli {

inline const char* kTrainUsage =
    "usage: lockstep train --model MODEL --data-dir DIR --epochs N --out OUT.keras [options]\n"
    "\n"
    "Trains MODEL on the images under DIR (one subfolder per class, as\n"
    "image_dataset_from_directory reads them) and saves the result, with the class names in its\n"
    "metadata, to OUT.keras. MODEL is a keras.applications backbone (applications.MobileNetV2,\n"
    "applications.ResNet50 or applications.EfficientNetB0, ':SIZE' for a SIZE x SIZE input\n"
    "instead of 224; random initial weights, one output per class of DIR) or a Keras model\n"
    "JSON (Python's model.to_json()), either compiled\n"
    "here with Adam(--learning-rate) and SparseCategoricalCrossentropy (from_logits unless the\n"
    "last layer applies a softmax) and the accuracy metric, or a .keras file, which keeps its\n"
    "own compile config and optimizer state when it has them (training resumes). Images are\n"
    "resized to the model's input height and width; its channels pick grayscale / rgb / rgba.\n"
    "\n"
    "options:\n"
    "  --model MODEL             config.json, m.keras or applications.NAME[:SIZE] (required)\n"
    "  --data-dir DIR            image folder (required)\n"
    "  --epochs N                epochs to train (required)\n"
    "  --out OUT.keras           where to save the trained model (required)\n"
    "  --batch-size N            global batch size (default 32)\n"
    "  --validation-split F      fraction held out for validation, in [0, 1) (default 0.2)\n"
    "  --seed N                  shuffle / split / initialisation seed (default 123)\n"
    "  --learning-rate F         Adam's rate for a model JSON (default 0.001)\n"
    "  --strategy S              one_device | mirrored (default: none, the plain loop)\n"
    "  --threads N               compute threads (default: all cores)\n"
    "  --device D                cpu (default), or xla:cpu / xla:PLUGIN: the whole step\n"
    "                            compiled by XLA through a PJRT plugin (backend \"xla\")\n"
    "  --replicas N              with --device xla:PLUGIN: N replicas, one per device of the\n"
    "                            plugin (XlaStrategy, TPUStrategy's way): the global batch is\n"
    "                            split across them and the gradients all-reduced inside the\n"
    "                            compiled step; the CPU plugin is asked for N devices\n"
    "  --mesh AXES               with --device xla:PLUGIN: a device mesh, e.g. batch=2,model=2\n"
    "                            (keras.distribution: DataParallel over it, or ModelParallel\n"
    "                            with --layout-map); the batch is split over its first axis\n"
    "  --layout-map RULES.json   with --mesh: Keras's LayoutMap as JSON, each variable-path\n"
    "                            regex to a mesh axis or null per dim, e.g.\n"
    "                            {\"dense.*kernel\": [null, \"model\"], \"dense.*bias\": "
    "[\"model\"]}\n"
    "  --backup-dir DIR          BackupAndRestore into DIR at every epoch end; SIGTERM or SIGINT\n"
    "                            stops after the running step, writes the backup there and exits\n"
    "                            with status 75; the same command again resumes from it\n"
    "  --checkpoint PATTERN      also a ModelCheckpoint, e.g. "
    "'ckpt/{epoch:02d}-{val_loss:.2f}.keras'\n"
    "                            (save_best_only on val_loss when there is a validation split)\n"
    "  --tensorboard LOGDIR      TensorBoard event files (tensorboard --logdir LOGDIR)\n"
    "  --csv FILE                the epoch logs as CSV (CSVLogger)\n"
    "  --report FILE.json        time-and-cost report (FILE.json and FILE.png: time and dollars\n"
    "                            to 85/90/91% val_accuracy, or accuracy without a validation\n"
    "                            split) at the price below\n"
    "  --price-per-hour X        the machine's price in dollars per hour, for --report\n"
    "  --prices FILE.json        a price table {\"machine\": dollars_per_hour, ...}, for --report\n"
    "  --machine NAME            the machine's entry in --prices\n"
    "\n"
    "Also writes the training curves (loss and accuracy per epoch, training and validation) to\n"
    "curves.png in OUT.keras's folder.\n";

struct TrainArgs {
  std::string model, data_dir, out, strategy, checkpoint, backup_dir;
  std::string tensorboard, csv, report, prices, machine;
  std::string backend = "cpu";   // from --device (examples/cli/device_flag.h)
  std::string device = "cpu";    // --device as given
  int replicas = 1;              // --replicas: XlaStrategy on that many devices of --device
  std::string mesh, layout_map;  // --mesh, --layout-map (examples/cli/mesh_flag.h)
  double price_per_hour = 0;
  int epochs = 0, batch_size = 32, threads = 0;
  uint64_t seed = 123;
  double validation_split = 0.2, learning_rate = 1e-3;
};

inline TrainArgs parse_train_args(const Args& a) {
  for (const char* required : {"--model", "--data-dir", "--epochs", "--out"})
    LS_CHECK(a.has(required), "train: ", required, " is required (see lockstep train --help)");
  TrainArgs t;
  t.model = a.get("--model");
  t.data_dir = a.get("--data-dir");
  t.out = a.get("--out");
  LS_CHECK(ends_with(t.out, ".keras"), "train: --out '", t.out, "' must end in .keras");
  t.epochs = int(a.integer("--epochs", 0, 0, 1000000));
  t.batch_size = int(a.integer("--batch-size", 32, 1, int64_t(1) << 24));
  t.seed = uint64_t(a.integer("--seed", 123, 0, INT64_MAX));
  t.validation_split = a.number("--validation-split", 0.2, 0.0, 1.0);
  LS_CHECK(t.validation_split < 1.0, "train: --validation-split must be in [0, 1), got ",
           t.validation_split);
  t.learning_rate = a.number("--learning-rate", 1e-3, 0.0, 1e6);
  if (a.has("--threads")) t.threads = parse_thread_count("--threads", a.get("--threads"));
  t.strategy = a.get("--strategy");
  if (a.has("--device")) t.device = a.get("--device"), t.backend = backend_for_device(t.device);
  LS_CHECK(t.strategy.empty() || t.strategy == "one_device" || t.strategy == "mirrored",
           "train: --strategy must be one_device or mirrored, got '", t.strategy, "'");
  t.replicas = int(a.integer("--replicas", 1, 1, 1 << 16));
  LS_CHECK(t.replicas == 1 || t.strategy.empty(),
           "train: --replicas (XlaStrategy on the devices "
           "of --device xla:...) and --strategy are two strategies; give one");
  t.mesh = a.get("--mesh");
  t.layout_map = a.get("--layout-map");
  LS_CHECK(t.layout_map.empty() || !t.mesh.empty(),
           "train: --layout-map needs --mesh (the mesh its rules name axes of)");
  LS_CHECK(t.mesh.empty() || (t.replicas == 1 && t.strategy.empty()),
           "train: --mesh (a keras.distribution over devices of --device xla:...) and ",
           t.replicas > 1 ? "--replicas" : "--strategy", " are two ways to distribute; give one");
  t.checkpoint = a.get("--checkpoint");
  t.backup_dir = a.get("--backup-dir");
  t.tensorboard = a.get("--tensorboard");
  t.csv = a.get("--csv");
  t.report = a.get("--report");
  t.price_per_hour = a.number("--price-per-hour", 0.0, 0.0, 1e9);
  t.prices = a.get("--prices");
  t.machine = a.get("--machine");
  LS_CHECK(t.report.empty() || ends_with(t.report, ".json"), "train: --report '", t.report,
           "' must end in .json (the chart goes next to it as .png)");
  LS_CHECK(
      !t.report.empty() || (!a.has("--price-per-hour") && t.prices.empty() && t.machine.empty()),
      "train: --price-per-hour, --prices and --machine price the --report FILE.json; "
      "add --report");
  LS_CHECK(t.machine.empty() || !t.prices.empty(),
           "train: --machine names an entry of a --prices FILE.json table; add --prices");
  // No output may overwrite an input (--csv naming the --model file destroyed it).
  for (const std::string& out : {t.out, t.csv, t.report, t.checkpoint, t.tensorboard})
    if (!out.empty()) tools::check_output_is_not_input("train", out, {t.model, t.prices});
  return t;
}

// The activation of the model's (first) output layer, from its Keras config.
inline std::string output_activation(const json& config) {
  const json& c = config.at("config");
  const json& layers = c.at("layers");
  if (layers.empty()) return "";
  json last = layers.back();
  if (c.contains("output_layers")) {
    json out = c["output_layers"];
    if (out.is_array() && !out.empty() && out[0].is_array()) out = out[0];
    for (auto& l : layers)
      if (out.is_array() && !out.empty() && l.value("name", std::string()) == out[0]) last = l;
  }
  return last.contains("config") ? last["config"].value("activation", std::string()) : "";
}

inline void compile_for_images(Model& m, const TrainArgs& t) {
  const bool softmax = output_activation(m.get_config()) == "softmax";
  m.compile({.optimizer = optimizers::Adam(t.learning_rate),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = !softmax}),
             .metrics = {"accuracy"}});
}

// Checks the model takes images and predicts one score per class of the folder.
inline void check_model_fits_data(const Model& m, const std::string& model_path, size_t classes) {
  const Shape in = m.inputs()[0].shape();
  LS_CHECK(in.rank() == 4 && in[1] > 0 && in[2] > 0 && in[3] >= 1 && in[3] <= 4, "train: model '",
           model_path, "' takes input ", in.str(),
           "; an image model takes [batch, height, width, 1|3|4 channels]");
  const Shape out = m.outputs()[0].shape();
  LS_CHECK(out.rank() == 2 && out[1] == int64_t(classes), "train: model '", model_path,
           "' outputs ", out.str(), " but the image folder has ", classes,
           " classes: the last layer needs ", classes, " units");
}

inline void check_class_names(const std::string& model_path,
                              const std::vector<std::string>& classes) {
  if (!ends_with(model_path, ".keras")) return;
  json meta = load_model_metadata(model_path);
  if (!meta.contains("class_names")) return;
  LS_CHECK(meta["class_names"] == json(classes), "train: '", model_path,
           "' was trained on classes ", meta["class_names"].dump(), " but the folder has ",
           json(classes).dump(), " (the labels would not mean the same)");
}

inline std::pair<data::ImageDataset, data::ImageDataset> image_datasets(const TrainArgs& t,
                                                                        const Shape& in) {
  data::ImageFolderOptions o;
  o.color_mode = in[3] == 1 ? "grayscale" : in[3] == 3 ? "rgb" : "rgba";
  o.seed = t.seed;
  o.image_size = {int(in[1]), int(in[2])};
  o.batch_size = t.batch_size;
  if (t.validation_split <= 0) return {data::image_dataset_from_directory(t.data_dir, o), {}};
  o.validation_split = t.validation_split;
  o.subset = "both";
  auto [train, val] = data::image_dataset_from_directory(t.data_dir, o);
  return {train, val};
}

// The number of class subfolders of an image folder (an application's classifier units).
inline int64_t folder_classes(const std::string& dir) {
  LS_CHECK(std::filesystem::is_directory(dir), "train: --data-dir '", dir, "' is not a folder");
  int64_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) n += e.is_directory();
  LS_CHECK(n > 0, "train: --data-dir '", dir, "' has no class subfolders");
  return n;
}

inline Model build_or_load(const TrainArgs& t, const distribute::Strategy& strategy) {
  std::optional<distribute::Strategy::Scope> scope;
  if (strategy.impl()) scope.emplace(strategy.impl());
  Model m = is_application(t.model) ? build_application(t.model, folder_classes(t.data_dir))
                                    : load_model_source(t.model, /*compile=*/true);
  if (!m.compile_config().optimizer || !m.compile_config().loss) compile_for_images(m, t);
  if (m.compile_config().backend != t.backend) {  // --device: the same config on that backend
    CompileConfig c = m.compile_config();
    c.backend = t.backend;
    m.compile(c);
  }
  return m;
}

// The logging callbacks the flags ask for (as examples/fashion_mnist.cpp and flowers.cpp take
// them; the chief's only under a multi-worker strategy).
inline std::vector<CallbackPtr> log_callbacks(const TrainArgs& t, bool chief) {
  std::vector<CallbackPtr> cbs;
  if (!t.tensorboard.empty()) cbs.push_back(callbacks::TensorBoard({.log_dir = t.tensorboard}));
  if (!t.csv.empty() && chief) cbs.push_back(callbacks::CSVLogger(t.csv));
  if (!t.report.empty())  // writes on the chief only
    cbs.push_back(callbacks::CostReport({.path = t.report,
                                         .price_per_hour = t.price_per_hour,
                                         .prices_file = t.prices,
                                         .machine = t.machine}));
  return cbs;
}

// curves.png in the folder of --out.
inline std::string curves_path(const TrainArgs& t) {
  return (std::filesystem::path(t.out).parent_path() / "curves.png").string();
}

inline int run_train(const std::vector<std::string>& argv) {
  CommandSpec spec{"train",
                   kTrainUsage,
                   {"--model",      "--data-dir",         "--epochs",      "--out",
                    "--batch-size", "--validation-split", "--seed",        "--learning-rate",
                    "--strategy",   "--device",           "--replicas",    "--threads",
                    "--checkpoint", "--backup-dir",       "--tensorboard", "--csv",
                    "--report",     "--price-per-hour",   "--prices",      "--machine",
                    "--mesh",       "--layout-map"},
                   {},
                   0,
                   0};
  Args a = parse_args(spec, argv);
  if (a.help) return std::fputs(kTrainUsage, stdout), 0;
  const TrainArgs t = parse_train_args(a);
  if (!t.backup_dir.empty()) install_preemption_handler();  // lockstep/trainers/preemption.h
  if (t.threads > 0) set_num_threads(t.threads);
  set_random_seed(t.seed);
  distribute::Strategy strategy = t.replicas > 1 ? replica_strategy(t.device, t.replicas)
                                                 : distribute::strategy_from_name(t.strategy);
  if (strategy.impl())
    std::printf("Strategy: %s, %d replicas in sync\n", strategy.name().c_str(),
                strategy.num_replicas_in_sync());
  if (!t.mesh.empty())
    std::printf("Distribution: %s\n",
                set_mesh_distribution(t.device, t.mesh, t.layout_map).c_str());
  Model m = build_or_load(t, strategy);
  const Shape in = m.inputs()[0].shape();
  LS_CHECK(in.rank() == 4, "train: model '", t.model, "' takes input ", in.str(),
           "; an image model takes [batch, height, width, channels]");
  auto [train, val] = image_datasets(t, in);
  check_model_fits_data(m, t.model, train.class_names().size());
  check_class_names(t.model, train.class_names());
  m.summary();
  FitConfig fit{
      .epochs = t.epochs, .callbacks = log_callbacks(t, strategy.is_chief()), .seed = t.seed};
  if (val.valid()) fit.validation_data = val.cache().prefetch(data::AUTOTUNE);
  if (!t.checkpoint.empty())
    fit.callbacks.push_back(callbacks::ModelCheckpoint(
        t.checkpoint, {.monitor = val.valid() ? "val_loss" : "loss", .save_best_only = true}));
  if (!t.backup_dir.empty()) fit.callbacks.push_back(callbacks::BackupAndRestore(t.backup_dir));
  History h = m.fit(train.cache().prefetch(data::AUTOTUNE), fit);
  LS_CHECK(!h.stopped_on_nan, "train: ", h.stop_reason);
  if (strategy.impl() && !strategy.is_chief()) return 0;  // the chief saves and reports
  save_model(m, t.out, {.metadata = {{"class_names", train.class_names()}}});
  std::printf("wrote %s (%zu classes)\n", t.out.c_str(), train.class_names().size());
  if (t.epochs > 0 && h.epoch.empty()) {  // a --backup-dir resume already past --epochs
    std::printf(
        "no epoch ran: the backup in --backup-dir had already trained past --epochs %d, so "
        "training was complete; %s holds the restored model (raise --epochs to train on)\n",
        t.epochs, t.out.c_str());
    return 0;
  }
  if (t.epochs > 0) {
    const std::string curves = curves_path(t);
    viz::save_history_plot(h.history, curves, {.title = "lockstep train: " + m.name()});
    std::printf("wrote %s\n", curves.c_str());
  }
  std::printf("{\"epochs\": %d, \"loss\": %.4f, \"accuracy\": %.4f", t.epochs,
              h.history["loss"].empty() ? 0.0 : h.history["loss"].back(),
              h.history["accuracy"].empty() ? 0.0 : h.history["accuracy"].back());
  if (!h.history["val_accuracy"].empty())
    std::printf(", \"val_accuracy\": %.4f", h.history["val_accuracy"].back());
  std::printf("}\n");
  return 0;
}

}  // namespace lockstep::cli
