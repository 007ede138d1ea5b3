// Plugins other than the CPU one, played by tests/backends/pjrt_shim (a plugin that forwards to
// the CPU plugin but refuses create options it does not know, as the CUDA plugin does): the
// create options each plugin gets, connect() with a device count on a plugin that fixes its own,
// a null function pointer in a plugin's API table, the NVIDIA libraries found beside the CUDA
// plugin, the words for a --device that is no plugin file, LOCKSTEP_PJRT_PLUGIN against a
// plugin asked for, and clients created and destroyed repeatedly (and at exit).
#include <gtest/gtest.h>

#ifndef LOCKSTEP_XLA
TEST(XlaPlugin, NeedsTheXlaBuild) { GTEST_SKIP() << "built without LOCKSTEP_XLA"; }
#else
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "backends/xla/pjrt_client.h"
#include "backends/xla/xla_connect.h"
#include "backends/xla_test_util.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::xla;
using lockstep::test_util::error_of;
namespace fs = std::filesystem;

namespace {

const char* kAddModule = R"(module {
  func.func @main(%a: tensor<3xf32>, %b: tensor<3xf32>) -> tensor<3xf32> {
    %0 = stablehlo.add %a, %b : tensor<3xf32>
    return %0 : tensor<3xf32>
  }
})";

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The shim plugin, pointed at the CPU plugin ("" when there is no CPU plugin: `why` says so).
std::string shim_plugin(std::string& why) {
  if (!xla_test::shared_client().client) {
    why = xla_test::shared_client().why_not;
    return "";
  }
  setenv("PJRT_SHIM_TARGET", xla_test::shared_client().client->plugin().path().c_str(), 1);
  return LOCKSTEP_PJRT_SHIM;
}

#define SHIM_OR_SKIP()                         \
  std::string why_no_shim;                     \
  std::string shim = shim_plugin(why_no_shim); \
  if (shim.empty()) GTEST_SKIP() << "no PJRT CPU plugin: " << why_no_shim

std::string option_text(const PluginOption& o) {
  std::string v;
  if (auto* s = std::get_if<std::string>(&o.value)) v = *s;
  if (auto* i = std::get_if<int64_t>(&o.value)) v = std::to_string(*i);
  if (auto* f = std::get_if<float>(&o.value)) v = std::to_string(*f).substr(0, 4);
  if (auto* b = std::get_if<bool>(&o.value)) v = *b ? "true" : "false";
  if (auto* l = std::get_if<std::vector<int64_t> >(&o.value))
    for (int64_t x : *l) v += (v.empty() ? "" : ",") + std::to_string(x);
  return o.name + "=" + v;
}

std::string options_text(PluginKind kind, const PjrtClientOptions& o) {
  std::string s;
  for (const PluginOption& p : plugin_create_options(kind, o))
    s += (s.empty() ? "" : " ") + option_text(p);
  return s;
}

float run_add(const PjrtClient& client) {
  PjrtExecutable exe = client.compile(kAddModule);
  PjrtBuffer a = client.to_device(Tensor::from_vector(Shape{3}, {1, 2, 3}));
  PjrtBuffer b = client.to_device(Tensor::from_vector(Shape{3}, {10, 20, 30}));
  return client.to_host(exe.execute({&a, &b})[0]).to_vector()[2];
}

}  // namespace

