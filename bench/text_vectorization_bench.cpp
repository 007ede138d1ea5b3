// TextVectorization throughput (strings per second) over the fortunes corpus (Debian's
// `fortunes` package), in Lockstep's input pipeline at N threads:
//   from_tensor_slices(quotes) -> batch(32) -> map(vectorize, num_parallel_calls = N) -> prefetch
// Its peer is bench/text_vectorization_peer.py (Keras's TextVectorization in a tf.data
// pipeline, the same shape and thread count). One JSON line per mode on stdout.
//
//   build/bin/text_vectorization_bench [--threads 2] [--repeat 10] [--fortunes-dir DIR]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "lockstep/core/file_io.h"
#include "lockstep/data/dataset.h"
#include "lockstep/nn/text_layers.h"
#include "lockstep/tools/text_export.h"

namespace ls = lockstep;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

ls::data::Strings corpus(const std::string& dir) {
  ls::data::Strings out;
  for (const auto& cat : ls::tools::default_fortune_categories()) {
    auto q =
        ls::tools::split_fortunes(ls::read_regular_file(dir + "/" + cat, 64 << 20, "fortune file"));
    out.insert(out.end(), q.begin(), q.end());
  }
  return out;
}

// Strings per second of `tv` over `texts` repeated `repeat` times, at `threads` threads.
double throughput(const std::shared_ptr<ls::TextVectorizationLayer>& tv,
                  const ls::data::Strings& texts, int repeat, int threads) {
  ls::data::Options o;
  o.max_threads = threads;
  auto ds = ls::data::Dataset::from_tensor_slices({ls::data::Component(texts)})
                .repeat(repeat)
                .batch(32)
                .map(tv->map_fn(), {.num_parallel_calls = threads})
                .prefetch(ls::data::AUTOTUNE)
                .with_options(o);
  int64_t rows = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto it = ds.iterator();
  while (auto b = it.next()) rows += b->tensor(0).dim(0);
  return double(rows) / seconds_since(t0);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, repeat = 10;
  std::string dir = ls::tools::kFortunesDir;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--threads")
      threads = std::atoi(argv[i + 1]);
    else if (a == "--repeat")
      repeat = std::atoi(argv[i + 1]);
    else if (a == "--fortunes-dir")
      dir = argv[i + 1];
    else {
      std::fprintf(stderr,
                   "usage: text_vectorization_bench [--threads N] [--repeat N] "
                   "[--fortunes-dir DIR]\n");
      return 2;
    }
  }
  const ls::data::Strings texts = corpus(dir);
  struct Mode {
    const char* name;
    ls::layers::TextVectorizationOptions o;
  };
  const Mode modes[] = {
      {"int", {.max_tokens = 10000, .output_sequence_length = 100}},
      {"multi_hot", {.max_tokens = 10000, .output_mode = "multi_hot"}},
      {"int_bigrams", {.max_tokens = 20000, .ngrams = {2}, .output_sequence_length = 200}}};
  for (const Mode& m : modes) {
    auto tv = ls::layers::TextVectorization(m.o);
    const auto t0 = std::chrono::steady_clock::now();
    tv->adapt(texts);
    const double adapt_s = seconds_since(t0);
    throughput(tv, texts, 1, threads);  // warm-up
    const double sps = throughput(tv, texts, repeat, threads);
    std::printf(
        "{\"framework\": \"lockstep\", \"mode\": \"%s\", \"threads\": %d, "
        "\"strings\": %zu, \"adapt_s\": %.3f, \"strings_per_s\": %.0f}\n",
        m.name, threads, texts.size() * size_t(repeat), adapt_s, sps);
  }
  return 0;
}
