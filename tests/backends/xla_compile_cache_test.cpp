// The persistent compile cache (src/backends/xla/compile_cache.h) on the CPU plugin: a second
// client, and a second process, load the executable the first one compiled (counted, never
// timed); a truncated, damaged, foreign or unloadable entry is a warning and a recompile; writes
// leave no temporary file behind; "off" turns the cache off.
#include <gtest/gtest.h>

#ifndef LOCKSTEP_XLA
TEST(XlaCompileCache, NeedsTheXlaBuild) { GTEST_SKIP() << "built without LOCKSTEP_XLA"; }
#else
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <thread>

#include "backends/xla/compile_cache.h"
#include "backends/xla/lower_graph.h"
#include "backends/xla/pjrt_client.h"
#include "backends/xla_test_util.h"
#include "backends/xla_train_graphs.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::xla;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A small CNN train step with batch norm and Adam, as one StableHLO module.
const std::string& cnn_module() {
  static const std::string mlir = [] {
    xla_test::Step s =
        xla_test::build_step(xla_test::Model::cnn_batch_norm, xla_test::Optimizer::adam);
    return lower_graph(s.g, s.feeds, {s.loss}).mlir;
  }();
  return mlir;
}

const char* kScaleModule = R"(module {
  func.func @main(%a: tensor<3xf32>) -> tensor<3xf32> {
    %0 = stablehlo.add %a, %a : tensor<3xf32>
    return %0 : tensor<3xf32>
  }
})";

float run_scale(const PjrtClient& client, PjrtExecutable& exe) {
  PjrtBuffer a = client.to_device(Tensor::from_vector(Shape{3}, {1, 2, 3}));
  return client.to_host(exe.execute({&a})[0]).to_vector()[2];
}

// Sets LOCKSTEP_XLA_CACHE_DIR to a fresh folder for the test's life.
struct CacheDir {
  fs::path dir;
  explicit CacheDir(const std::string& tag) : dir(test_util::temp_dir(tag, true)) {
    setenv("LOCKSTEP_XLA_CACHE_DIR", dir.c_str(), 1);
  }
  ~CacheDir() { unsetenv("LOCKSTEP_XLA_CACHE_DIR"); }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    return out;
  }
};

std::shared_ptr<PjrtClient> fresh_client() {
  return PjrtClient::create({.plugin = "cpu", .device_count = 2});
}

// Compiles kScaleModule on a fresh client; returns the warning printed.
std::string compile_capturing(bool& from_cache) {
  auto client = fresh_client();
  testing::internal::CaptureStderr();
  PjrtExecutable exe = client->compile(kScaleModule);
  const std::string warned = testing::internal::GetCapturedStderr();
  from_cache = exe.loaded_from_cache();
  EXPECT_EQ(run_scale(*client, exe), 6.f);
  return warned;
}

}  // namespace

TEST(XlaCompileCache, TheFolderComesFromTheEnvironment) {
  setenv("LOCKSTEP_XLA_CACHE_DIR", "/x/cache", 1);
  EXPECT_EQ(compile_cache_dir(), "/x/cache");
  setenv("LOCKSTEP_XLA_CACHE_DIR", "off", 1);
  EXPECT_EQ(compile_cache_dir(), "");
  unsetenv("LOCKSTEP_XLA_CACHE_DIR");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const std::string saved = xdg ? xdg : "";
  setenv("XDG_CACHE_HOME", "/x/xdg", 1);
  EXPECT_EQ(compile_cache_dir(), "/x/xdg/lockstep/xla");
  unsetenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  EXPECT_EQ(compile_cache_dir(), home && *home ? std::string(home) + "/.cache/lockstep/xla" : "");
  if (!saved.empty()) setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  EXPECT_EQ(hash128_hex("").size(), 32u);
  EXPECT_NE(hash128_hex("a"), hash128_hex("b"));
}