TEST(XlaPlugin, EachPluginGetsOnlyTheCreateOptionsItTakes) {
  EXPECT_EQ(options_text(PluginKind::cpu, {.device_count = 2}), "cpu_device_count=2");
  EXPECT_EQ(options_text(PluginKind::cpu, {}), "");
  EXPECT_EQ(options_text(PluginKind::tpu, {.device_count = 2}), "");
  EXPECT_EQ(options_text(PluginKind::other, {.device_count = 2}), "");
  // CUDA: its own names; no preallocation by default (a shared GPU); the first N GPUs.
  EXPECT_EQ(options_text(PluginKind::cuda, {.device_count = 2}),
            "platform_name=cuda preallocate=false visible_devices=0,1");
  EXPECT_EQ(
      options_text(PluginKind::cuda,
                   {.gpu_preallocate = true, .gpu_memory_fraction = 0.5, .gpu_allocator = "bfc"}),
      "platform_name=cuda preallocate=true memory_fraction=0.50 allocator=bfc");
  setenv("LOCKSTEP_XLA_GPU_PREALLOCATE", "true", 1);
  setenv("LOCKSTEP_XLA_GPU_MEMORY_FRACTION", "0.25", 1);
  EXPECT_EQ(options_text(PluginKind::cuda, {}),
            "platform_name=cuda preallocate=true memory_fraction=0.25");
  EXPECT_EQ(options_text(PluginKind::cuda, {.gpu_preallocate = false}),
            "platform_name=cuda preallocate=false memory_fraction=0.25");
  setenv("LOCKSTEP_XLA_GPU_MEMORY_FRACTION", "1.5", 1);
  std::string err = error_of([] { plugin_create_options(PluginKind::cuda, {}); });
  EXPECT_TRUE(contains(err, "env LOCKSTEP_XLA_GPU_MEMORY_FRACTION='1.5'")) << err;
  EXPECT_EQ(options_text(PluginKind::cpu, {}), "");  // not read for the CPU plugin
  unsetenv("LOCKSTEP_XLA_GPU_MEMORY_FRACTION");
  setenv("LOCKSTEP_XLA_GPU_PREALLOCATE", "maybe", 1);
  err = error_of([] { plugin_create_options(PluginKind::cuda, {}); });
  EXPECT_TRUE(contains(err, "LOCKSTEP_XLA_GPU_PREALLOCATE=\"maybe\" is not a switch")) << err;
  unsetenv("LOCKSTEP_XLA_GPU_PREALLOCATE");
  err = error_of([] { plugin_create_options(PluginKind::cuda, {.gpu_allocator = "fast"}); });
  EXPECT_TRUE(contains(err, "default, platform, bfc or cuda_async")) << err;
  // Extra options go to any plugin as they are.
  EXPECT_EQ(options_text(PluginKind::other, {.extra_options = {{"node_id", int64_t(0)}}}),
            "node_id=0");
}

TEST(XlaPlugin, PluginsAreKnownByTheirFile) {
  EXPECT_EQ(plugin_kind_of("/v/xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so"), PluginKind::cpu);
  EXPECT_EQ(plugin_kind_of("/v/jax_plugins/xla_cuda13/xla_cuda_plugin.so"), PluginKind::cuda);
  EXPECT_EQ(plugin_kind_of("/v/libtpu/libtpu.so"), PluginKind::tpu);
  EXPECT_EQ(plugin_kind_of(LOCKSTEP_PJRT_SHIM), PluginKind::other);
}

// What connect() did before: cpu_device_count to every plugin. The shim, like the CUDA plugin,
// refuses it.
TEST(XlaPlugin, TheShimRefusesAnOptionItDoesNotKnowAsCudaDoes) {
  SHIM_OR_SKIP();
  std::string err = error_of([&] {
    PjrtClient::create({.plugin = shim, .extra_options = {{"cpu_device_count", int64_t(2)}}});
  });
  EXPECT_TRUE(contains(err,
                       "PJRT_Client_Create failed: Unexpected option name passed to "
                       "PJRT_Client_Create: cpu_device_count [INVALID_ARGUMENT]"))
      << err;
  EXPECT_TRUE(contains(err, "create options sent: cpu_device_count")) << err;
}

// connect() with a device count: the shim fixes its own count, so it gets no option, and the
// count is checked against the devices it has.
TEST(XlaPlugin, ConnectWithADeviceCountWorksOnAPluginThatFixesItsCount) {
  SHIM_OR_SKIP();
  std::shared_ptr<PjrtClient> client = create_client_with_devices(shim, 1);
  ASSERT_TRUE(client);
  const int have = int(client->devices().size());
  EXPECT_GE(have, 1);
  EXPECT_EQ(client->plugin().kind(), PluginKind::other);
  EXPECT_EQ(run_add(*client), 33.f);
  EXPECT_EQ(int(create_client_with_devices(shim, have)->devices().size()), have);
  std::string err = error_of([&] { create_client_with_devices(shim, have + 1); });
  EXPECT_TRUE(contains(err, "fixes its own device count (it takes no device-count option")) << err;
  EXPECT_TRUE(contains(err, "ask for at most " + std::to_string(have))) << err;
  // The CPU plugin itself takes the count.
  EXPECT_EQ(create_client_with_devices("cpu", 3)->devices().size(), 3u);
}

