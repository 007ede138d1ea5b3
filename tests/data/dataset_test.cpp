// Dataset: semantics of every source and transformation, with real values.
#include "lockstep/data/dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

namespace lockstep::data {
namespace {

namespace fs = std::filesystem;

int64_t as_i64(const Element& e, size_t i = 0) {
  const Tensor& t = e.tensor(i);
  if (t.dtype() == DType::i64) return *t.data<int64_t>();
  if (t.dtype() == DType::i32) return *t.data<int32_t>();
  return int64_t(t.item());
}

std::vector<int64_t> values(const Dataset& ds, int64_t epoch = 0) {
  std::vector<int64_t> out;
  for (const Element& e : ds.collect(epoch)) out.push_back(as_i64(e));
  return out;
}

std::vector<int64_t> iota(int64_t n, int64_t from = 0) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = from + i;
  return v;
}

Element scalar(int64_t v) {
  Tensor t = Tensor::empty(Shape{}, DType::i64);
  *t.data<int64_t>() = v;
  return Element{t};
}

MapFn times(int64_t k) {
  return [k](Element e) { return scalar(as_i64(e) * k); };
}

// A fresh temporary directory per test.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("lockstep_ds_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// ----- sources -----------------------------------------------------------------------------

TEST(DatasetSources, FromTensorSlicesSlicesDimZero) {
  Tensor x = Tensor::from_vector({3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor y = Tensor::from_vector_i32({3}, {7, 8, 9});
  auto ds = Dataset::from_tensor_slices({x, y});
  EXPECT_EQ(ds.cardinality(), 3);
  auto els = ds.collect();
  ASSERT_EQ(els.size(), 3u);
  EXPECT_EQ(els[1].tensor(0).shape(), (Shape{2}));
  EXPECT_EQ(els[1].tensor(0).to_vector(), (std::vector<float>{3, 4}));
  EXPECT_EQ(els[2].tensor(1).shape(), Shape{});
  EXPECT_EQ(*els[2].tensor(1).data<int32_t>(), 9);
  auto spec = ds.element_spec();
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->str(), "(float32(2,), int32())");
}

TEST(DatasetSources, FromTensorSlicesRejectsMismatchedRows) {
  Tensor x = Tensor::zeros({3, 2});
  Tensor y = Tensor::zeros({4});
  try {
    Dataset::from_tensor_slices({x, y});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("disagree on dimension 0 (3 vs 4)"), std::string::npos)
        << e.what();
  }
}

TEST(DatasetSources, StringsSliceToPaths) {
  auto ds = Dataset::from_tensor_slices(Strings{"a.jpg", "b.png"});
  auto els = ds.collect();
  ASSERT_EQ(els.size(), 2u);
  EXPECT_EQ(els[0].string(0), "a.jpg");
  EXPECT_EQ(els[1].string(0), "b.png");
  EXPECT_THROW(els[0].tensor(0), Error);
}

TEST(DatasetSources, RangeAndFromTensors) {
  EXPECT_EQ(values(Dataset::range(5)), iota(5));
  EXPECT_EQ(values(Dataset::range(10, 0, -3)), (std::vector<int64_t>{10, 7, 4, 1}));
  EXPECT_EQ(Dataset::range(10, 0, -3).cardinality(), 4);
  EXPECT_EQ(Dataset::range(3, 3).cardinality(), 0);
  auto one = Dataset::from_tensors(Element{Tensor::from_vector({2}, {1, 2}), std::string("p")});
  auto els = one.collect();
  ASSERT_EQ(els.size(), 1u);
  EXPECT_EQ(els[0].tensor(0).to_vector(), (std::vector<float>{1, 2}));
  EXPECT_EQ(els[0].string(1), "p");
}

TEST(DatasetSources, GeneratorIsCalledPerIterator) {
  std::atomic<int> factories{0};
  auto ds = Dataset::from_generator([&] {
    factories++;
    auto i = std::make_shared<int64_t>(0);
    return Dataset::Generator([i]() -> std::optional<Element> {
      if (*i == 4) return std::nullopt;
      return scalar((*i)++);
    });
  });
  EXPECT_EQ(ds.cardinality(), kUnknownCardinality);
  EXPECT_EQ(values(ds), iota(4));
  EXPECT_EQ(values(ds), iota(4));
  EXPECT_EQ(factories.load(), 2);
}

TEST(DatasetSources, ListFilesGlobSortedAndShuffledWithSeed) {
  TempDir dir;
  for (const char* n : {"b.jpg", "a.jpg", "c.png", "d.jpg", "x1.txt", "x2.txt", "y3.txt"})
    std::ofstream(dir / n) << n;
  fs::create_directories(dir / "sub");
  std::ofstream(dir / "sub/e.jpg") << "e";

  auto names = [](const Dataset& ds) {
    std::vector<std::string> out;
    for (const Element& e : ds.collect()) out.push_back(fs::path(e.string(0)).filename());
    return out;
  };
  auto sorted = Dataset::list_files(dir / "*.jpg", {.shuffle = false});
  EXPECT_EQ(names(sorted), (std::vector<std::string>{"a.jpg", "b.jpg", "d.jpg"}));
  EXPECT_EQ(names(Dataset::list_files(dir / "x?.txt", {.shuffle = false})),
            (std::vector<std::string>{"x1.txt", "x2.txt"}));
  EXPECT_EQ(names(Dataset::list_files(dir / "[xy]*.txt", {.shuffle = false})),
            (std::vector<std::string>{"x1.txt", "x2.txt", "y3.txt"}));
  EXPECT_EQ(names(Dataset::list_files(dir / "*/*.jpg", {.shuffle = false})),
            (std::vector<std::string>{"e.jpg"}));

  auto all = Dataset::list_files(dir / "*.*", {.shuffle = false});
  auto s1 = Dataset::list_files(dir / "*.*", {.seed = 3});
  auto s1b = Dataset::list_files(dir / "*.*", {.seed = 3});
  auto s2 = Dataset::list_files(dir / "*.*", {.seed = 4});
  EXPECT_EQ(names(s1), names(s1b));
  EXPECT_NE(names(s1), names(s2));
  auto a = names(s1), b = names(all);
  std::sort(a.begin(), a.end());
  EXPECT_EQ(a, b);

  try {
    Dataset::list_files(dir / "*.gif");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("*.gif"), std::string::npos) << e.what();
  }
}

