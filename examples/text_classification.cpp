// The text job: classify short English texts by topic, as the Keras guide "Text classification
// from scratch" does, on real labelled text from a registry package. Debian's `fortunes` quotes
// (exported once as class folders of .txt files, `lockstep export-text-folder`) are read with
// text_dataset_from_directory, a TextVectorization adapted on the training split turns them
// into token ids on the host (in the input pipeline, as Keras runs it in tf.data), and one of
// the two models of examples/text_models.h trains on them:
//   conv1d: Embedding -> Conv1D -> GlobalMaxPooling1D -> Dense -> Dense
//   bilstm: Embedding(mask_zero) -> Bidirectional(LSTM) -> Dense (the LSTM skips the padding)
// It prints the summary, the progress, the validation accuracy and a few predictions on raw
// strings, saves the model (token ids in, logits out) as .keras, and ends with one JSON line of
// results.
//
//   build/bin/text_classification [--data-dir DIR] [--out-dir DIR] [--model conv1d|bilstm]
//       [--epochs N] [--batch-size N] [--max-tokens N] [--sequence-length N] [--seed N]
//       [--threads N] [--validation-split F] [--dtype-policy float32|mixed_bfloat16]
//       [--report FILE.json] [--price-per-hour X]
//
// Without --data-dir it exports the fortunes into <out-dir>/fortunes (apt-get install
// fortunes; scripts/setup.sh does) once and trains on that. <out-dir>/split.json lists the
// training and validation files, for bench/text_classification_keras.py (Keras, same split and
// recipe).
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "lockstep/core/file_io.h"
#include "lockstep/core/json.h"
#include "lockstep/core/parse.h"
#include "lockstep/data/text.h"
#include "lockstep/lockstep.h"
#include "lockstep/nn/text_layers.h"
#include "lockstep/tools/example_args.h"
#include "lockstep/tools/text_export.h"
#include "text_models.h"

namespace ls = lockstep;
namespace fs = std::filesystem;