// Two fresh clients in one process (no state shared but the cache folder): the second loads
// the executable the first compiled and serialized.
TEST(XlaCompileCache, ASecondClientLoadsTheExecutableFromTheCache) {
  auto shared = XLA_CLIENT_OR_SKIP();
  ASSERT_TRUE(shared->can_serialize()) << "the CPU plugin serializes executables";
  CacheDir cache("xla_cache_client");
  const CompileCacheStats s0 = compile_cache_stats();
  auto first = fresh_client();
  PjrtExecutable a = first->compile(cnn_module());
  EXPECT_FALSE(a.loaded_from_cache());
  const CompileCacheStats s1 = compile_cache_stats();
  EXPECT_EQ(s1.misses - s0.misses, 1);
  EXPECT_EQ(s1.writes - s0.writes, 1);
  EXPECT_EQ(cache.files().size(), 1u);  // the entry, and no temporary file
  auto second = fresh_client();
  PjrtExecutable b = second->compile(cnn_module());
  EXPECT_TRUE(b.loaded_from_cache());
  const CompileCacheStats s2 = compile_cache_stats();
  EXPECT_EQ(s2.hits - s1.hits, 1);
  EXPECT_EQ(s2.misses, s1.misses);
  EXPECT_EQ(s2.rejected, s1.rejected);
  EXPECT_EQ(b.num_outputs(), a.num_outputs());
  // Another replica count is another key.
  EXPECT_FALSE(second->compile(kScaleModule, {.num_replicas = 2}).loaded_from_cache());
  EXPECT_TRUE(second->compile(kScaleModule, {.num_replicas = 2}).loaded_from_cache());
  EXPECT_FALSE(second->compile(kScaleModule, {.num_replicas = 1}).loaded_from_cache());
}

// Compiles the CNN step on a fresh client and prints what the cache did and how long the
// compile took. ASecondProcessLoadsTheExecutable runs it in processes of their own.
TEST(XlaCompileCache, CompilesTheCnnStep) {
  auto shared = XLA_CLIENT_OR_SKIP();
  auto client = fresh_client();
  const auto t0 = std::chrono::steady_clock::now();
  PjrtExecutable exe = client->compile(cnn_module());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const CompileCacheStats st = compile_cache_stats();
  std::printf("cache: hits=%lld misses=%lld compile_s=%.3f\n", (long long)st.hits,
              (long long)st.misses, s);
  EXPECT_GT(exe.num_outputs(), 0);
}

TEST(XlaCompileCache, ASecondProcessLoadsTheExecutable) {
  auto shared = XLA_CLIENT_OR_SKIP();
  CacheDir cache("xla_cache_process");
  const std::string cmd = "/proc/" + std::to_string(::getpid()) +
                          "/exe --gtest_filter=XlaCompileCache.CompilesTheCnnStep 2>&1";
  std::vector<std::string> lines;
  for (int run = 0; run < 2; ++run) {
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_TRUE(p);
    std::string out;
    char buf[4096];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    ASSERT_EQ(pclose(p), 0) << out;
    std::smatch m;
    ASSERT_TRUE(
        std::regex_search(out, m, std::regex("cache: hits=\\d+ misses=\\d+ compile_s=\\S+")))
        << out;
    lines.push_back(m.str());
    std::printf("process %d: %s\n", run + 1, m.str().c_str());  // the times, for the record
  }
  EXPECT_TRUE(contains(lines[0], "hits=0 misses=1")) << lines[0];
  EXPECT_TRUE(contains(lines[1], "hits=1 misses=0")) << lines[1];
}