TEST(DatasetSources, ZipAndEnumerate) {
  auto z = Dataset::zip({Dataset::range(5), Dataset::range(10, 13)});
  EXPECT_EQ(z.cardinality(), 3);
  auto els = z.collect();
  ASSERT_EQ(els.size(), 3u);
  EXPECT_EQ(as_i64(els[2], 0), 2);
  EXPECT_EQ(as_i64(els[2], 1), 12);
  auto en = Dataset::from_tensor_slices(Strings{"a", "b"}).enumerate(5).collect();
  ASSERT_EQ(en.size(), 2u);
  EXPECT_EQ(as_i64(en[1], 0), 6);
  EXPECT_EQ(en[1].string(1), "b");
}

// ----- order-changing transformations ------------------------------------------------------

TEST(DatasetShuffle, IsASeededPermutation) {
  auto base = Dataset::range(100);
  auto a = values(base.shuffle(16, {.seed = 1}));
  auto a2 = values(base.shuffle(16, {.seed = 1}));
  auto b = values(base.shuffle(16, {.seed = 2}));
  EXPECT_EQ(a, a2);
  EXPECT_NE(a, b);
  EXPECT_NE(a, iota(100));
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, iota(100));
  // A buffer of 16 cannot move an element more than 15 places earlier.
  for (size_t i = 0; i < a.size(); ++i) EXPECT_LE(a[i], int64_t(i) + 15);
}

