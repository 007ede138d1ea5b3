// The PJRT runtime wrapper on the CPU plugin: compile and run a module, device count, donation,
// the hand-encoded compile options, and the bad-input errors (each test shows the error text).
#include <gtest/gtest.h>

#ifndef LOCKSTEP_XLA
TEST(XlaRuntime, NeedsTheXlaBuild) {
  GTEST_SKIP() << "built without LOCKSTEP_XLA (no pjrt_c_api.h)";
}
#else
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "backends/xla/pjrt_client.h"
#include "backends/xla/stablehlo_emitter.h"
#include "backends/xla_test_util.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::xla;
using lockstep::test_util::error_of;

namespace {

const char* kAddModule = R"(module {
  func.func @main(%a: tensor<2x3xf32>, %b: tensor<2x3xf32> {tf.aliasing_output = 0 : i32}) -> tensor<2x3xf32> {
    %0 = stablehlo.add %a, %b : tensor<2x3xf32>
    return %0 : tensor<2x3xf32>
  }
})";

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST(XlaRuntime, CompilesAndRunsAModule) {
  auto client = XLA_CLIENT_OR_SKIP();
  EXPECT_EQ(client->platform(), "cpu");
  EXPECT_TRUE(contains(client->describe(), "PJRT C API")) << client->describe();
  PjrtExecutable exe = client->compile(kAddModule);
  EXPECT_EQ(exe.num_outputs(), 1);
  EXPECT_EQ(exe.num_replicas(), 1);
  Tensor a = Tensor::from_vector(Shape{2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = Tensor::from_vector(Shape{2, 3}, {10, 20, 30, 40, 50, 60});
  PjrtBuffer da = client->to_device(a), db = client->to_device(b);
  EXPECT_EQ(da.shape(), (Shape{2, 3}));
  EXPECT_EQ(da.dtype(), DType::f32);
  std::vector<PjrtBuffer> out = exe.execute({&da, &db});
  EXPECT_EQ(client->to_host(out[0]).to_vector(), (std::vector<float>{11, 22, 33, 44, 55, 66}));
  // Not donated: both arguments are still there, and the same executable runs again.
  ASSERT_TRUE(da.valid() && db.valid());
  EXPECT_FALSE(db.is_deleted());
  out = exe.execute({&da, &db});
  EXPECT_EQ(client->to_host(out[0]).to_vector()[0], 11.f);
}

TEST(XlaRuntime, DonatedArgumentIsConsumed) {
  auto client = XLA_CLIENT_OR_SKIP();
  PjrtExecutable exe = client->compile(kAddModule);
  PjrtBuffer da = client->to_device(Tensor::full(Shape{2, 3}, 1.f));
  PjrtBuffer db = client->to_device(Tensor::full(Shape{2, 3}, 2.f));
  std::vector<PjrtBuffer> out = exe.execute({&da, &db}, {false, true});
  EXPECT_TRUE(da.valid());
  EXPECT_FALSE(db.valid());  // its memory is the result's now
  EXPECT_EQ(client->to_host(out[0]).to_vector()[5], 3.f);
  std::string err = error_of([&] { exe.execute({&da, &db}); });
  EXPECT_TRUE(contains(err, "argument 1 of replica 0 is an empty buffer")) << err;
}

TEST(XlaRuntime, CpuDeviceCountIsACreateOption) {
  auto client = XLA_CLIENT_OR_SKIP();
  EXPECT_EQ(client->devices().size(), 2u);  // the shared client asks for 2
  auto three = PjrtClient::create({.plugin = "cpu", .device_count = 3});
  ASSERT_EQ(three->devices().size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(three->devices()[size_t(i)].id, i);
  EXPECT_EQ(three->devices()[0].kind, "cpu");
}

TEST(XlaRuntime, CompileOptionsAreTheProtoBytes) {
  // CompileOptionsProto { executable_build_options (3) { num_replicas (4), num_partitions (5) } }
  EXPECT_EQ(compile_options_proto(1, 1), std::string("\x1a\x04\x20\x01\x28\x01", 6));
  EXPECT_EQ(compile_options_proto(300, 1), std::string("\x1a\x05\x20\xac\x02\x28\x01", 7));
  EXPECT_TRUE(contains(error_of([] { compile_options_proto(0, 1); }), "must be >= 1"));
}

TEST(XlaRuntime, MissingPluginFileSaysWhatToDo) {
  std::string err = error_of([] { PjrtPlugin::load("/nonexistent/xla_plugin.so"); });
  EXPECT_TRUE(contains(err, "PJRT plugin '/nonexistent/xla_plugin.so' not found")) << err;
  err = error_of([] { find_pjrt_plugin("gpu9"); });
  EXPECT_TRUE(contains(err, "\"cpu\", \"cuda\", \"tpu\"")) << err;
}

// A name is looked up in the Python environments, $LOCKSTEP_XLA_VENV first; the env variable
// LOCKSTEP_PJRT_PLUGIN names the plugin when none is asked for (XlaPlugin.* has the rest).
TEST(XlaRuntime, PluginsAreFoundByNameInAVenv) {
  auto venv = test_util::temp_dir("xla_venv", true);
  auto dir = venv / "lib/python3.99/site-packages/xla_plugins/xla_cpu_pjrt";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "xla_cpu_pjrt.so") << "not really\n";
  setenv("LOCKSTEP_XLA_VENV", venv.c_str(), 1);
  const std::string found = find_pjrt_plugin("cpu");
  unsetenv("LOCKSTEP_XLA_VENV");
  EXPECT_EQ(found, (dir / "xla_cpu_pjrt.so").string());
  setenv("LOCKSTEP_PJRT_PLUGIN", "/nonexistent/override.so", 1);
  std::string err = error_of([] { PjrtPlugin::load(""); });
  unsetenv("LOCKSTEP_PJRT_PLUGIN");
  EXPECT_TRUE(contains(err, "'/nonexistent/override.so' not found")) << err;
  err = error_of([] { find_pjrt_plugin("tpu"); });
  if (err.empty()) GTEST_SKIP() << "libtpu is installed here";
  EXPECT_TRUE(contains(err, "PJRT plugin 'tpu' not found: looked for libtpu/libtpu.so in")) << err;
  EXPECT_TRUE(contains(err, "pip install libtpu")) << err;
}

TEST(XlaRuntime, ALibraryWithoutGetPjrtApiIsNotAPlugin) {
  const std::string lib = std::string(LOCKSTEP_BINARY_DIR) + "/lib/liblockstep_core.so";
  ASSERT_TRUE(std::filesystem::exists(lib)) << lib;
  std::string err = error_of([&] { PjrtPlugin::load(lib); });
  EXPECT_TRUE(contains(err, "does not export GetPjrtApi: it is not a PJRT plugin")) << err;
  EXPECT_TRUE(contains(err, lib)) << err;
}

TEST(XlaRuntime, AFileThatIsNoLibraryCannotLoad) {
  auto path = test_util::temp_dir("xla_runtime") / "not_a_plugin.so";
  std::ofstream(path) << "hello\n";
  std::string err = error_of([&] { PjrtPlugin::load(path.string()); });
  EXPECT_TRUE(contains(err, "cannot load PJRT plugin " + path.string())) << err;
}

TEST(XlaRuntime, TooOldPluginNamesBothVersions) {
  std::string err = error_of([] { check_pjrt_api_version("/x/old_plugin.so", 0, 20, 64); });
  EXPECT_TRUE(contains(err, "/x/old_plugin.so is too old: it speaks PJRT C API 0.20")) << err;
  EXPECT_TRUE(contains(err, "built against PJRT C API 0." + std::to_string(pjrt_header_minor())))
      << err;
  EXPECT_TRUE(contains(err, "Upgrade the plugin")) << err;
  err = error_of([] { check_pjrt_api_version("/x/new_plugin.so", 1, 2, 100000); });
  EXPECT_TRUE(contains(err, "another major version")) << err;
  EXPECT_EQ(error_of([] { check_pjrt_api_version("/x/ok.so", 0, pjrt_header_minor(), 100000); }),
            "");
}

TEST(XlaRuntime, SyntaxErrorQuotesTheLine) {
  auto client = XLA_CLIENT_OR_SKIP();
  const std::string bad =
      "module {\n func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n"
      "  %0 = stablehlo.add %a, %q : tensor<2xf32>\n  return %0 : tensor<2xf32>\n }\n}\n";
  std::string err = error_of([&] { client->compile(bad); });
  EXPECT_TRUE(contains(err, "PJRT compile of the StableHLO module failed")) << err;
  EXPECT_TRUE(contains(err, "undeclared SSA value")) << err;
  EXPECT_TRUE(contains(err, "line 3:   %0 = stablehlo.add %a, %q")) << err;
}

// The plugin itself checks the argument count; the dims only when the compile was told the
// argument types (the CPU plugin would run the add on a [3, 2] buffer without a word).
TEST(XlaRuntime, ExecuteWithWrongArgumentsIsAnError) {
  auto client = XLA_CLIENT_OR_SKIP();
  CompileSpec spec;
  spec.argument_types = {{DType::f32, Shape{2, 3}}, {DType::f32, Shape{2, 3}}};
  PjrtExecutable exe = client->compile(kAddModule, spec);
  PjrtBuffer a = client->to_device(Tensor::full(Shape{2, 3}, 1.f));
  PjrtBuffer wrong = client->to_device(Tensor::full(Shape{3, 2}, 1.f));
  std::string err = error_of([&] { exe.execute({&a, &wrong}); });
  EXPECT_TRUE(contains(err, "argument 1 is float32(3, 2), the program takes float32(2, 3)")) << err;
  PjrtExecutable unchecked = client->compile(kAddModule);
  err = error_of([&] { unchecked.execute({&a}); });
  EXPECT_TRUE(contains(err,
                       "PJRT execute failed: Execution supplied 1 buffers but compiled "
                       "program expected 2 buffers [INVALID_ARGUMENT]"))
      << err;
  EXPECT_TRUE(contains(err, "@main signature")) << err;
}

// A program whose result cannot be allocated (256 TiB: more than any address space) fails
// with the plugin's RESOURCE_EXHAUSTED, told as out of device memory, not an abort.
TEST(XlaRuntime, OutOfMemoryIsAnErrorThatSaysSo) {
  auto client = XLA_CLIENT_OR_SKIP();
  StablehloBuilder b;
  HloValue x = b.argument({ElemType::f32, {}});
  b.ret({b.broadcast_in_dim(x, {int64_t(1) << 46}, {})});
  PjrtExecutable exe = client->compile(b.module_text());
  PjrtBuffer one = client->to_device(Tensor::full(Shape{}, 1.f));
  std::string err = error_of([&] { exe.execute({&one}); });
  EXPECT_TRUE(contains(err, "[RESOURCE_EXHAUSTED]")) << err;
  EXPECT_TRUE(contains(err, "The device is out of memory: use a smaller batch")) << err;
}

TEST(XlaRuntime, TooManyReplicasForTheDevices) {
  auto client = XLA_CLIENT_OR_SKIP();
  std::string err = error_of([&] { client->compile(kAddModule, {.num_replicas = 8}); });
  EXPECT_TRUE(contains(err, "8 replicas x 1 partitions need as many cpu devices, the client has 2"))
      << err;
  EXPECT_TRUE(contains(err, "device_count")) << err;
}

#endif  // LOCKSTEP_XLA