TEST(XlaCompileCache, ADamagedOrForeignEntryIsAWarningAndARecompile) {
  auto shared = XLA_CLIENT_OR_SKIP();
  CacheDir cache("xla_cache_damaged");
  bool hit = true;
  EXPECT_EQ(compile_capturing(hit), "");
  EXPECT_FALSE(hit);
  const std::string key = shared->cache_key(kScaleModule, compile_options_proto(1, 1));
  const CompileCache store(cache.dir.string());
  const std::string entry = store.path_for(key);
  ASSERT_TRUE(fs::exists(entry));
  const auto size = fs::file_size(entry);
  compile_capturing(hit);
  EXPECT_TRUE(hit);
  struct Case {
    std::function<void()> damage;
    std::string warning;
  };
  const std::vector<Case> cases = {
      {[&] { fs::resize_file(entry, size / 2); }, "is truncated"},
      {[&] {
         std::fstream f(entry, std::ios::in | std::ios::out | std::ios::binary);
         f.seekp(std::streamoff(size) - 10);
         f.put('\x5a').put('\xa5');
       },
       "is damaged (its checksum differs)"},
      {[&] { std::ofstream(entry) << "hello"; }, "is not a Lockstep compile cache entry"},
      {[&] { store.write(key, "garbage that is no executable"); }, "cannot be loaded"},
      {[&] {
         const std::string other = shared->cache_key(kScaleModule, compile_options_proto(2, 1));
         store.write(other, "whatever");
         fs::copy_file(store.path_for(other), entry, fs::copy_options::overwrite_existing);
       },
       "is foreign: it was written for another module, options or plugin"},
  };
  for (const Case& c : cases) {
    c.damage();
    const CompileCacheStats before = compile_cache_stats();
    const std::string warned = compile_capturing(hit);
    EXPECT_FALSE(hit) << c.warning;
    EXPECT_TRUE(contains(warned, "warning: xla compile cache: entry " + entry)) << warned;
    EXPECT_TRUE(contains(warned, c.warning)) << warned;
    EXPECT_TRUE(contains(warned, "; compiling again\n")) << warned;
    EXPECT_EQ(compile_cache_stats().rejected - before.rejected, 1) << c.warning;
    compile_capturing(hit);  // the recompile replaced the entry
    EXPECT_TRUE(hit) << c.warning;
  }
  for (const std::string& f : cache.files()) EXPECT_TRUE(contains(f, ".xlaexe")) << f;
}

// Writers racing for one entry (as ctest's processes do): each writes a temporary file and
// renames it, so the entry is always whole, and the next compile loads it.
TEST(XlaCompileCache, RacingWritersLeaveOneWholeEntry) {
  auto shared = XLA_CLIENT_OR_SKIP();
  CacheDir cache("xla_cache_race");
  std::vector<std::shared_ptr<PjrtClient> > clients;
  for (int i = 0; i < 4; ++i) clients.push_back(fresh_client());
  std::vector<std::thread> threads;
  std::vector<float> results(clients.size());
  for (size_t i = 0; i < clients.size(); ++i)
    threads.emplace_back([&, i] {
      PjrtExecutable exe = clients[i]->compile(kScaleModule);
      results[i] = run_scale(*clients[i], exe);
    });
  for (auto& t : threads) t.join();
  for (float r : results) EXPECT_EQ(r, 6.f);
  EXPECT_EQ(cache.files().size(), 1u);  // the entry, no temporary file
  const CompileCacheStats before = compile_cache_stats();
  bool hit = false;
  EXPECT_EQ(compile_capturing(hit), "");
  EXPECT_TRUE(hit);
  EXPECT_EQ(compile_cache_stats().rejected, before.rejected);
}

TEST(XlaCompileCache, OffMeansOff) {
  auto shared = XLA_CLIENT_OR_SKIP();
  setenv("LOCKSTEP_XLA_CACHE_DIR", "off", 1);
  const CompileCacheStats before = compile_cache_stats();
  bool hit = true;
  compile_capturing(hit);
  unsetenv("LOCKSTEP_XLA_CACHE_DIR");
  EXPECT_FALSE(hit);
  const CompileCacheStats after = compile_cache_stats();
  EXPECT_EQ(after.hits + after.misses, before.hits + before.misses);
}

#endif  // LOCKSTEP_XLA