TEST(DatasetShuffle, ReshufflesPerEpochUnlessFixed) {
  auto re = Dataset::range(50).shuffle(50, {.seed = 9});
  EXPECT_NE(values(re, 0), values(re, 1));
  EXPECT_EQ(values(re, 1), values(re, 1));
  auto fixed = Dataset::range(50).shuffle(50, {.seed = 9, .reshuffle_each_iteration = false});
  EXPECT_EQ(values(fixed, 0), values(fixed, 1));
  // iterator() without an epoch counts epochs itself.
  auto it0 = re.iterator(), it1 = re.iterator();
  EXPECT_EQ(it0.epoch(), 0);
  EXPECT_EQ(it1.epoch(), 1);
  // Each repetition of repeat() is reshuffled too.
  auto rep = values(Dataset::range(20).shuffle(20, {.seed = 5}).repeat(2));
  EXPECT_NE(std::vector<int64_t>(rep.begin(), rep.begin() + 20),
            std::vector<int64_t>(rep.begin() + 20, rep.end()));
}

TEST(DatasetBatch, StacksAndKeepsOrDropsRemainder) {
  Tensor x = Tensor::from_vector({5, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  auto ds = Dataset::from_tensor_slices({x, Strings{"a", "b", "c", "d", "e"}});
  auto kept = ds.batch(2);
  EXPECT_EQ(kept.cardinality(), 3);
  auto els = kept.collect();
  ASSERT_EQ(els.size(), 3u);
  EXPECT_EQ(els[0].tensor(0).shape(), (Shape{2, 2}));
  EXPECT_EQ(els[1].tensor(0).to_vector(), (std::vector<float>{4, 5, 6, 7}));
  EXPECT_EQ(els[1].strings(1), (Strings{"c", "d"}));
  EXPECT_EQ(els[2].tensor(0).shape(), (Shape{1, 2}));
  EXPECT_EQ(kept.element_spec()->str(), "(float32(None, 2), strings(None,))");

  auto dropped = ds.batch(2, {.drop_remainder = true});
  EXPECT_EQ(dropped.cardinality(), 2);
  EXPECT_EQ(dropped.collect().size(), 2u);
  EXPECT_EQ(dropped.element_spec()->str(), "(float32(2, 2), strings(2,))");

  // unbatch undoes batch.
  auto back = kept.unbatch().collect();
  ASSERT_EQ(back.size(), 5u);
  EXPECT_EQ(back[4].tensor(0).to_vector(), (std::vector<float>{8, 9}));
  EXPECT_EQ(back[4].string(1), "e");
}

TEST(DatasetBatch, MismatchedShapesAndRebatchedStringsAreClearErrors) {
  auto ragged =
      Dataset::range(3).map([](Element e) { return Element{Tensor::zeros(Shape{as_i64(e) + 1})}; });
  try {
    ragged.batch(3).collect();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("element 1"), std::string::npos) << e.what();
  }
  auto paths = Dataset::from_tensor_slices(Strings{"a", "b", "c", "d"}).batch(2).batch(2);
  EXPECT_THROW(paths.collect(), Error);
}

TEST(DatasetSplitBatch, PerReplicaViewsAndDivisibilityError) {
  Element b{Tensor::from_vector({4, 1}, {0, 1, 2, 3}), Strings{"a", "b", "c", "d"}};
  auto parts = split_batch(b, 2);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1].tensor(0).to_vector(), (std::vector<float>{2, 3}));
  EXPECT_EQ(parts[1].strings(1), (Strings{"c", "d"}));
  try {
    split_batch(b, 3);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("4 is not divisible by 3"), std::string::npos) << e.what();
  }
}

// ----- counting transformations ------------------------------------------------------------

