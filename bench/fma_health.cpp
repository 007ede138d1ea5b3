// Machine-health probe for benchmarks: the fp32 FMA throughput of N threads, and the
// physical peak it should reach. The shared host sometimes squeezes both vCPUs onto one core;
// the bench scripts run this between rounds and repeat a round whose probe is low.
//
// What it measures, so that the compiler cannot fold or drop it:
//  - FMA: an inline-assembly loop of 16 independent vector accumulators (zmm with AVX-512F,
//    else ymm with FMA3), each iteration 16 vfmadd231ps, on every thread at once (OpenMP);
//    the accumulators are summed and printed ("checksum").
//  - the clock: a dependent chain of integer adds (1 cycle each on every x86 core since the
//    P6), timed on one thread; /proc/cpuinfo's MHz (the TSC rate under KVM) is not the clock
//    under load, and is printed only for comparison.
//  - the peak: cores x FLOPs/cycle/core (FMA units x vector lanes x 2, from the CPU family)
//    x the measured clock.
//  - memory bandwidth: a STREAM-style triad a[i] = b[i] + s * c[i] over three 48 MiB arrays
//    (past any last-level cache here), on every thread at once, median of 3 passes; 3 x 48 MiB
//    moved per pass counted (the write-allocate read is not). And the same over three 4 MiB
//    arrays (in the 32 MiB L3 here, past the 2 MiB L2s), median of 20 passes. The FMA loop
//    lives in registers and sees neither a neighbour that saturates the memory bus nor one that
//    evicts the shared L3; the bench scripts record both rates with every measurement.
//  - the exchange between threads: 2 threads, an 8 MiB buffer in halves, each pass thread t
//    updating half (t + pass) % 2, so that each half moves to the other thread's core every
//    pass, as a layer's output does when every kernel is split over the threads. Where the two
//    cores share an L3 it reads ~260 GB/s here; where the host has put the vCPUs on different
//    CCDs, ~95 GB/s, and Lockstep's float32 training steps run 25-30% slower
//    (docs/benchmarks.md, "Predict in thread tiles"). Median of 5 x 40 passes.
// Prints one JSON line (last line of stdout):
//   {"fma_gflops" (median of the reps), "best_gflops", "threads", "clock_ghz",
//   "flops_per_cycle_per_core", "peak_gflops",
//    "fraction_of_peak", "isa", "peak_source", "cpuinfo_mhz", "checksum", "reps_gflops",
//    "triad_gbps" (DRAM), "l3_triad_gbps", "exchange_gbps" (0 with one thread)}
//   build/bin/fma_health [THREADS=2] [--reps N=5] [--seconds S=0.1 per rep]
#include <cpuid.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// 16 accumulators x 16 lanes x 2 FLOPs = 512 FLOPs per iteration. Returns the sum of all
// accumulator lanes (each grows by iters * a * b).
__attribute__((target("avx512f"))) float fma_loop_zmm(int64_t iters, float a, float b) {
  alignas(64) float out[16];
  asm volatile(
      "vbroadcastss %[a], %%zmm16\n\t"
      "vbroadcastss %[b], %%zmm17\n\t"
      "vpxord %%zmm0, %%zmm0, %%zmm0\n\t"
      "vmovaps %%zmm0, %%zmm1\n\t vmovaps %%zmm0, %%zmm2\n\t vmovaps %%zmm0, %%zmm3\n\t"
      "vmovaps %%zmm0, %%zmm4\n\t vmovaps %%zmm0, %%zmm5\n\t vmovaps %%zmm0, %%zmm6\n\t"
      "vmovaps %%zmm0, %%zmm7\n\t vmovaps %%zmm0, %%zmm8\n\t vmovaps %%zmm0, %%zmm9\n\t"
      "vmovaps %%zmm0, %%zmm10\n\t vmovaps %%zmm0, %%zmm11\n\t vmovaps %%zmm0, %%zmm12\n\t"
      "vmovaps %%zmm0, %%zmm13\n\t vmovaps %%zmm0, %%zmm14\n\t vmovaps %%zmm0, %%zmm15\n\t"
      "1:\n\t"
      "vfmadd231ps %%zmm16, %%zmm17, %%zmm0\n\t vfmadd231ps %%zmm16, %%zmm17, %%zmm1\n\t"
      "vfmadd231ps %%zmm16, %%zmm17, %%zmm2\n\t vfmadd231ps %%zmm16, %%zmm17, %%zmm3\n\t"
      "vfmadd231ps %%zmm16, %%zmm17, %%zmm4\n\t vfmadd231ps %%zmm16, %%zmm17, %%zmm5\n\t"
      "vfmadd231ps %%zmm16, %%zmm17, %%zmm6\n\t vfmadd231ps %%zmm16, %%zmm17, %%zmm7\n\t"
      "vfmadd231ps %%zmm16, %%zmm17, %%zmm8\n\t vfmadd231ps %%zmm16, %%zmm17, %%zmm9\n\t"
      "vfmadd231ps %%zmm16, %%zmm17, %%zmm10\n\t vfmadd231ps %%zmm16, %%zmm17, %%zmm11\n\t"
      "vfmadd231ps %%zmm16, %%zmm17, %%zmm12\n\t vfmadd231ps %%zmm16, %%zmm17, %%zmm13\n\t"
      "vfmadd231ps %%zmm16, %%zmm17, %%zmm14\n\t vfmadd231ps %%zmm16, %%zmm17, %%zmm15\n\t"
      "dec %[n]\n\t"
      "jnz 1b\n\t"
      "vaddps %%zmm1, %%zmm0, %%zmm0\n\t vaddps %%zmm3, %%zmm2, %%zmm2\n\t"
      "vaddps %%zmm5, %%zmm4, %%zmm4\n\t vaddps %%zmm7, %%zmm6, %%zmm6\n\t"
      "vaddps %%zmm9, %%zmm8, %%zmm8\n\t vaddps %%zmm11, %%zmm10, %%zmm10\n\t"
      "vaddps %%zmm13, %%zmm12, %%zmm12\n\t vaddps %%zmm15, %%zmm14, %%zmm14\n\t"
      "vaddps %%zmm2, %%zmm0, %%zmm0\n\t vaddps %%zmm6, %%zmm4, %%zmm4\n\t"
      "vaddps %%zmm10, %%zmm8, %%zmm8\n\t vaddps %%zmm14, %%zmm12, %%zmm12\n\t"
      "vaddps %%zmm4, %%zmm0, %%zmm0\n\t vaddps %%zmm12, %%zmm8, %%zmm8\n\t"
      "vaddps %%zmm8, %%zmm0, %%zmm0\n\t"
      "vmovups %%zmm0, (%[out])\n\t"
      "vzeroupper\n\t"
      : [n] "+r"(iters)
      : [a] "m"(a), [b] "m"(b), [out] "r"(out)
      : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
        "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17");
  float s = 0;
  for (float v : out) s += v;
  return s;
}