// A plugin whose table has the right version but a null function: an error naming the plugin
// and the function, before any call (it crashed the loader). The shim is copied per case: a
// plugin file loads once per process.
TEST(XlaPlugin, ANullFunctionPointerIsAnErrorNamingIt) {
  SHIM_OR_SKIP();
  auto dir = test_util::temp_dir("xla_null_entry", true);
  for (const char* fn : {"PJRT_Plugin_Initialize", "PJRT_Client_Compile", "PJRT_Error_Message",
                         "PJRT_Buffer_ToHostBuffer"}) {
    const fs::path copy = dir / (std::string("shim_") + fn + ".so");
    fs::copy_file(shim, copy);
    setenv("PJRT_SHIM_NULL", fn, 1);
    std::string err = error_of([&] { PjrtPlugin::load(copy.string()); });
    unsetenv("PJRT_SHIM_NULL");
    EXPECT_TRUE(contains(err, "PJRT plugin " + copy.string() + " is broken")) << err;
    EXPECT_TRUE(contains(err, std::string("has no ") + fn + " (a null function pointer)")) << err;
  }
  // A function the cache can do without: the plugin loads, and compiles without the cache.
  const fs::path copy = dir / "shim_no_serialize.so";
  fs::copy_file(shim, copy);
  setenv("PJRT_SHIM_NULL", "PJRT_Executable_Serialize", 1);
  auto client = PjrtClient::create({.plugin = copy.string()});
  unsetenv("PJRT_SHIM_NULL");
  EXPECT_FALSE(client->can_serialize());
  EXPECT_EQ(run_add(*client), 33.f);
}

TEST(XlaPlugin, NvidiaLibrariesAreFoundBesideTheCudaPlugin) {
  auto site = test_util::temp_dir("xla_nvidia_site", true);
  const fs::path plugin = site / "jax_plugins/xla_cuda13/xla_cuda_plugin.so";
  auto touch = [&](const fs::path& rel) {
    fs::create_directories((site / rel).parent_path());
    std::ofstream(site / rel) << "not a library\n";
  };
  EXPECT_TRUE(nvidia_library_files(plugin.string()).empty());
  EXPECT_TRUE(contains(preload_nvidia_libraries(plugin.string()), "No NVIDIA libraries"));
  touch("jax_plugins/xla_cuda13/xla_cuda_plugin.so");
  for (const char* f : {"nvidia/cu13/lib/libcublas.so.13", "nvidia/cu13/lib/libcublasLt.so.13",
                        "nvidia/cu13/lib/libcudart.so.13", "nvidia/cu13/lib/libnvJitLink.so.13",
                        "nvidia/cu13/lib/libcusparse.so.12", "nvidia/cu13/lib/libcufft.so.12",
                        "nvidia/cudnn/lib/libcudnn_ops.so.9", "nvidia/cudnn/lib/libcudnn.so.9",
                        "nvidia/nccl/lib/libnccl.so.2", "nvidia/cuda_nvcc/bin/ptxas"})
    touch(f);
  std::vector<std::string> names;
  for (const std::string& f : nvidia_library_files(plugin.string()))
    names.push_back(fs::relative(f, site / "nvidia").string());
  EXPECT_EQ(names,
            (std::vector<std::string>{"cu13/lib/libcudart.so.13", "cu13/lib/libnvJitLink.so.13",
                                      "cu13/lib/libcublasLt.so.13", "cu13/lib/libcublas.so.13",
                                      "cu13/lib/libcufft.so.12", "cu13/lib/libcusparse.so.12",
                                      "cudnn/lib/libcudnn.so.9", "nccl/lib/libnccl.so.2"}));
  // The fake libraries do not load: the plugin's load error lists them.
  std::string err = error_of([&] { PjrtPlugin::load(plugin.string()); });
  EXPECT_TRUE(contains(err, "cannot load PJRT plugin " + plugin.string())) << err;
  EXPECT_TRUE(contains(err, "These NVIDIA libraries of the installation did not load")) << err;
  EXPECT_TRUE(contains(err, "libcudart.so.13")) << err;
}