namespace {

const char* kUsage =
    "usage: text_classification [--data-dir DIR] [--out-dir DIR] [--model conv1d|bilstm]\n"
    "       [--epochs N] [--batch-size N] [--max-tokens N] [--sequence-length N] [--seed N]\n"
    "       [--threads N] [--validation-split F] [--dtype-policy float32|mixed_bfloat16]\n"
    "       [--report FILE.json] [--price-per-hour X]\n"
    "Without --data-dir: exports Debian's fortunes (apt-get install fortunes) into\n"
    "<out-dir>/fortunes once and trains on it.\n";

struct Args {
  std::string data_dir, out_dir, model, policy, report;
  int epochs = 0, batch_size = 0, threads = 0;
  int64_t max_tokens = 0, seq_len = 0;
  uint64_t seed = 0;
  double validation_split = 0, price_per_hour = 0;
};

Args parse(int argc, char** argv) {
  const auto e = ls::tools::parse_example_args(
      argc, argv, kUsage,
      {"--data-dir", "--out-dir", "--model", "--epochs", "--batch-size", "--max-tokens",
       "--sequence-length", "--seed", "--threads", "--validation-split", "--dtype-policy",
       "--report", "--price-per-hour"});
  Args a;
  a.data_dir = e.value_or("--data-dir", "");
  a.out_dir = e.value_or("--out-dir", "text_out");
  a.model = e.value_or("--model", "conv1d");
  a.policy = e.value_or("--dtype-policy", "float32");
  a.report = e.value_or("--report", "");
  a.epochs = int(e.integer("--epochs", 10, 0, 1000000));
  a.batch_size = int(e.integer("--batch-size", 32, 1, int64_t(1) << 20));
  a.threads = int(e.integer("--threads", 0, 0, 4096));
  a.max_tokens = e.integer("--max-tokens", 10000, 3, int64_t(1) << 24);
  a.seq_len = e.integer("--sequence-length", 64, 1, int64_t(1) << 20);
  a.seed = uint64_t(e.integer("--seed", 42, 0, INT64_MAX));
  a.validation_split =
      ls::parse_double("--validation-split", e.value_or("--validation-split", "0.2"), 0.0, 1.0);
  a.price_per_hour =
      ls::parse_double("--price-per-hour", e.value_or("--price-per-hour", "0"), 0.0, 1e9);
  if (a.model != "conv1d" && a.model != "bilstm") {
    std::fprintf(stderr, "text_classification: --model must be conv1d or bilstm, got '%s'\n%s",
                 a.model.c_str(), kUsage);
    std::exit(2);
  }
  if (a.validation_split <= 0 || a.validation_split >= 1) {
    std::fprintf(stderr, "text_classification: --validation-split must be in (0, 1)\n%s", kUsage);
    std::exit(2);
  }
  return a;
}

// The class folders to train on: --data-dir, or the fortunes exported once under out_dir.
std::string text_folder(const Args& a) {
  if (!a.data_dir.empty()) return a.data_dir;
  const fs::path dir = fs::path(a.out_dir) / "fortunes";
  if (fs::exists(dir / ".complete")) return dir.string();
  std::printf("exporting Debian's fortunes to %s\n", dir.c_str());
  fs::remove_all(dir);
  const auto r = ls::tools::export_fortunes(ls::tools::kFortunesDir, dir.string());
  std::printf("wrote %lld quotes in %zu classes\n", (long long)r.files, r.categories.size());
  std::FILE* f = std::fopen((dir / ".complete").c_str(), "w");  // later runs reuse the export
  if (f) std::fclose(f);
  return dir.string();
}

// <out-dir>/split.json: the classes and the training and validation files with their labels, so
// that bench/text_classification_keras.py trains Keras on exactly the same split.
void write_split(const std::string& path, const ls::data::TextDataset& train,
                 const ls::data::TextDataset& val) {
  ls::json j;
  j["classes"] = train.class_names();
  auto files = [](const ls::data::TextDataset& d) {
    ls::json a = ls::json::array();
    for (size_t i = 0; i < d.file_paths().size(); ++i)
      a.push_back({fs::absolute(d.file_paths()[i]).string(), d.labels()[i]});
    return a;
  };
  j["train"] = files(train);
  j["validation"] = files(val);
  ls::write_file_atomic(path, j.dump(1), "split file");
}

double peak_rss_mb() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;
}