// 12 ymm accumulators x 8 lanes x 2 FLOPs = 192 FLOPs per iteration (ymm12/13 hold a and b).
__attribute__((target("avx2,fma"))) float fma_loop_ymm(int64_t iters, float a, float b) {
  alignas(32) float out[8];
  asm volatile(
      "vbroadcastss %[a], %%ymm12\n\t"
      "vbroadcastss %[b], %%ymm13\n\t"
      "vxorps %%ymm0, %%ymm0, %%ymm0\n\t"
      "vmovaps %%ymm0, %%ymm1\n\t vmovaps %%ymm0, %%ymm2\n\t vmovaps %%ymm0, %%ymm3\n\t"
      "vmovaps %%ymm0, %%ymm4\n\t vmovaps %%ymm0, %%ymm5\n\t vmovaps %%ymm0, %%ymm6\n\t"
      "vmovaps %%ymm0, %%ymm7\n\t vmovaps %%ymm0, %%ymm8\n\t vmovaps %%ymm0, %%ymm9\n\t"
      "vmovaps %%ymm0, %%ymm10\n\t vmovaps %%ymm0, %%ymm11\n\t"
      "1:\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm0\n\t vfmadd231ps %%ymm12, %%ymm13, %%ymm1\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm2\n\t vfmadd231ps %%ymm12, %%ymm13, %%ymm3\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm4\n\t vfmadd231ps %%ymm12, %%ymm13, %%ymm5\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm6\n\t vfmadd231ps %%ymm12, %%ymm13, %%ymm7\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm8\n\t vfmadd231ps %%ymm12, %%ymm13, %%ymm9\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm10\n\t vfmadd231ps %%ymm12, %%ymm13, %%ymm11\n\t"
      "dec %[n]\n\t"
      "jnz 1b\n\t"
      "vaddps %%ymm1, %%ymm0, %%ymm0\n\t vaddps %%ymm3, %%ymm2, %%ymm2\n\t"
      "vaddps %%ymm5, %%ymm4, %%ymm4\n\t vaddps %%ymm7, %%ymm6, %%ymm6\n\t"
      "vaddps %%ymm9, %%ymm8, %%ymm8\n\t vaddps %%ymm11, %%ymm10, %%ymm10\n\t"
      "vaddps %%ymm2, %%ymm0, %%ymm0\n\t vaddps %%ymm6, %%ymm4, %%ymm4\n\t"
      "vaddps %%ymm10, %%ymm8, %%ymm8\n\t vaddps %%ymm4, %%ymm0, %%ymm0\n\t"
      "vaddps %%ymm8, %%ymm0, %%ymm0\n\t"
      "vmovups %%ymm0, (%[out])\n\t"
      "vzeroupper\n\t"
      : [n] "+r"(iters)
      : [a] "m"(a), [b] "m"(b), [out] "r"(out)
      : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
        "xmm9", "xmm10", "xmm11", "xmm12", "xmm13");
  float s = 0;
  for (float v : out) s += v;
  return s;
}

