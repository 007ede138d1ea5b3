// The accelerator seam (docs/accelerator.md): an Executable's arena and workspace come from its
// device's allocator, a device without a backend is a clear error, and the host<->device copy
// points round-trip.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "lockstep/core/allocator.h"
#include "lockstep/core/device_allocator.h"
#include "lockstep/graph/executable.h"

using namespace lockstep;

namespace {

// x[4,5] -> relu(x @ w + b) and its column mean; w, b are variables.
struct Net {
  Graph g;
  Value x, y, m;
  Net() {
    x = g.input({DType::f32, Shape{4, 5}}, "x");
    std::vector<float> wv(15), bv{0.5f, -0.25f, 0.f};
    for (int i = 0; i < 15; ++i) wv[size_t(i)] = 0.1f * float(i % 7) - 0.3f;
    Value w = g.variable(
        std::make_shared<Variable>(Variable{"w", Tensor::from_vector(Shape{5, 3}, wv), true}));
    Value b = g.variable(
        std::make_shared<Variable>(Variable{"b", Tensor::from_vector(Shape{3}, bv), true}));
    y = g.add(op::relu, {g.add(op::bias_add, {g.add(op::matmul, {x, w}), b})});
    m = g.add(op::reduce_mean, {y}, Attrs{{"axes", std::vector<int64_t>{0}}, {"keepdims", false}});
  }
};

Tensor batch() {
  std::vector<float> v(20);
  for (int i = 0; i < 20; ++i) v[size_t(i)] = float(i % 9) - 3.5f;
  return Tensor::from_vector(Shape{4, 5}, v);
}

// Runs Net on `options` feeding input(0) directly (today's callers), returns both outputs.
std::vector<std::vector<float>> run_net(CompileOptions options) {
  Net n;
  Executable exe(n.g, {n.x}, {n.y, n.m}, options);
  exe.input(0).copy_from(batch());
  exe.run();
  return {exe.output(0).to_vector(), exe.output(1).to_vector()};
}

// A pretend accelerator backed by host memory: counts what the Executable asks of it.
struct Counts {
  int allocs = 0, frees = 0, zeros = 0, h2d = 0, d2h = 0;
};
class CountingAllocator final : public DeviceAllocator {
 public:
  CountingAllocator(int index, Counts* c) : index_(index), c_(c) {}
  Device device() const override { return {DeviceType::cuda, index_}; }
  bool host_accessible() const override { return false; }
  void* allocate(size_t bytes) override { return ++c_->allocs, aligned_alloc_bytes(bytes); }
  void deallocate(void* p) override { ++c_->frees, aligned_free(p); }
  void zero(void* p, size_t bytes) override { ++c_->zeros, std::memset(p, 0, bytes); }
  void copy_from_host(void* d, const void* s, size_t n) override {
    ++c_->h2d, std::memcpy(d, s, n);
  }
  void copy_to_host(void* d, const void* s, size_t n) override { ++c_->d2h, std::memcpy(d, s, n); }

