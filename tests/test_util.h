// Helpers shared by the test files (tests/ is on the test target's include path):
//   #include "test_util.h"
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/core/config.h"
#include "lockstep/core/error.h"
#include "lockstep/core/rng.h"
#include "lockstep/core/tensor.h"

namespace lockstep::test_util {

// True in the ASan/UBSan and TSan builds. Tests that measure resident memory or run with a
// tiny descriptor limit skip there (the sanitizers' shadow memory, allocator and runtime
// change exactly what they measure); the release suite runs them.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizerBuild = true;
#else
inline constexpr bool kSanitizerBuild = false;
#endif

// Runs f and returns the message of the lockstep::Error it throws, or "" when it throws
// nothing. Other exception types propagate (a test that expects a lockstep::Error should fail
// loudly on anything else).
template <typename F>
std::string error_of(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Expects error message `e` to be non-empty and to contain every one of `parts`.
inline void expect_has(const std::string& e, const std::vector<std::string>& parts) {
  EXPECT_FALSE(e.empty()) << "no error";
  for (const auto& p : parts) EXPECT_NE(e.find(p), std::string::npos) << "'" << p << "' in: " << e;
}

// A directory for this test process under the system temp dir: <tmp>/lockstep_<tag>_<pid>.
// Created if missing; with fresh = true any previous content is removed first.
inline std::filesystem::path temp_dir(const std::string& tag, bool fresh = false) {
  namespace fs = std::filesystem;
  fs::path d = fs::temp_directory_path() / ("lockstep_" + tag + "_" + std::to_string(::getpid()));
  if (fresh) fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// The whole content of a file ("" when it cannot be opened).
inline std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Synthetic 3-class images [n, 8, 8, 2] with int32 labels [n]: the class decides which image
// quadrant is bright (a task a small CNN learns in a few steps).
inline std::pair<Tensor, Tensor> quadrant_images(int64_t n, uint64_t seed) {
  Tensor x = Tensor::empty(Shape{n, 8, 8, 2});
  Tensor y = Tensor::empty(Shape{n}, DType::i32);
  Philox rng(seed);
  float* px = x.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    int c = int(rng.next_u32() % 3);
    y.data<int32_t>()[i] = c;
    for (int h = 0; h < 8; ++h)
      for (int w = 0; w < 8; ++w)
        for (int ch = 0; ch < 2; ++ch) {
          bool hot = (c == 0 && h < 4) || (c == 1 && w < 4) || (c == 2 && h >= 4 && w >= 4);
          px[((i * 8 + h) * 8 + w) * 2 + ch] = (hot ? 0.8f : 0.0f) + 0.3f * rng.uniform();
        }
  }
  return {x, y};
}

// Inputs in [-1, 1) from a fixed LCG (the same values on every platform and build).
inline Tensor lcg_inputs(Shape s, uint64_t seed) {
  std::vector<float> v(size_t(s.numel()));
  uint64_t x = seed * 2654435761u + 1;
  for (auto& f : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    f = float((x >> 40) % 2000) / 1000.0f - 1.0f;
  }
  return Tensor::from_vector(s, v);
}

// Sets the thread replicas fit() may use (lockstep/core/config.h) for a scope, and restores the
// setting whatever the test does. 1 keeps fit on one program: what a comparison against an eager
// or reference-backend fit of a model with dropout needs (replicas draw other masks).
struct ThreadReplicasGuard {
  int saved = config::thread_replicas();
  explicit ThreadReplicasGuard(int replicas) { config::set_thread_replicas(replicas); }
  ~ThreadReplicasGuard() { config::set_thread_replicas(saved); }
};

// Largest |a - b| over two f32 tensors of one shape.
inline float max_abs_diff(const Tensor& a, const Tensor& b) {
  LS_CHECK(a.shape() == b.shape(), "max_abs_diff: shapes ", a.shape().str(), " and ",
           b.shape().str(), " differ");
  float m = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, std::abs(a.data<float>()[i] - b.data<float>()[i]));
  return m;
}

// Largest |a - b| over two lists of f32 tensors (e.g. two models' get_weights()).
inline float max_abs_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  LS_CHECK(a.size() == b.size(), "max_abs_diff: ", a.size(), " tensors against ", b.size());
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, max_abs_diff(a[i], b[i]));
  return m;
}

}  // namespace lockstep::test_util
