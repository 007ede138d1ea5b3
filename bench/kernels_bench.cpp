// Kernel benchmark: conv2d fwd / bwd-input / bwd-filter, matmul and pooling on the reference
// CNN's shapes (batch 128), through the same compiled-kernel path training uses. Prints GFLOP/s
// (median of repeats) and its share of an FMA-loop peak probe (run before and after, to spot a
// disturbed run). Usage: kernels_bench [threads] [reps]
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <vector>

#include "lockstep/core/rng.h"
#include "lockstep/core/thread_pool.h"
#include "lockstep/graph/executable.h"

using namespace lockstep;
using I = std::vector<int64_t>;
using Clock = std::chrono::steady_clock;

static double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// Median wall time, and median process CPU time per thread (robust to a shared, oversubscribed
// machine when threads == 1; with more threads it includes OpenMP spin-waiting).
static double g_cpu_ms = 0;
static double median_ms(const std::function<void()>& f, int reps) {
  for (int i = 0; i < 3; ++i) f();
  std::vector<double> t, c;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    double c0 = cpu_ms();
    f();
    c.push_back(cpu_ms() - c0);
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  std::sort(c.begin(), c.end());
  g_cpu_ms = c[c.size() / 2] / omp_get_max_threads();
  return t[t.size() / 2];
}

// Peak-ish FMA rate: 8 independent accumulator chains per thread.
static double fma_probe() {
  const long iters = 20'000'000;
  auto t0 = Clock::now();
  float sink = 0;
#pragma omp parallel reduction(+ : sink)
  {
#ifdef __AVX512F__
    __m512 acc[8], m = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    for (auto& a : acc) a = _mm512_set1_ps(1.f);
    for (long i = 0; i < iters; ++i)
      for (auto& a : acc) a = _mm512_fmadd_ps(a, m, b);
    for (auto& a : acc) sink += _mm512_reduce_add_ps(a);
#endif
  }
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (sink == 12345.f) std::printf(" ");
  return 2.0 * 16 * 8 * iters * omp_get_max_threads() / s / 1e9;
}

struct Case {
  std::string name;
  std::string op;
  std::vector<Shape> inputs;
  Attrs attrs;
  double flops;
};

static double conv_flops(int64_t n, int64_t oh, int64_t ow, int64_t o, int64_t k, int64_t cg) {
  return 2.0 * n * oh * ow * o * k * k * cg;
}