 private:
  int index_;
  Counts* c_;
};

// Installs the pretend backend for DeviceType::cuda for one test.
struct PretendCuda {
  Counts counts;
  PretendCuda() {
    set_device_allocator_factory(DeviceType::cuda, [this](int index) {
      return std::make_unique<CountingAllocator>(index, &counts);
    });
  }
  ~PretendCuda() { set_device_allocator_factory(DeviceType::cuda, nullptr); }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(DeviceSeam, CpuArenaRunsAsBefore) {
  // The compiled path (arena from the cpu allocator) matches the eager oracle (fresh host
  // tensors) bit for bit, on any cpu:K and both kernel backends, with no allocation per step.
  for (std::string backend : {"cpu", "reference"}) {
    CompileOptions eager{.backend = backend, .eager = true};
    const auto want = run_net(eager);
    for (Device d : {Device::cpu(), Device{DeviceType::cpu, 1}}) {
      CompileOptions o{.backend = backend, .device = d};
      EXPECT_EQ(run_net(o), want) << backend << " on " << d.str();
    }
  }
  Net n;
  Executable exe(n.g, {n.x}, {n.y, n.m});
  EXPECT_EQ(exe.device(), Device::cpu());
  exe.input(0).copy_from(batch());
  exe.run();
  const size_t before = allocation_count();
  exe.run();
  EXPECT_EQ(allocation_count(), before);
}

TEST(DeviceSeam, DeviceWithoutBackendIsAClearError) {
  const std::string e = error_of([] { device_allocator({DeviceType::cuda, 1}); });
  EXPECT_NE(e.find("cuda:1"), std::string::npos) << e;
  EXPECT_NE(e.find("LOCKSTEP_WITH_CUDA"), std::string::npos) << e;
  Net n;
  const std::string c = error_of([&] {
    Executable exe(n.g, {n.x}, {n.y}, {.device = {DeviceType::cuda, 0}});
  });
  EXPECT_NE(c.find("device 'cuda:0'"), std::string::npos) << c;
  EXPECT_NE(c.find("no cuda backend"), std::string::npos) << c;
  EXPECT_NE(error_of([] { set_device_allocator_factory(DeviceType::cpu, nullptr); }), "");
}

TEST(DeviceSeam, CopyHelpersRoundTrip) {
  Net n;
  Executable exe(n.g, {n.x}, {n.y, n.m});
  const Tensor x = batch();
  exe.copy_input_from_host(0, x);
  EXPECT_EQ(exe.input(0).to_vector(), x.to_vector());
  exe.run();
  Tensor y, m = Tensor::full(Shape{3}, -1.f);
  exe.copy_output_to_host(0, y);  // undefined: allocated on the host
  exe.copy_output_to_host(1, m);  // defined: written in place
  EXPECT_EQ(y.to_vector(), exe.output(0).to_vector());
  EXPECT_EQ(m.to_vector(), exe.output(1).to_vector());
  EXPECT_EQ(run_net({}), (std::vector<std::vector<float>>{y.to_vector(), m.to_vector()}));

  const std::string shape = error_of([&] {
    exe.copy_input_from_host(0, Tensor::zeros(Shape{5, 4}));
  });
  EXPECT_NE(shape.find("copy_input_from_host(0)"), std::string::npos) << shape;
  EXPECT_NE(shape.find("float32(5, 4)"), std::string::npos) << shape;
  EXPECT_NE(error_of([&] { exe.copy_input_from_host(1, x); }).find("no input 1"),
            std::string::npos);
  Tensor wrong = Tensor::zeros(Shape{4});
  EXPECT_NE(error_of([&] { exe.copy_output_to_host(1, wrong); }), "");
  EXPECT_NE(error_of([&] { exe.copy_input_from_host(0, x.transpose(0, 1)); }), "");
}

TEST(DeviceSeam, ArenaAndEdgesGoThroughTheDevicesAllocator) {
  PretendCuda cuda;
  std::vector<std::vector<float>> got;
  {
    Net n;
    Executable exe(n.g, {n.x}, {n.y, n.m}, {.device = {DeviceType::cuda, 0}});
    EXPECT_EQ(exe.device(), (Device{DeviceType::cuda, 0}));
    EXPECT_GE(cuda.counts.allocs, 1);  // the arena (and the workspace, when kernels ask)
    EXPECT_EQ(cuda.counts.zeros, 1);
    exe.copy_input_from_host(0, batch());
    exe.run();
    Tensor y, m;
    exe.copy_output_to_host(0, y);
    exe.copy_output_to_host(1, m);
    EXPECT_EQ(cuda.counts.h2d, 1);
    EXPECT_EQ(cuda.counts.d2h, 2);
    got = {y.to_vector(), m.to_vector()};
  }
  EXPECT_EQ(cuda.counts.frees, cuda.counts.allocs);
  EXPECT_EQ(got, run_net({}));
  Net n;
  const std::string e = error_of([&] {
    Executable exe(n.g, {n.x}, {n.y}, {.eager = true, .device = {DeviceType::cuda, 0}});
  });
  EXPECT_NE(e.find("run_eagerly"), std::string::npos) << e;
  EXPECT_NE(e.find("cuda:0"), std::string::npos) << e;
  // A backend no module registers (no "cuda" here) is an error naming the registered ones.
  const std::string f = error_of([&] {
    Executable exe(n.g, {n.x}, {n.y}, {.backend = "cuda", .device = {DeviceType::cuda, 0}});
  });
  EXPECT_NE(f.find("unknown backend \"cuda\""), std::string::npos) << f;
  EXPECT_NE(f.find("\"cpu\", \"reference\""), std::string::npos) << f;
  // A node the backend has no kernel for on the device's memory: the host reference fallback
  // is refused instead of reading device memory (concat has only a reference kernel).
  Graph g;
  Value x = g.input({DType::f32, Shape{2, 3}}, "x");
  Value y = g.add(op::concat, {x, x}, Attrs{{"axis", int64_t(1)}});
  const std::string h = error_of([&] {
    Executable exe(g, {x}, {y}, {.backend = "cpu", .device = {DeviceType::cuda, 0}});
  });
  EXPECT_NE(h.find("has no 'cpu' kernel"), std::string::npos) << h;
  EXPECT_NE(h.find("cannot run on cuda:0"), std::string::npos) << h;
}
