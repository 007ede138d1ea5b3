// Lockstep side of the training benchmark: the reference CNN on Fashion-MNIST, timed over a
// fixed number of training steps after warm-up, plus inference throughput. Prints one JSON
// line with the same keys as bench/pytorch_fashion_mnist.py.
//   build/bin/train_bench [--threads N] [--batch-size 128] [--train-steps 200] [--warmup 20]
//                         [--infer-batches 50] [--data-dir DIR]
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "../examples/reference_cnn.h"

namespace ls = lockstep;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  int threads = 2, batch = 128, steps = 200, warmup = 20, infer_batches = 50;
  std::string data_dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    int v = std::atoi(argv[i + 1]);
    if (k == "--threads") threads = v;
    else if (k == "--batch-size") batch = v;
    else if (k == "--train-steps") steps = v;
    else if (k == "--warmup") warmup = v;
    else if (k == "--infer-batches") infer_batches = v;
    else if (k == "--data-dir") data_dir = argv[i + 1];
    else { std::fprintf(stderr, "train_bench: unknown argument %s\n", k.c_str()); return 2; }
  }
  try {
    ls::set_num_threads(threads);
    ls::set_random_seed(1);
    auto data = ls::data::load_fashion_mnist(data_dir);
    ls::Model model = reference_cnn();
    model.compile({.optimizer = ls::optimizers::Adam(1e-3),
                   .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                   .metrics = {"accuracy"}});
    const int64_t n = batch * int64_t(steps + warmup);
    ls::Tensor x = data.x_train.slice(0, std::min<int64_t>(n, data.x_train.dim(0)));
    ls::Tensor y = data.y_train.slice(0, x.dim(0));
    // Warm-up epoch compiles the program; the timed fit reuses it.
    model.fit(x.slice(0, int64_t(warmup) * batch), y.slice(0, int64_t(warmup) * batch),
              {.batch_size = batch, .epochs = 1, .verbose = 0});
    auto t0 = Clock::now();
    auto hist = model.fit(x.slice(int64_t(warmup) * batch, x.dim(0)), y.slice(int64_t(warmup) * batch, x.dim(0)),
                          {.batch_size = batch, .epochs = 1, .verbose = 0});
    double train_s = std::chrono::duration<double>(Clock::now() - t0).count();
    double train_ips = double(x.dim(0) - int64_t(warmup) * batch) / train_s;
    ls::Tensor xi = data.x_test.slice(0, std::min<int64_t>(int64_t(infer_batches) * batch, data.x_test.dim(0)));
    model.predict(xi.slice(0, batch), batch);  // compile
    auto t1 = Clock::now();
    model.predict(xi, batch);
    double infer_ips = double(xi.dim(0)) / std::chrono::duration<double>(Clock::now() - t1).count();
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    std::printf("{\"system\": \"lockstep\", \"threads\": %d, \"train_images_per_sec\": %.1f, "
                "\"infer_images_per_sec\": %.1f, \"compile_seconds\": %.3f, \"peak_rss_mb\": %.1f, "
                "\"final_loss\": %.4f}\n",
                threads, train_ips, infer_ips, model.compile_seconds(), ru.ru_maxrss / 1024.0,
                hist.history["loss"].back());
    return 0;
  } catch (const ls::Error& e) {
    std::fprintf(stderr, "train_bench: error: %s\n", e.what());
    return 1;
  }
}