// A dependent chain of 100 one-cycle adds per iteration; the loop counter is a separate chain
// that runs alongside. Returns cycles per second.
double measure_clock_hz(double seconds) {
  int64_t iters = 100'000;
  double best = 0;
  auto t_end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < t_end) {
    uint64_t x = 0, one = 1;  // a register operand: no core folds reg-reg add chains
    int64_t n = iters;
    auto t0 = Clock::now();
    asm volatile(
        "1:\n\t"
        ".rept 100\n\t add %[one], %[x]\n\t .endr\n\t"
        "dec %[n]\n\t"
        "jnz 1b\n\t"
        : [x] "+r"(x), [n] "+r"(n)
        : [one] "r"(one)
        : "cc");
    double s = seconds_since(t0);
    if (x != uint64_t(iters) * 100) std::abort();  // the chain ran in full
    best = std::max(best, double(x) / s);
    if (s < 0.005) iters *= 2;
  }
  return best;
}

struct CpuInfo {
  std::string vendor;
  unsigned family = 0, model = 0;
  bool avx512f = false, fma = false;
};

CpuInfo cpu_info() {
  CpuInfo c;
  unsigned a = 0, b = 0, cc = 0, d = 0;
  __get_cpuid(0, &a, &b, &cc, &d);
  char v[13] = {};
  std::memcpy(v, &b, 4);
  std::memcpy(v + 4, &d, 4);
  std::memcpy(v + 8, &cc, 4);
  c.vendor = v;
  __get_cpuid(1, &a, &b, &cc, &d);
  unsigned base_family = (a >> 8) & 0xf, base_model = (a >> 4) & 0xf;
  c.family = base_family == 0xf ? base_family + ((a >> 20) & 0xff) : base_family;
  c.model = (base_family == 0xf || base_family == 0x6) ? base_model | (((a >> 16) & 0xf) << 4)
                                                       : base_model;
  __builtin_cpu_init();
  c.avx512f = __builtin_cpu_supports("avx512f");
  c.fma = __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2");
  return c;
}