TEST(XlaPlugin, ADeviceThatIsNoPluginFileSaysWhatItIs) {
  std::string err = error_of([] { find_pjrt_plugin("/tmp"); });
  EXPECT_TRUE(contains(err, "PJRT plugin '/tmp' is a directory, not a PJRT plugin")) << err;
  err = error_of([] { find_pjrt_plugin("/dev/zero"); });
  EXPECT_TRUE(contains(err, "PJRT plugin '/dev/zero' is not a regular file")) << err;
  err = error_of([] { find_pjrt_plugin("/nonexistent/plugin.so"); });
  EXPECT_TRUE(contains(err, "not found: no such file")) << err;
}

// The plugin asked for (--device xla:cpu) wins over env LOCKSTEP_PJRT_PLUGIN, with a warning;
// the env variable names the plugin only when none is asked for.
TEST(XlaPlugin, ThePluginAskedForWinsOverLockstepPjrtPlugin) {
  auto client = XLA_CLIENT_OR_SKIP();
  static int run = 0;  // the warning comes once per (variable, plugin): a new path per run
  const std::string path = "/nonexistent/override" + std::to_string(run++) + ".so";
  setenv("LOCKSTEP_PJRT_PLUGIN", path.c_str(), 1);
  testing::internal::CaptureStderr();
  std::string err = error_of([] { PjrtPlugin::load("cpu"); });
  const std::string warned = testing::internal::GetCapturedStderr();
  std::string unset_err = error_of([] { PjrtPlugin::load(""); });
  unsetenv("LOCKSTEP_PJRT_PLUGIN");
  EXPECT_EQ(err, "");
  EXPECT_TRUE(contains(
      warned, "env LOCKSTEP_PJRT_PLUGIN=" + path + " is ignored: plugin 'cpu' was asked for"))
      << warned;
  EXPECT_TRUE(contains(unset_err, "'" + path + "' not found")) << unset_err;
}

// Clients come and go under one loaded plugin; each one's PJRT_Client goes with its last user
// (a buffer may outlive its PjrtClient).
TEST(XlaPlugin, ClientsAreCreatedAndDestroyedRepeatedly) {
  auto shared = XLA_CLIENT_OR_SKIP();
  const int before = live_client_states();
  for (int i = 0; i < 6; ++i) {
    auto client = PjrtClient::create({.plugin = "cpu", .device_count = 1 + i % 3});
    EXPECT_EQ(int(client->devices().size()), 1 + i % 3);
    EXPECT_EQ(run_add(*client), 33.f);
    EXPECT_EQ(live_client_states(), before + 1);
    PjrtBuffer kept = client->to_device(Tensor::from_vector(Shape{3}, {4, 5, 6}));
    client.reset();  // the buffer keeps the PJRT client alive
    EXPECT_EQ(live_client_states(), before + 1);
    kept.reset();
    EXPECT_EQ(live_client_states(), before);
  }
}

// A process that exits with clients, executables and buffers alive in static storage exits
// cleanly: the clients are destroyed before the plugin's own state is torn down.
TEST(XlaPluginDeathTest, ExitWithLiveClientsIsClean) {
  auto shared = XLA_CLIENT_OR_SKIP();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        static auto client = PjrtClient::create({.plugin = "cpu", .device_count = 2});
        static PjrtExecutable exe = client->compile(kAddModule);
        static PjrtBuffer a = client->to_device(Tensor::from_vector(Shape{3}, {1, 2, 3}));
        static std::vector<PjrtBuffer> out = exe.execute({&a, &a});
        std::exit(client->to_host(out[0]).to_vector()[2] == 6.f ? 0 : 3);
      },
      testing::ExitedWithCode(0), "");
}

#endif  // LOCKSTEP_XLA