TEST(DatasetCounting, RepeatTakeSkip) {
  auto r = Dataset::range(3);
  EXPECT_EQ(values(r.repeat(2)), (std::vector<int64_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(r.repeat(2).cardinality(), 6);
  EXPECT_EQ(r.repeat().cardinality(), kInfiniteCardinality);
  EXPECT_EQ(values(r.repeat().take(7)), (std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0}));
  EXPECT_EQ(r.repeat().take(7).cardinality(), 7);
  EXPECT_EQ(values(Dataset::range(10).skip(7)), (std::vector<int64_t>{7, 8, 9}));
  EXPECT_EQ(Dataset::range(10).skip(7).cardinality(), 3);
  EXPECT_EQ(Dataset::range(10).skip(20).cardinality(), 0);
  EXPECT_EQ(values(Dataset::range(10).skip(2).take(3)), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(values(Dataset::range(10).take(-1)), iota(10));
  EXPECT_TRUE(values(Dataset::range(10).skip(-1)).empty());
  EXPECT_THROW(r.repeat().collect(), Error);  // infinite
  // An empty input repeated forever ends instead of spinning.
  EXPECT_TRUE(values(Dataset::range(0).repeat()).empty());
}

TEST(DatasetShard, DisjointAndCoversEverything) {
  const int n = 4;
  std::vector<int64_t> all;
  for (int i = 0; i < n; ++i) {
    auto s = Dataset::range(10).shard(n, i);
    auto v = values(s);
    EXPECT_EQ(int64_t(v.size()), s.cardinality());
    for (int64_t x : v) EXPECT_EQ(x % n, i);
    all.insert(all.end(), v.begin(), v.end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, iota(10));
  EXPECT_THROW(Dataset::range(3).shard(2, 2), Error);
}

// AutoShardPolicy::FILE: shard_files puts the shard right after the file source, so each
// worker's map (the decoder) runs only on its own files; shards are disjoint and cover all.
TEST(DatasetShard, ShardFilesReadsOnlyThisWorkersFiles) {
  TempDir dir;
  for (int i = 0; i < 7; ++i) std::ofstream(dir / ("f" + std::to_string(i) + ".txt")) << i;
  std::atomic<int> opened{0};
  auto pipeline = Dataset::list_files(dir / "*.txt", {.seed = 5})
                      .map([&](Element e) {
                        ++opened;  // "decode": read the file's number
                        std::ifstream f(e.string(0));
                        int64_t v = -1;
                        f >> v;
                        return scalar(v);
                      })
                      .shuffle(4, {.seed = 1})
                      .batch(2);
  ASSERT_TRUE(pipeline.reads_files());
  EXPECT_FALSE(Dataset::range(4).map(times(2)).reads_files());
  std::vector<int64_t> all;
  for (int w = 0; w < 2; ++w) {
    opened = 0;
    Dataset mine = pipeline.shard_files(2, w).unbatch();
    EXPECT_NE(mine.description().find("shard(2," + std::to_string(w) + ")"), std::string::npos)
        << mine.description();
    auto v = values(mine);
    EXPECT_EQ(opened.load(), w == 0 ? 4 : 3);  // its files only, each opened once
    EXPECT_EQ(int64_t(v.size()), w == 0 ? 4 : 3);
    all.insert(all.end(), v.begin(), v.end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, iota(7));
  // The original pipeline is untouched (rewrites copy the stages).
  opened = 0;
  EXPECT_EQ(pipeline.unbatch().collect().size(), 7u);
  EXPECT_EQ(opened.load(), 7);
  // No file source: a clear error.
  try {
    Dataset::range(4).shard_files(2, 0);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no file source"), std::string::npos) << e.what();
  }
}

// A file cache below the file shard gets a per-shard file, so workers sharing a disk never
// overwrite each other's cache.
TEST(DatasetShard, ShardFilesUsesAPerShardCacheFile) {
  TempDir dir;
  for (int i = 0; i < 4; ++i) std::ofstream(dir / ("f" + std::to_string(i) + ".txt")) << i;
  const std::string cache = dir / "cache";
  auto pipeline = Dataset::list_files(dir / "*.txt", {.shuffle = false})
                      .map([](Element e) {
                        std::ifstream f(e.string(0));
                        int64_t v = -1;
                        f >> v;
                        return scalar(v);
                      })
                      .cache(cache);
  EXPECT_EQ(values(pipeline.shard_files(2, 1)), (std::vector<int64_t>{1, 3}));
  EXPECT_TRUE(fs::exists(cache + ".shard-1-of-2")) << "no per-shard cache file";
  EXPECT_FALSE(fs::exists(cache));
  EXPECT_EQ(values(pipeline.shard_files(2, 1)), (std::vector<int64_t>{1, 3}));  // from the cache
}

TEST(DatasetFilter, KeepsMatchingInOrder) {
  auto even = Dataset::range(10).filter([](const Element& e) { return as_i64(e) % 2 == 0; });
  EXPECT_EQ(values(even), (std::vector<int64_t>{0, 2, 4, 6, 8}));
  EXPECT_EQ(even.cardinality(), kUnknownCardinality);
}

// ----- map ---------------------------------------------------------------------------------

TEST(DatasetMap, ParallelEqualsSequential) {
  auto slow_square = [](Element e) {
    const int64_t v = as_i64(e);
    if (v % 7 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return scalar(v * v);
  };
  auto seq = values(Dataset::range(200).map(slow_square));
  std::vector<int64_t> expect;
  for (int64_t i = 0; i < 200; ++i) expect.push_back(i * i);
  EXPECT_EQ(seq, expect);
  EXPECT_EQ(values(Dataset::range(200).map(slow_square, {.num_parallel_calls = 4})), expect);
  EXPECT_EQ(values(Dataset::range(200).map(slow_square, {.num_parallel_calls = AUTOTUNE})), expect);
}

TEST(DatasetMap, NondeterministicKeepsTheMultiset) {
  // Element 0 is slow: out of order it should not hold the others back.
  auto fn = [](Element e) {
    if (as_i64(e) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(30));
    return e;
  };
  auto ds = Dataset::range(64).map(fn, {.num_parallel_calls = 4, .deterministic = false});
  auto v = values(ds);
  auto sorted = v;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, iota(64));
  // The same through Options instead of the per-map flag.
  auto via_opts =
      Dataset::range(64).map(fn, {.num_parallel_calls = 4}).with_options({.deterministic = false});
  auto w = values(via_opts);
  std::sort(w.begin(), w.end());
  EXPECT_EQ(w, iota(64));
}

TEST(DatasetMap, ContextKeysAreIndependentOfParallelism) {
  auto noisy = [](Element e, const MapContext& c) {
    Philox rng = c.rng();
    return Element{e.parts[0], Tensor::full({}, rng.uniform())};
  };
  auto draw = [&](int par, int64_t epoch) {
    std::vector<float> out;
    auto ds = Dataset::range(40).map(noisy, {.num_parallel_calls = par, .seed = 11});
    for (const Element& e : ds.collect(epoch)) out.push_back(e.tensor(1).item());
    return out;
  };
  EXPECT_EQ(draw(0, 0), draw(3, 0));
  EXPECT_EQ(draw(0, 0), draw(AUTOTUNE, 0));
  EXPECT_NE(draw(0, 0), draw(0, 1));  // a new epoch draws new numbers
  // Before repeat(): each repetition draws new numbers.
  auto rep = Dataset::range(5).map(noisy, {.seed = 11}).repeat(2).collect();
  EXPECT_NE(rep[0].tensor(1).item(), rep[5].tensor(1).item());
}

TEST(DatasetMap, ErrorsNameTheElementAndKeepTheMessage) {
  auto bad = [](Element e) {
    if (as_i64(e) == 5) throw std::runtime_error("cannot decode photo_5.jpg: truncated");
    return e;
  };
  for (int par : {0, 3}) {
    auto it = Dataset::range(8).map(bad, {.num_parallel_calls = par, .name = "decode"}).iterator(0);
    Element e;
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(it.next(e));
    try {
      it.next(e);
      FAIL() << "expected the map error";
    } catch (const Error& err) {
      const std::string m = err.what();
      EXPECT_NE(m.find("map(decode): element 5"), std::string::npos) << m;
      EXPECT_NE(m.find("cannot decode photo_5.jpg: truncated"), std::string::npos) << m;
    }
    // The iterator stays usable: the failing element is dropped.
    ASSERT_TRUE(it.next(e));
    EXPECT_EQ(as_i64(e), 6);
  }
}

TEST(DatasetMap, IgnoreErrorsSkipsAndCounts) {
  auto bad = [](Element e) {
    if (as_i64(e) % 4 == 1) throw Error("bad element");
    return e;
  };
  auto ds = Dataset::range(12).map(bad, {.num_parallel_calls = 2}).ignore_errors();
  testing::internal::CaptureStderr();
  std::vector<int64_t> got;
  int64_t skipped = 0;
  {
    auto it = ds.iterator(0);
    for (const Element& e : it) got.push_back(as_i64(e));
    skipped = it.errors_skipped();
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(got, (std::vector<int64_t>{0, 2, 3, 4, 6, 7, 8, 10, 11}));
  EXPECT_EQ(skipped, 3);
  EXPECT_NE(err.find("skipped 3 elements"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

// ----- prefetch and teardown ---------------------------------------------------------------

TEST(DatasetPrefetch, SameElementsAndErrorsPassThrough) {
  EXPECT_EQ(values(Dataset::range(100).prefetch(3)), iota(100));
  EXPECT_EQ(values(Dataset::range(100).map(times(2), {.num_parallel_calls = 2}).prefetch()), [] {
    auto v = iota(100);
    for (auto& x : v) x *= 2;
    return v;
  }());
  auto bad = Dataset::range(4).map([](Element e) -> Element {
    if (as_i64(e) == 2) throw Error("boom at two");
    return e;
  });
  auto it = bad.prefetch(2).iterator(0);
  Element e;
  ASSERT_TRUE(it.next(e));
  ASSERT_TRUE(it.next(e));
  EXPECT_THROW(
      {
        try {
          it.next(e);
        } catch (const Error& x) {
          EXPECT_NE(std::string(x.what()).find("boom at two"), std::string::npos);
          throw;
        }
      },
      Error);
  ASSERT_TRUE(it.next(e));
  EXPECT_EQ(as_i64(e), 3);
  EXPECT_FALSE(it.next(e));
}

TEST(DatasetPrefetch, AutotuneGrowsWithinBudget) {
  auto slow = [](Element e) {
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    return e;
  };
  auto ds = Dataset::range(60)
                .map(slow, {.num_parallel_calls = AUTOTUNE, .name = "slow"})
                .prefetch(AUTOTUNE)
                .with_options({.max_threads = 2, .max_prefetch = 8});
  auto it = ds.iterator(0);
  for (const Element& e : it) (void)e;
  const std::string r = it.autotune_report();
  EXPECT_NE(r.find("map(slow): parallelism 2/2"), std::string::npos) << r;
  EXPECT_NE(r.find("/8"), std::string::npos) << r;
}

TEST(DatasetTeardown, DestroyingMidIterationJoinsPromptly) {
  std::atomic<int> calls{0};
  auto slowish = [&calls](Element e) {
    calls++;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return e;
  };
  auto ds = Dataset::range(1000000)
                .map(slowish, {.num_parallel_calls = 4})
                .prefetch(4)
                .interleave([](Element e) { return Dataset::from_tensors(e).repeat(3); },
                            {.cycle_length = 2, .num_parallel_calls = 2})
                .prefetch(2);
  const auto t0 = std::chrono::steady_clock::now();
  for (int round = 0; round < 5; ++round) {
    auto it = ds.iterator(round);
    Element e;
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(it.next(e));
  }  // each iterator is destroyed with work in flight
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 60.0);  // hang guard: joining after the whole range would take 250 s per iterator
  const int after = calls.load();
  // The outcome: destruction cancelled the work in flight instead of draining the range (a
  // million 1 ms calls); each iterator ran its 10 elements plus what was prefetched.
  EXPECT_LT(after, 100000) << "the iterators drained the range before joining";
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(calls.load(), after) << "map calls continued after the iterators were destroyed";
}

// ----- interleave --------------------------------------------------------------------------

TEST(DatasetInterleave, RoundRobinBlocksLikeTfData) {
  // tf.data docs: range(1, 6).interleave(x -> [x] * 6, cycle_length=2, block_length=4)
  auto ds =
      Dataset::range(1, 6).interleave([](Element e) { return Dataset::from_tensors(e).repeat(6); },
                                      {.cycle_length = 2, .block_length = 4});
  std::vector<int64_t> expect = {1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3,
                                 3, 4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5};
  EXPECT_EQ(values(ds), expect);
  auto par = Dataset::range(1, 6).interleave(
      [](Element e) { return Dataset::from_tensors(e).repeat(6); },
      {.cycle_length = 2, .block_length = 4, .num_parallel_calls = 2});
  EXPECT_EQ(values(par), expect);
  auto nondet = Dataset::range(1, 6).interleave(
      [](Element e) { return Dataset::from_tensors(e).repeat(6); },
      {.cycle_length = 3, .num_parallel_calls = 3, .deterministic = false});
  auto v = values(nondet);
  std::sort(v.begin(), v.end());
  std::sort(expect.begin(), expect.end());
  EXPECT_EQ(v, expect);
}

TEST(DatasetInterleave, FileShardingPattern) {
  // list_files + shard before interleave: each worker reads only its files, together all.
  TempDir dir;
  for (int f = 0; f < 5; ++f) {
    std::ofstream out(dir / ("part" + std::to_string(f) + ".txt"));
    for (int r = 0; r < 3; ++r) out << f * 10 + r << "\n";
  }
  auto read_lines = [](Element e) {
    std::ifstream in(e.string(0));
    std::vector<int32_t> v;
    for (int x; in >> x;) v.push_back(x);
    return Dataset::from_tensor_slices(Tensor::from_vector_i32({int64_t(v.size())}, v));
  };
  std::vector<int64_t> all;
  for (int w = 0; w < 2; ++w) {
    auto ds = Dataset::list_files(dir / "*.txt", {.shuffle = false})
                  .shard(2, w)
                  .interleave(read_lines, {.cycle_length = 2, .num_parallel_calls = 2});
    auto v = values(ds);
    for (int64_t x : v) EXPECT_EQ((x / 10) % 2, w);
    all.insert(all.end(), v.begin(), v.end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<int64_t>{0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32, 40, 41, 42}));
}

// ----- cache -------------------------------------------------------------------------------

TEST(DatasetCache, MemoryCacheReplaysWithoutRerunningUpstream) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto ds = Dataset::range(10)
                .map([calls](Element e) {
                  (*calls)++;
                  return e;
                })
                .cache();
  EXPECT_EQ(values(ds), iota(10));
  EXPECT_EQ(calls->load(), 10);
  EXPECT_EQ(values(ds), iota(10));
  EXPECT_EQ(calls->load(), 10);
  // A partial first pass does not fill the cache.
  auto ds2 = Dataset::range(10)
                 .map([calls](Element e) {
                   (*calls)++;
                   return e;
                 })
                 .cache();
  {
    auto it = ds2.iterator(0);
    it.next();
  }
  EXPECT_EQ(values(ds2), iota(10));
  EXPECT_EQ(values(ds2.take(3)), iota(3));
}

struct FileCacheFixture {
  std::shared_ptr<std::atomic<int>> calls = std::make_shared<std::atomic<int>>(0);
  Dataset make(const std::string& file, const std::string& name = "plus_half") {
    auto c = calls;
    return Dataset::range(20)
        .map(
            [c](Element e) {
              (*c)++;
              return Element{Tensor::full({2}, float(as_i64(e)) + 0.5f),
                             std::string("f") + std::to_string(as_i64(e))};
            },
            {.num_parallel_calls = 2, .name = name})
        .cache(file);
  }
};

void expect_cache_values(const Dataset& ds) {
  auto els = ds.collect();
  ASSERT_EQ(els.size(), 20u);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(els[i].tensor(0).to_vector(), (std::vector<float>{i + 0.5f, i + 0.5f}));
    EXPECT_EQ(els[i].string(1), "f" + std::to_string(i));
  }
}

TEST(DatasetCache, FileIsWrittenThenReusedAcrossDatasets) {
  TempDir dir;
  const std::string file = dir / "c.cache";
  FileCacheFixture f;
  expect_cache_values(f.make(file));
  EXPECT_EQ(f.calls->load(), 20);
  ASSERT_TRUE(fs::exists(file));
  // No temporary file is left next to it.
  int entries = 0;
  for (auto& p : fs::directory_iterator(dir.path)) (void)p, ++entries;
  EXPECT_EQ(entries, 1);
  // "Next run": a freshly built, identical pipeline reads the file; the map never runs.
  FileCacheFixture g;
  expect_cache_values(g.make(file));
  EXPECT_EQ(g.calls->load(), 0);
}

TEST(DatasetCache, StaleFileIsRebuilt) {
  TempDir dir;
  const std::string file = dir / "c.cache";
  FileCacheFixture f;
  f.make(file).collect();
  FileCacheFixture g;  // the map changed (new name): the old file must not be used
  testing::internal::CaptureStderr();
  expect_cache_values(g.make(file, "plus_half_v2"));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(g.calls->load(), 20);
  EXPECT_NE(err.find("stale"), std::string::npos) << err;
  FileCacheFixture h;  // and now the rebuilt file is reused
  h.make(file, "plus_half_v2").collect();
  EXPECT_EQ(h.calls->load(), 0);
}

TEST(DatasetCache, ListedFilesChangingMakesTheCacheStale) {
  TempDir dir;
  std::ofstream(dir / "a.txt") << "1";
  const std::string file = dir / "files.cache";
  auto make = [&] { return Dataset::list_files(dir / "*.txt", {.shuffle = false}).cache(file); };
  make().collect();
  std::ofstream(dir / "a.txt") << "12345";  // new size
  testing::internal::CaptureStderr();
  make().collect();
  EXPECT_NE(testing::internal::GetCapturedStderr().find("stale"), std::string::npos);
}

TEST(DatasetCache, TruncatedOrInterruptedFileIsNeverReused) {
  TempDir dir;
  const std::string file = dir / "c.cache";
  FileCacheFixture f;
  f.make(file).collect();
  const auto size = fs::file_size(file);
  fs::resize_file(file, size - 40);  // lose the footer and part of the last element
  FileCacheFixture g;
  testing::internal::CaptureStderr();
  expect_cache_values(g.make(file));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(g.calls->load(), 20);
  EXPECT_NE(err.find("incomplete"), std::string::npos) << err;
  EXPECT_EQ(fs::file_size(file), size);

  // An interrupted first pass leaves no file (and no temporary) behind.
  const std::string file2 = dir / "d.cache";
  FileCacheFixture h;
  {
    auto it = h.make(file2).iterator(0);
    it.next();
    it.next();
  }
  EXPECT_FALSE(fs::exists(file2));
  int entries = 0;
  for (auto& p : fs::directory_iterator(dir.path)) (void)p, ++entries;
  EXPECT_EQ(entries, 1);
}

TEST(DatasetCache, ShuffleAfterCacheStillReshuffles) {
  auto ds = Dataset::range(30).cache().shuffle(30, {.seed = 1});
  auto a = values(ds, 0), b = values(ds, 1);
  EXPECT_NE(a, b);
  std::sort(b.begin(), b.end());
  EXPECT_EQ(b, iota(30));
}

// ----- introspection -----------------------------------------------------------------------

TEST(DatasetIntrospection, DescriptionSpecAndProbe) {
  auto ds = Dataset::range(10).map(times(3), {.name = "triple"}).batch(4);
  EXPECT_EQ(ds.description(), "range(0,10,1) -> map(triple, seed=0) -> batch(4)");
  EXPECT_FALSE(ds.element_spec().has_value());
  EXPECT_EQ(ds.probe_element_spec().str(), "(int64(4,))");
  EXPECT_EQ(ds.cardinality(), 3);
  EXPECT_THROW(Dataset().cardinality(), Error);
}

}  // namespace
}  // namespace lockstep::data
