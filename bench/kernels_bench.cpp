// Kernel benchmark: conv2d fwd / bwd-input / bwd-filter, matmul and pooling on the reference
// CNN's shapes (batch 128), or every convolution pass of the peer bench's small ResNet
// (bench_resnet.h, batch 64), in float32 or bfloat16, through the same compiled-kernel path
// training uses. Prints GFLOP/s (median of repeats) and its share of the peak: an FMA-loop probe
// (run before and after, to spot a disturbed run) for float32; twice that for bfloat16 on a CPU
// with AVX512-BF16 (one vdpbf16ps does two multiply-adds per fp32 lane, at the FMA's rate).
//   kernels_bench [threads] [reps] [--model cnn|resnet] [--dtype float32|bfloat16]
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
  double flops;   // of one call
  int count = 1;  // calls per train step (the ResNet's table)
};

static double conv_flops(int64_t n, int64_t oh, int64_t ow, int64_t o, int64_t k, int64_t cg) {
  return 2.0 * n * oh * ow * o * k * k * cg;
}

// The ResNet's convolutions ('same' padding, no bias), each with its count in the network and
// whether the step needs its input gradient (not for the stem, whose input is the image).
struct ResnetConv {
  const char* name;
  int64_t hw, c, o, k, stride, count;
  bool input_grad;
};
static const ResnetConv kResnetConvs[] = {
    {"stem 64x64x3->32 3x3/2", 64, 3, 32, 3, 2, 1, false},
    {"32x32x32->32 3x3", 32, 32, 32, 3, 1, 2, true},
    {"32x32x32->64 3x3/2", 32, 32, 64, 3, 2, 1, true},
    {"32x32x32->64 1x1/2", 32, 32, 64, 1, 2, 1, true},
    {"16x16x64->64 3x3", 16, 64, 64, 3, 1, 1, true},
    {"16x16x64->128 3x3/2", 16, 64, 128, 3, 2, 1, true},
    {"16x16x64->128 1x1/2", 16, 64, 128, 1, 2, 1, true},
    {"8x8x128->128 3x3", 8, 128, 128, 3, 1, 1, true},
};

// Every pass of every ResNet convolution at batch 64.
static std::vector<Case> resnet_cases() {
  const int64_t N = 64;
  std::vector<Case> out;
  for (const ResnetConv& r : kResnetConvs) {
    const int64_t oh = (r.hw + r.stride - 1) / r.stride;
    const Attrs a{{"padding", std::string("same")}, {"strides", I{r.stride, r.stride}}};
    const Shape x{N, r.hw, r.hw, r.c}, w{r.k, r.k, r.c, r.o}, y{N, oh, oh, r.o};
    const double f = conv_flops(N, oh, oh, r.o, r.k, r.c);
    Attrs ai = a, af = a;
    ai.set("input_shape", x.vec());
    af.set("filter_shape", w.vec());
    const int n = int(r.count);
    out.push_back({std::string(r.name) + " fwd", "conv2d", {x, w}, a, f, n});
    if (r.input_grad)
      out.push_back(
          {std::string(r.name) + " bwd-input", "conv2d_backward_input", {y, w}, ai, f, n});
    out.push_back(
        {std::string(r.name) + " bwd-filter", "conv2d_backward_filter", {y, x}, af, f, n});
  }
  return out;
}

// Median ms of one op alone, compiled for the cpu backend, on uniform(-1, 1) inputs of `dtype`.
static double time_case(const Case& c, DType dtype, Philox& rng, int reps) {
  Graph g;
  std::vector<Value> ins;
  for (const Shape& s : c.inputs) ins.push_back(g.input({dtype, s}, "in"));
  Executable exe(g, ins, {g.add(OpId::named(c.op), ins, c.attrs)},
                 CompileOptions{.backend = "cpu"});
  for (int k = 0; k < exe.num_inputs(); ++k) {
    Tensor& t = exe.input(k);
    for (int64_t e = 0; e < t.numel(); ++e) {
      const float v = rng.uniform(-1.f, 1.f);
      if (dtype == DType::bf16)
        t.data<bf16>()[e] = f32_to_bf16(v);
      else
        t.data<float>()[e] = v;
    }
  }
  return median_ms([&] { exe.run(); }, reps);
}