// fp32 FLOPs per cycle per core at full FMA throughput: FMA units x fp32 lanes per unit x 2.
// 0 when the family is not in the table (the probe then uses its measured rate).
int table_flops_per_cycle(const CpuInfo& c) {
  if (c.vendor == "AuthenticAMD") {
    if (c.family == 0x17) return c.model < 0x30 ? 16 : 32;  // Zen/Zen+ 2x128, Zen 2 2x256
    if (c.family == 0x19) return 32;  // Zen 3 2x256; Zen 4 runs a zmm FMA on both 256-bit pipes
    if (c.family == 0x1a) return c.avx512f ? 64 : 32;  // Zen 5: 2x512 (server/desktop)
  }
  if (c.vendor == "GenuineIntel" && c.family == 6) {
    // Xeon Scalable and later server parts with AVX-512: two 512-bit FMA units (some low SKUs
    // have one; the measured rate shows it). Everything with AVX2+FMA: two 256-bit units.
    if (c.avx512f) return 64;
    if (c.fma) return 32;
  }
  return 0;
}

double cpuinfo_mhz() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("cpu MHz", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) return std::atof(line.c_str() + p + 1);
    }
  }
  return 0;
}

// The triad's bandwidth (GB/s, median of `passes`) on `threads` threads, arrays of `mib` MiB.
double triad_gbps(int threads, int passes, size_t mib) {
  const size_t n = mib << 18;  // floats per array
  std::vector<float> a(n), b(n, 1.f), c(n, 2.f);
  std::vector<double> rates;
  for (int p = 0; p <= passes; ++p) {  // pass 0 warms the pages up
    const float s = 0.5f + float(p);
    auto t0 = Clock::now();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < int64_t(n); ++i) a[size_t(i)] = b[size_t(i)] + s * c[size_t(i)];
    const double sec = seconds_since(t0);
    if (p > 0) rates.push_back(3.0 * double(n) * sizeof(float) / sec / 1e9);
  }
  volatile float keep = a[n / 2];  // the result is read
  (void)keep;
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