int main(int argc, char** argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  int reps = argc > 2 ? std::atoi(argv[2]) : 20;
  set_num_threads(threads);
  const char* act = std::getenv("LOCKSTEP_CONV_ACT");
  std::printf("threads %d, reps %d, conv activation layout %s\n", threads, reps,
              act ? act : "nhwc");
  const double peak = fma_probe();
  std::printf(
      "health: FMA probe %.0f GFLOP/s = this machine's fp32 peak on %d threads (a Zen4-class\n"
      "core does one zmm FMA per cycle, ~116 GFLOP/s; DEPENDENCIES.md's Zen5 does ~250)\n",
      peak, threads);
  const int64_t N = 128;
  Attrs fused{{"fused_bias", true}, {"activation", "relu"}};
  std::vector<Case> cases{
      {"conv1 fwd 28x28x1->32 (+bias+relu)",
       "conv2d",
       {{N, 28, 28, 1}, {3, 3, 1, 32}, {32}},
       fused,
       conv_flops(N, 26, 26, 32, 3, 1)},
      {"conv2 fwd 26x26x32->64 (+bias+relu)",
       "conv2d",
       {{N, 26, 26, 32}, {3, 3, 32, 64}, {64}},
       fused,
       conv_flops(N, 24, 24, 64, 3, 32)},
      {"conv2 fwd (no fusion)",
       "conv2d",
       {{N, 26, 26, 32}, {3, 3, 32, 64}},
       {},
       conv_flops(N, 24, 24, 64, 3, 32)},
      {"conv2 bwd-input",
       "conv2d_backward_input",
       {{N, 24, 24, 64}, {3, 3, 32, 64}},
       Attrs{{"input_shape", I{N, 26, 26, 32}}},
       conv_flops(N, 24, 24, 64, 3, 32)},
      {"conv2 bwd-filter",
       "conv2d_backward_filter",
       {{N, 24, 24, 64}, {N, 26, 26, 32}},
       Attrs{{"filter_shape", I{3, 3, 32, 64}}},
       conv_flops(N, 24, 24, 64, 3, 32)},
      {"conv1 bwd-filter",
       "conv2d_backward_filter",
       {{N, 26, 26, 32}, {N, 28, 28, 1}},
       Attrs{{"filter_shape", I{3, 3, 1, 32}}},
       conv_flops(N, 26, 26, 32, 3, 1)},
      {"DEPS conv N64 C32 32x32 K64 fwd",
       "conv2d",
       {{64, 32, 32, 32}, {3, 3, 32, 64}},
       Attrs{{"padding", "same"}},
       conv_flops(64, 32, 32, 64, 3, 32)},
      {"dense1 fwd 128x9216 . 9216x128",
       "matmul",
       {{N, 9216}, {9216, 128}},
       {},
       2.0 * N * 9216 * 128},
      {"dense1 dA = dC . B^T",
       "matmul",
       {{N, 128}, {9216, 128}},
       Attrs{{"transpose_b", true}},
       2.0 * N * 9216 * 128},
      {"dense1 dB = A^T . dC",
       "matmul",
       {{N, 9216}, {N, 128}},
       Attrs{{"transpose_a", true}},
       2.0 * N * 9216 * 128},
      {"dense2 fwd 128x128 . 128x10", "matmul", {{N, 128}, {128, 10}}, {}, 2.0 * N * 128 * 10},
      {"maxpool 2x2 fwd 24x24x64",
       "max_pool2d",
       {{N, 24, 24, 64}},
       Attrs{{"pool_size", I{2, 2}}},
       0},
  };
  Philox rng(1);
  for (const char* backend : {"cpu"}) {
    for (auto& c : cases) {
      Graph g;
      std::vector<Value> ins;
      for (size_t i = 0; i < c.inputs.size(); ++i)
        ins.push_back(g.input({DType::f32, c.inputs[i]}, "in"));
      Value y = g.add(c.op, ins, c.attrs);
      Executable exe(g, ins, {y}, CompileOptions{.backend = backend});
      for (int i = 0; i < exe.num_inputs(); ++i) {
        float* p = exe.input(i).data<float>();
        for (int64_t k = 0; k < exe.input(i).numel(); ++k) p[k] = rng.uniform(-1.f, 1.f);
      }
      double ms = median_ms([&] { exe.run(); }, reps);
      if (c.flops > 0)
        std::printf("%-38s %8.3f ms %7.1f GFLOP/s %4.0f%% of peak | cpu/thread %8.3f ms\n",
                    c.name.c_str(), ms, c.flops / ms / 1e6, 100 * c.flops / ms / 1e6 / peak,
                    g_cpu_ms);
      else
        std::printf("%-38s %8.3f ms                               | cpu/thread %8.3f ms\n",
                    c.name.c_str(), ms, g_cpu_ms);
    }
  }
  // The max_pool2d backward needs a consistent y: run it as part of a small graph. NHWC, and x
  // and dx in the layout pass's blocked nChw16c (as in the reference CNN's train step).
  for (const char* layout : {"nhwc", "nChw16c"}) {
    Graph g;
    Value x = g.input({DType::f32, Shape{N, 24, 24, 64}}, "x");
    Value dy = g.input({DType::f32, Shape{N, 12, 12, 64}}, "dy");
    Attrs pa{{"pool_size", I{2, 2}}, {"src_layout", std::string(layout)}};
    Value y = g.add("max_pool2d", {x}, pa);
    Value dx = g.add("max_pool2d_grad", {dy, x, y}, pa);
    Executable exe(g, {x, dy}, {dx});
    double ms = median_ms([&] { exe.run(); }, reps);
    const std::string name = std::string("maxpool fwd+bwd 24x24x64 ") + layout;
    std::printf("%-38s %8.3f ms                               | cpu/thread %8.3f ms\n",
                name.c_str(), ms, g_cpu_ms);
  }
  std::printf("health: FMA probe %.0f GFLOP/s (after)\n", fma_probe());
  return 0;
}