int main(int argc, char** argv) {
  std::vector<std::string> pos;
  std::string model = "cnn", dtype = "float32";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--model" || a == "--dtype") && i + 1 < argc)
      (a == "--model" ? model : dtype) = argv[++i];
    else if (a.rfind("--", 0) == 0) {
      std::fprintf(stderr,
                   "kernels_bench: unknown flag %s\nusage: kernels_bench [threads] [reps] "
                   "[--model cnn|resnet] [--dtype float32|bfloat16]\n",
                   a.c_str());
      return 2;
    } else
      pos.push_back(a);
  }
  if ((model != "cnn" && model != "resnet") || (dtype != "float32" && dtype != "bfloat16")) {
    std::fprintf(stderr, "kernels_bench: --model is cnn or resnet, --dtype float32 or bfloat16\n");
    return 2;
  }
  const bool bf = dtype == "bfloat16";
  if (bf && model != "resnet") {
    std::fprintf(stderr, "kernels_bench: --dtype bfloat16 is for --model resnet\n");
    return 2;
  }
  int threads = pos.size() > 0 ? std::atoi(pos[0].c_str()) : 2;
  int reps = pos.size() > 1 ? std::atoi(pos[1].c_str()) : 20;
  set_num_threads(threads);
  const char* act = std::getenv("LOCKSTEP_CONV_ACT");
  std::printf("threads %d, reps %d, model %s, dtype %s, conv activation layout %s\n", threads, reps,
              model.c_str(), dtype.c_str(), act ? act : "nhwc");
  const double fma = std::max(fma_probe(), fma_probe());  // the first may run at a low clock
  std::printf(
      "health: FMA probe %.0f GFLOP/s = this machine's fp32 peak on %d threads (a Zen4-class\n"
      "core does one zmm FMA per cycle, ~116 GFLOP/s; DEPENDENCIES.md's Zen5 does ~250)\n",
      fma, threads);
#ifdef __AVX512BF16__
  const double peak = bf ? 2 * fma : fma;
#else
  const double peak = fma;  // no bf16 dot product: bf16 convolutions run at the fp32 rate
#endif
  if (bf) std::printf("bfloat16 peak taken as %.0f GFLOP/s\n", peak);
  if (model == "resnet") {
    Philox rng(1);
    double total_ms = 0, total_flops = 0;
    for (const Case& c : resnet_cases()) {
      const double ms = time_case(c, bf ? DType::bf16 : DType::f32, rng, reps);
      total_ms += c.count * ms;
      total_flops += c.count * c.flops;
      std::printf("%-38s x%d %8.3f ms %7.1f GFLOP/s %4.0f%% of peak\n", c.name.c_str(), c.count, ms,
                  c.flops / ms / 1e6, 100 * c.flops / ms / 1e6 / peak);
    }
    std::printf("all convolution passes of one train step: %.2f ms, %.1f GFLOP/s, %.0f%% of peak\n",
                total_ms, total_flops / total_ms / 1e6, 100 * total_flops / total_ms / 1e6 / peak);
    std::printf("health: FMA probe %.0f GFLOP/s (after)\n", fma_probe());
    return 0;
  }
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
  for (auto& c : cases) {
    const double ms = time_case(c, DType::f32, rng, reps);
    if (c.flops > 0)
      std::printf("%-38s %8.3f ms %7.1f GFLOP/s %4.0f%% of peak | cpu/thread %8.3f ms\n",
                  c.name.c_str(), ms, c.flops / ms / 1e6, 100 * c.flops / ms / 1e6 / peak,
                  g_cpu_ms);
    else
      std::printf("%-38s %8.3f ms                               | cpu/thread %8.3f ms\n",
                  c.name.c_str(), ms, g_cpu_ms);
  }
  // The max_pool2d backward needs a consistent y: run it as part of a small graph. NHWC, and x
  // and dx in the layout pass's blocked nChw16c (as in the reference CNN's train step).
  for (const char* layout : {"nhwc", "nChw16c"}) {
    Graph g;
    Value x = g.input({DType::f32, Shape{N, 24, 24, 64}}, "x");
    Value dy = g.input({DType::f32, Shape{N, 12, 12, 64}}, "dy");
    Attrs pa{{"pool_size", I{2, 2}}, {"src_layout", std::string(layout)}};
    Value y = g.add(op::max_pool2d, {x}, pa);
    Value dx = g.add(op::max_pool2d_grad, {dy, x, y}, pa);
    Executable exe(g, {x, dy}, {dx});
    double ms = median_ms([&] { exe.run(); }, reps);
    const std::string name = std::string("maxpool fwd+bwd 24x24x64 ") + layout;
    std::printf("%-38s %8.3f ms                               | cpu/thread %8.3f ms\n",
                name.c_str(), ms, g_cpu_ms);
  }
  std::printf("health: FMA probe %.0f GFLOP/s (after)\n", fma_probe());
  return 0;
}