// The exchange probe (see the header): GB/s read and written, median of `reps` runs of 40 passes.
double exchange_gbps(int threads, int reps) {
  if (threads < 2) return 0;
  const int64_t n = int64_t(2) << 20, half = n / 2;  // floats: 8 MiB
  std::vector<float> a(size_t(n), 1.f);
  std::vector<double> rates;
  for (int r = 0; r <= reps; ++r) {  // rep 0 warms up
    auto t0 = Clock::now();
    for (int p = 0; p < 40; ++p) {
#pragma omp parallel num_threads(2)
      {
        float* x = a.data() + ((omp_get_thread_num() + p) % 2) * half;
        for (int64_t i = 0; i < half; ++i) x[i] = x[i] * 0.999f + 1.f;
      }
    }
    if (r > 0) rates.push_back(2.0 * double(n) * sizeof(float) * 40 / seconds_since(t0) / 1e9);
  }
  volatile float keep = a[size_t(half)];  // the result is read
  (void)keep;
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

int usage() {
  std::fprintf(stderr,
               "usage: fma_health [THREADS=2] [--reps N=5] [--seconds S=0.1]\n"
               "  THREADS >= 1 threads run the FMA loop at once; each of N reps lasts ~S s.\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, reps = 5;
  double rep_seconds = 0.1;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--reps" && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (k == "--seconds" && i + 1 < argc)
      rep_seconds = std::atof(argv[++i]);
    else if (!k.empty() && k[0] != '-')
      threads = std::atoi(k.c_str());
    else
      return usage();
  }
  if (threads < 1 || reps < 1 || !(rep_seconds > 0)) return usage();

  CpuInfo cpu = cpu_info();
  if (!cpu.avx512f && !cpu.fma) {
    std::fprintf(stderr, "fma_health: this CPU has neither AVX-512F nor AVX2+FMA\n");
    return 1;
  }
  const bool zmm = cpu.avx512f;
  const double flops_per_iter = zmm ? 512.0 : 192.0;
  auto loop = [&](int64_t n, float a, float b) {
    return zmm ? fma_loop_zmm(n, a, b) : fma_loop_ymm(n, a, b);
  };
  // a and b come from the command line's length so that nothing is a compile-time constant.
  const float a = 1e-4f * float(argc + 1), b = 1e-4f;

  // On one thread, before and after the FMA reps; the best short sample is the cores' own
  // clock (a sample the host descheduled only reads low).
  double clock_hz = measure_clock_hz(0.05);

  // Calibrate the iteration count of one rep on one thread (~rep_seconds).
  int64_t iters = 1 << 14;
  volatile float sink = 0;
  for (;;) {
    auto t0 = Clock::now();
    sink = sink + loop(iters, a, b);
    double s = seconds_since(t0);
    if (s > 0.02 || iters > (int64_t(1) << 40)) {
      iters = std::max<int64_t>(1, int64_t(double(iters) * rep_seconds / s));
      break;
    }
    iters *= 4;
  }

  std::vector<double> rates;
  double checksum = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    double sum = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sum)
    sum += loop(iters, a, b);
    double s = seconds_since(t0);
    checksum += sum;
    rates.push_back(flops_per_iter * double(iters) * threads / s / 1e9);
  }
  std::vector<double> sorted = rates;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2], best = sorted.back();
  clock_hz = std::max(clock_hz, measure_clock_hz(0.05));
  const double gbps = triad_gbps(threads, 3, 48), l3_gbps = triad_gbps(threads, 20, 4);
  const double exchange = exchange_gbps(threads, 5);

  int fpc = table_flops_per_cycle(cpu);
  const char* peak_source = "table";
  // The best rep's FLOPs/cycle of one core, rounded to a power of two: used when the family
  // is not in the table, or when the table is clearly too low for this CPU.
  const double measured_fpc = best / std::min(threads, omp_get_num_procs()) * 1e9 / clock_hz;
  if (fpc == 0 || measured_fpc > 1.25 * fpc) {
    fpc = 16;
    while (fpc * 1.5 < measured_fpc) fpc *= 2;
    peak_source = "measured";
  }
  const int cores = std::min(threads, omp_get_num_procs());
  const double peak = cores * fpc * clock_hz / 1e9;
  std::fprintf(
      stderr,
      "fma_health: %d threads, %s, clock %.2f GHz (cpuinfo says %.0f MHz), %d FLOPs/cycle/core "
      "(%s) -> peak %.0f GFLOP/s; measured median %.0f GFLOP/s = %.0f%% of peak\n",
      threads, zmm ? "avx512 zmm" : "avx2 ymm", clock_hz / 1e9, cpuinfo_mhz(), fpc, peak_source,
      peak, median, 100 * median / peak);
  std::printf(
      "{\"fma_gflops\": %.1f, \"best_gflops\": %.1f, \"threads\": %d, \"clock_ghz\": %.3f, "
      "\"flops_per_cycle_per_core\": %d, \"peak_gflops\": %.1f, \"fraction_of_peak\": %.3f, "
      "\"isa\": \"%s\", \"peak_source\": \"%s\", \"cpuinfo_mhz\": %.0f, \"checksum\": %.6g, "
      "\"reps_gflops\": [",
      median, best, threads, clock_hz / 1e9, fpc, peak, median / peak, zmm ? "avx512" : "avx2",
      peak_source, cpuinfo_mhz(), checksum);
  for (size_t i = 0; i < rates.size(); ++i) std::printf("%s%.1f", i ? ", " : "", rates[i]);
  std::printf("], \"triad_gbps\": %.1f, \"l3_triad_gbps\": %.1f, \"exchange_gbps\": %.1f}\n", gbps,
              l3_gbps, exchange);
  return 0;
}
