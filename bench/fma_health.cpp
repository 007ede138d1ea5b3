// Machine-health probe for benchmarks: an FMA loop on N threads, printed as GFLOP/s. The
// shared host sometimes squeezes both vCPUs onto one core; this shows it between runs.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const long iters = 20'000'000;
  auto t0 = std::chrono::steady_clock::now();
  float sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
  {
    float a[64];
    for (int i = 0; i < 64; ++i) a[i] = 1.0f + i * 1e-7f;
    for (long it = 0; it < iters / 16; ++it) {
#pragma omp simd
      for (int i = 0; i < 64; ++i) a[i] = a[i] * 0.9999999f + 1e-7f;
    }
    for (int i = 0; i < 64; ++i) sink += a[i];
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double flops = 2.0 * 64 * (iters / 16) * threads;
  std::printf("{\"fma_gflops\": %.1f, \"threads\": %d, \"sink\": %g}\n", flops / s / 1e9, threads, sink);
}
