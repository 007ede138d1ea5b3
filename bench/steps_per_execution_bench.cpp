// steps_per_execution: training throughput of one model compiled with several
// CompileConfig::steps_per_execution values, measured in one process with the values
// interleaved round by round (so a busy machine disturbs them alike). Each value gets its own
// model (same initial weights), warmed up by one fit that compiles and stages; every round then
// times one fit of --steps steps per value: fit() end to end, with what a Keras user's loop
// does every step or execution (the accuracy metric read into the batch logs, a callback that
// reads them, the progress bar with --verbose 1, the array iterator). Prints one line per
// round, the medians, and one JSON line (last line of stdout).
//   build/bin/steps_per_execution_bench [--model cnn|mlp] [--batch-size B] [--steps S]
//                                       [--rounds R] [--threads T] [--values 1,8,32]
//                                       [--verbose 0|1]
// Models: cnn = the reference CNN (examples/reference_cnn.h) on synthetic 28x28x1 images;
// mlp = Dense(64, relu) -> Dense(10) on 32 features, where the step is so small that the host
// work around it shows. Defaults: cnn, batch 32, 64 steps, 5 rounds, 2 threads, values 1,8,32.
// JSON keys: model, batch_size, threads, steps, rounds, loadavg_before / loadavg_after (the
// 1-minute load average), and per value: images_per_sec (median), ms_per_step (median),
// speedup (median images/s over the first value's).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "../examples/reference_cnn.h"
#include "lockstep/core/parse.h"

namespace ls = lockstep;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string model = "cnn";
  int batch = 32, steps = 64, rounds = 5, threads = 2, verbose = 0;
  std::vector<int> values = {1, 8, 32};
};

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr,
               "steps_per_execution_bench: %s\n"
               "usage: steps_per_execution_bench [--model cnn|mlp] [--batch-size B] [--steps S]\n"
               "                                 [--rounds R] [--threads T] [--values 1,8,32]\n"
               "                                 [--verbose 0|1]\n",
               what.c_str());
  std::exit(2);
}

// The project's checked parser (lockstep/core/parse.h); its message goes out as a usage error.
int positive_int(const std::string& flag, const std::string& v, int64_t max = 1'000'000) {
  try {
    return int(ls::parse_int(flag, v, 1, max));
  } catch (const ls::Error& e) {
    usage_error(e.what());
  }
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; i += 2) {
    std::string k = argv[i];
    if (i + 1 >= argc) usage_error(k + " needs a value");
    std::string v = argv[i + 1];
    if (k == "--model") {
      a.model = v;
    } else if (k == "--batch-size") {
      a.batch = positive_int(k, v);
    } else if (k == "--steps") {
      a.steps = positive_int(k, v);
    } else if (k == "--rounds") {
      a.rounds = positive_int(k, v);
    } else if (k == "--threads") {
      a.threads = positive_int(k, v, ls::max_thread_count());
    } else if (k == "--verbose") {
      try {
        a.verbose = int(ls::parse_int(k, v, 0, 1));
      } catch (const ls::Error& e) {
        usage_error(e.what());
      }
    } else if (k == "--values") {
      a.values.clear();
      std::stringstream s(v);
      for (std::string item; std::getline(s, item, ',');) a.values.push_back(positive_int(k, item));
    } else {
      usage_error("unknown argument " + k);
    }
  }
  if (a.model != "cnn" && a.model != "mlp")
    usage_error("--model must be cnn or mlp, got '" + a.model + "'");
  if (a.values.empty()) usage_error("--values needs at least one value");
  return a;
}

ls::Model make_model(const std::string& name) {
  using namespace ls::layers;
  ls::set_random_seed(1);
  ls::reset_layer_names();
  if (name == "cnn") return reference_cnn();
  return ls::Sequential({Input({32}), Dense(64, {.activation = "relu"}), Dense(10)});
}

// A user's per-batch callback: reads the loss and accuracy of every batch it is shown.
struct BatchLogReader : ls::Callback {
  double sum = 0;
  int64_t calls = 0;
  void on_train_batch_end(int, const ls::Logs& logs) override {
    sum += logs.at("loss") + logs.at("accuracy");
    ++calls;
  }
};

double loadavg() {
  std::ifstream f("/proc/loadavg");
  double one = -1;
  f >> one;
  return one;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    ls::set_num_threads(a.threads);
    const double load_before = loadavg();
    // Synthetic data (the timing does not depend on the values): [rows, ...] in [0, 1), labels
    // 0..9.
    const int64_t rows = int64_t(a.batch) * a.steps;
    ls::Shape shape = a.model == "cnn" ? ls::Shape{rows, 28, 28, 1} : ls::Shape{rows, 32};
    ls::Tensor x = ls::Tensor::empty(shape);
    std::vector<int32_t> labels(static_cast<size_t>(rows));
    ls::Philox rng(7);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = rng.uniform();
    for (auto& l : labels) l = int32_t(rng.next_u32() % 10);
    ls::Tensor y = ls::Tensor::from_vector_i32({rows}, labels);

    std::vector<ls::Model> models;
    for (int value : a.values) {
      models.push_back(make_model(a.model));
      models.back().compile(
          {.optimizer = ls::optimizers::Adam(1e-3),
           .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
           .metrics = {"accuracy"},
           .steps_per_execution = value});
    }
    auto reader = std::make_shared<BatchLogReader>();
    const ls::FitConfig fit{
        .batch_size = a.batch, .epochs = 1, .verbose = a.verbose, .callbacks = {reader}};
    for (auto& m : models) m.fit(x, y, fit);  // compiles and stages

    std::vector<std::vector<double>> rates(a.values.size());
    for (int r = 0; r < a.rounds; ++r) {
      std::printf("round %d:", r + 1);
      for (size_t k = 0; k < a.values.size(); ++k) {
        const size_t i = (k + size_t(r)) % a.values.size();  // rotate the order each round
        const auto t0 = Clock::now();
        models[i].fit(x, y, fit);
        const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        rates[i].push_back(double(rows) / seconds);
        std::printf(" N=%d %.1f img/s", a.values[i], rates[i].back());
      }
      std::printf("\n");
      std::fflush(stdout);
    }
    const double load_after = loadavg();
    const double base = median(rates[0]);
    std::printf("medians (load %.2f -> %.2f):\n", load_before, load_after);
    for (size_t i = 0; i < a.values.size(); ++i)
      std::printf("  steps_per_execution %-4d %10.1f img/s %9.3f ms/step  x%.3f\n", a.values[i],
                  median(rates[i]), 1e3 * a.batch / median(rates[i]), median(rates[i]) / base);
    std::printf(
        "{\"model\": \"%s\", \"batch_size\": %d, \"threads\": %d, \"steps\": %d, \"rounds\": %d, "
        "\"verbose\": %d, \"loadavg_before\": %.2f, \"loadavg_after\": %.2f, \"values\": {",
        a.model.c_str(), a.batch, a.threads, a.steps, a.rounds, a.verbose, load_before, load_after);
    for (size_t i = 0; i < a.values.size(); ++i)
      std::printf("%s\"%d\": {\"images_per_sec\": %.1f, \"ms_per_step\": %.4f, \"speedup\": %.3f}",
                  i ? ", " : "", a.values[i], median(rates[i]), 1e3 * a.batch / median(rates[i]),
                  median(rates[i]) / base);
    std::printf("}}\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "steps_per_execution_bench: error: %s\n", e.what());
    return 1;
  }
}