// A few validation texts with their true and predicted classes.
void show_predictions(ls::Model& model, const ls::TextVectorizationLayer& vectorize,
                      const ls::data::Dataset& val, const std::vector<std::string>& classes) {
  auto it = val.iterator(0);
  auto batch = it.next();
  if (!batch) return;
  const ls::data::Strings& texts = batch->strings(0);
  const ls::Tensor& labels = batch->tensor(1);
  const size_t n = std::min<size_t>(4, texts.size());
  ls::Tensor logits = model.predict(vectorize.apply(texts));
  const int64_t k = logits.dim(1);
  const float* p = logits.data<float>();
  for (size_t i = 0; i < n; ++i) {
    int64_t best = 0;
    for (int64_t c = 1; c < k; ++c)
      if (p[int64_t(i) * k + c] > p[int64_t(i) * k + best]) best = c;
    std::string shown = texts[i].substr(0, 70);
    for (char& ch : shown)
      if (ch == '\n' || ch == '\t') ch = ' ';
    std::printf("  %-72s true %-12s predicted %s\n", ("\"" + shown + "\"").c_str(),
                classes[size_t(labels.data<int32_t>()[i])].c_str(), classes[size_t(best)].c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  try {
    if (args.threads > 0) ls::set_num_threads(args.threads);
    ls::set_random_seed(args.seed);
    ls::mixed_precision::set_global_policy(args.policy);
    fs::create_directories(args.out_dir);
    const std::string folder = text_folder(args);
    auto [train, val] =
        ls::data::text_dataset_from_directory(folder, {.batch_size = args.batch_size,
                                                       .seed = args.seed,
                                                       .validation_split = args.validation_split,
                                                       .subset = "both"});
    const std::vector<std::string> classes = train.class_names();
    write_split((fs::path(args.out_dir) / "split.json").string(), train, val);

    // The vocabulary from the training texts only (Keras: vectorize_layer.adapt(text_ds)).
    auto vectorize = ls::layers::TextVectorization({.max_tokens = args.max_tokens,
                                                    .output_sequence_length = args.seq_len,
                                                    .int_dtype = ls::DType::i32});
    auto t_adapt = std::chrono::steady_clock::now();
    vectorize->adapt(train.map(ls::data::first_component));
    std::printf("vocabulary: %lld tokens (adapted in %.2f s)\n",
                (long long)vectorize->vocabulary_size(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t_adapt).count());
    // The ids in the input pipeline, on the host (Keras: text_ds.map(vectorize_text)).
    // In parallel, kept in memory after the first epoch (5,553 quotes: a few MB of ids; the
    // files are not read again), the next batches ready before the step asks: the Keras
    // guide's .map(vectorize_text).cache().prefetch(). (The cache replays the first epoch's
    // order, as tf.data's does after a shuffle.)
    const ls::data::MapOptions on_host{.num_parallel_calls = ls::data::AUTOTUNE,
                                       .name = "vectorize"};
    auto train_ds = train.map(vectorize->map_fn(0), on_host).cache().prefetch(ls::data::AUTOTUNE);
    auto val_ds = val.map(vectorize->map_fn(0), on_host).cache().prefetch(ls::data::AUTOTUNE);

    ls::Model model = text_classifier(args.model, vectorize->vocabulary_size(), args.seq_len,
                                      int64_t(classes.size()), /*mask_zero=*/args.model == "bilstm",
                                      /*dropout=*/0.5);
    model.compile({.optimizer = ls::optimizers::Adam(1e-3),
                   .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                   .metrics = {"accuracy"}});
    model.summary();

    std::vector<ls::CallbackPtr> callbacks;
    if (!args.report.empty())
      callbacks.push_back(
          ls::callbacks::CostReport({.path = args.report, .price_per_hour = args.price_per_hour}));
    auto t0 = std::chrono::steady_clock::now();
    auto hist = model.fit(
        train_ds, {.epochs = args.epochs, .callbacks = callbacks, .validation_data = val_ds});
    const double train_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto result = model.evaluate(val_ds, {.verbose = 0});
    std::printf("validation: loss %.4f - accuracy %.4f (%zu classes, chance %.3f)\n",
                result["loss"], result["accuracy"], classes.size(), 1.0 / double(classes.size()));
    show_predictions(model, *vectorize, val, classes);

    const std::string saved = (fs::path(args.out_dir) / ("text_" + args.model + ".keras")).string();
    model.save(saved);
    std::printf("wrote %s\n", saved.c_str());
    const double cost = train_seconds / 3600.0 * args.price_per_hour;
    std::printf(
        "{\"model\": \"%s\", \"validation_accuracy\": %.4f, \"validation_loss\": %.4f, "
        "\"epochs\": %d, \"classes\": %zu, \"vocabulary\": %lld, \"train_seconds\": %.1f, "
        "\"train_texts_per_sec\": %.1f, \"input_wait_fraction\": %.4f, \"compile_seconds\": "
        "%.3f, \"peak_rss_mb\": %.1f, \"cost_usd\": %.5f, \"dtype_policy\": \"%s\"}\n",
        args.model.c_str(), result["accuracy"], result["loss"], args.epochs, classes.size(),
        (long long)vectorize->vocabulary_size(), train_seconds, hist.images_per_second,
        hist.input_wait_fraction, hist.compile_seconds, peak_rss_mb(), cost, args.policy.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "text_classification: error: %s\n", e.what());
    return 1;
  }
}
