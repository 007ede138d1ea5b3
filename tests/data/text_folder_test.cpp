// text_dataset_from_directory: labels from sorted class folders, label modes, the seeded split,
// max_length, and bad input (invalid UTF-8 replaced, an empty class folder, a file over the
// cap, a FIFO named .txt); plus the UTF-8 and string helpers behind TextVectorization.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "lockstep/data/text.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::data;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  fs::path d = test_util::temp_dir("textfolder") / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

// Classes "neg" and "pos" (sorted: neg = 0), 3 texts each; text "<class> <i>".
fs::path make_folder(const std::string& name) {
  fs::path d = fresh_dir(name);
  for (const char* c : {"pos", "neg"})
    for (int i = 0; i < 3; ++i)
      write(d / c / ("t" + std::to_string(i) + ".txt"), std::string(c) + " " + std::to_string(i));
  write(d / "pos" / "notes.md", "not a .txt: ignored");
  return d;
}

TextFolderOptions quiet(TextFolderOptions o = {}) {
  o.verbose = false;
  return o;
}

// All (text, label) pairs of a dataset, in iteration order.
std::vector<std::pair<std::string, int>> items(const Dataset& ds) {
  std::vector<std::pair<std::string, int>> out;
  auto it = ds.iterator();
  while (auto b = it.next()) {
    const Strings& s = b->strings(0);
    const Tensor y = b->tensor(1);
    for (size_t i = 0; i < s.size(); ++i) out.emplace_back(s[i], y.data<int32_t>()[i]);
  }
  return out;
}

}  // namespace

TEST(TextFolder, LabelsFromSortedFoldersAndBatchesOfStrings) {
  fs::path d = make_folder("basic");
  TextDataset ds =
      text_dataset_from_directory(d.string(), quiet({.batch_size = 4, .shuffle = false}));
  EXPECT_EQ(ds.class_names(), (std::vector<std::string>{"neg", "pos"}));
  ASSERT_EQ(ds.file_paths().size(), 6u);
  auto all = items(ds);
  ASSERT_EQ(all.size(), 6u);
  EXPECT_EQ(all[0], (std::pair<std::string, int>{"neg 0", 0}));
  EXPECT_EQ(all[5], (std::pair<std::string, int>{"pos 2", 1}));
  auto it = ds.iterator();
  auto b = it.next();
  EXPECT_EQ(b->strings(0).size(), 4u);  // batch_size
  EXPECT_EQ(b->tensor(1).dtype(), DType::i32);
}

TEST(TextFolder, CategoricalBinaryAndNoLabels) {
  fs::path d = make_folder("modes");
  auto cat = text_dataset_from_directory(
      d.string(), quiet({.label_mode = "categorical", .batch_size = 6, .shuffle = false}));
  auto b = cat.iterator().next();
  EXPECT_EQ(b->tensor(1).shape(), Shape({6, 2}));
  EXPECT_EQ(b->tensor(1).to_vector()[0 * 2 + 0], 1.f);  // "neg 0" -> [1, 0]
  auto bin = text_dataset_from_directory(
      d.string(), quiet({.label_mode = "binary", .batch_size = 6, .shuffle = false}));
  EXPECT_EQ(bin.iterator().next()->tensor(1).shape(), Shape({6, 1}));
  auto none = text_dataset_from_directory(
      d.string(), quiet({.labels = "none", .batch_size = 0, .shuffle = false}));
  auto e = none.iterator().next();
  ASSERT_EQ(e->size(), 1u);
  EXPECT_EQ(e->string(0), "neg 0");  // unbatched: one string
}

TEST(TextFolder, SeededSplitIsDisjointAndReproducible) {
  fs::path d = make_folder("split");
  TextFolderOptions o =
      quiet({.batch_size = 2, .seed = 7, .validation_split = 0.34, .subset = "both"});
  auto [train, val] = text_dataset_from_directory(d.string(), o);
  EXPECT_EQ(train.file_paths().size(), 4u);  // int(0.34 * 6) = 2 for validation
  EXPECT_EQ(val.file_paths().size(), 2u);
  std::set<std::string> t(train.file_paths().begin(), train.file_paths().end());
  for (const auto& f : val.file_paths()) EXPECT_FALSE(t.count(f)) << f;
  o.subset = "validation";
  EXPECT_EQ(text_dataset_from_directory(d.string(), o).file_paths(), val.file_paths());
  // The label of each text is its folder's.
  for (const auto& [text, label] : items(train))
    EXPECT_EQ(text.substr(0, 3), label ? "pos" : "neg");
}

TEST(TextFolder, MaxLengthCutsAtACharacterBoundary) {
  fs::path d = fresh_dir("maxlen");
  write(d / "a" / "x.txt", "h\xC3\xA9llo world");  // é is 2 bytes: h, é = bytes 0..2
  auto ds = text_dataset_from_directory(
      d.string(), quiet({.batch_size = 0, .max_length = 2, .shuffle = false}));
  EXPECT_EQ(ds.iterator().next()->string(0), "h");  // 2 bytes would split é: cut before it
  ds = text_dataset_from_directory(d.string(),
                                   quiet({.batch_size = 0, .max_length = 3, .shuffle = false}));
  EXPECT_EQ(ds.iterator().next()->string(0), "h\xC3\xA9");
}

TEST(TextFolder, InvalidUtf8IsReplacedNeverACrash) {
  fs::path d = fresh_dir("badutf8");
  write(d / "a" / "x.txt", std::string("ok \xFF\xFE then \xE2\x82 cut \xC0\xAF end"));
  auto ds = text_dataset_from_directory(d.string(), quiet({.batch_size = 0, .shuffle = false}));
  const std::string s = ds.iterator().next()->string(0);
  EXPECT_TRUE(is_valid_utf8(s));
  // Python: b"ok \xff\xfe then \xe2\x82 cut \xc0\xaf end".decode("utf-8", "replace")
  EXPECT_EQ(s, "ok \xEF\xBF\xBD\xEF\xBF\xBD then \xEF\xBF\xBD cut \xEF\xBF\xBD\xEF\xBF\xBD end");
}

TEST(TextFolder, EmptyClassFolderIsAnErrorNamingIt) {
  fs::path d = make_folder("emptyclass");
  fs::create_directories(d / "zzz");
  const std::string e =
      test_util::error_of([&] { text_dataset_from_directory(d.string(), quiet()); });
  test_util::expect_has(e, {"text_dataset_from_directory", "zzz", "contains no text files"});
}

TEST(TextFolder, FileOverTheCapIsAnErrorNamingIt) {
  fs::path d = make_folder("huge");
  write(d / "pos" / "huge.txt", std::string(3 << 20, 'a'));  // one 3 MiB line
  const std::string e = test_util::error_of(
      [&] { text_dataset_from_directory(d.string(), quiet({.max_file_bytes = 1 << 20})); });
  test_util::expect_has(e, {"huge.txt", "max_file_bytes", "1048576"});
  // Under the default cap (10 MiB) it loads, whole.
  auto ds = text_dataset_from_directory(d.string(), quiet({.batch_size = 0, .shuffle = false}));
  size_t longest = 0;
  for (auto it = ds.iterator(); auto e2 = it.next();)
    longest = std::max(longest, e2->string(0).size());
  EXPECT_EQ(longest, size_t(3 << 20));
  // A file that grows past the cap after indexing is named when read.
  EXPECT_THROW(read_text_file((d / "pos" / "huge.txt").string(), 1 << 20), Error);
}

TEST(TextFolder, FifoNamedTxtIsAnErrorNotAHang) {
  fs::path d = make_folder("fifo");
  ASSERT_EQ(::mkfifo((d / "pos" / "pipe.txt").c_str(), 0600), 0);
  const std::string e =
      test_util::error_of([&] { text_dataset_from_directory(d.string(), quiet()); });
  test_util::expect_has(e, {"pipe.txt", "FIFO", "not a regular text file"});
}

TEST(TextFolder, BadOptionsAreNamed) {
  fs::path d = make_folder("opts");
  test_util::expect_has(test_util::error_of([&] {
                          text_dataset_from_directory(d.string(), quiet({.label_mode = "sparse"}));
                        }),
                        {"label_mode"});
  test_util::expect_has(
      test_util::error_of([&] { text_dataset_from_directory((d / "nope").string(), quiet()); }),
      {"does not exist"});
}

TEST(TextStrings, Utf8Repair) {
  EXPECT_TRUE(is_valid_utf8("plain \xC3\xA9 \xF0\x9F\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));      // a surrogate
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // above U+10FFFF
  // Maximal subparts: E2 82 (truncated 3-byte) is one U+FFFD; C0 and AF are two.
  EXPECT_EQ(sanitize_utf8("\xE2\x82"), "\xEF\xBF\xBD");
  EXPECT_EQ(sanitize_utf8("a\xED\xA0\x80z"), "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDz");
  EXPECT_EQ(truncate_utf8("\xF0\x9F\x98\x80x", 3), "");
}

TEST(TextStrings, KerasStandardizeAndSplit) {
  EXPECT_EQ(lower_ascii("HeLLo \xC3\x89T\xC3\x89"), "hello \xC3\x89t\xC3\x89");  // É stays
  EXPECT_EQ(strip_punctuation("a!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~b \xC2\xBF\xC2\xA1"),
            "ab \xC2\xBF\xC2\xA1");  // only ASCII punctuation
  EXPECT_EQ(split_whitespace("  a\tb\n\nc  "), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(split_characters("a\xC3\xA9"), (std::vector<std::string>{"a", "\xC3\xA9"}));
  EXPECT_EQ(ngrams({"a", "b", "c"}, {1, 2}),
            (std::vector<std::string>{"a", "b", "c", "a b", "b c"}));
  EXPECT_EQ(ngrams({"a"}, {2}), std::vector<std::string>{});
}

TEST(TextStrings, FarmHashFingerprint64MatchesTensorFlow) {
  // tf.strings.to_hash_bucket_fast(s, 2**62) (TensorFlow 2.21): fingerprint64 mod 2^62, one
  // string per length branch of farmhashna (0, 1-3, 4-7, 8-16, 17-32, 33-64, > 64 bytes).
  const std::vector<std::pair<std::string, uint64_t>> cases = {
      {"", 1936946117179621455ULL},
      {"a", 3694432073954588131ULL},
      {"hello", 3786372426573024488ULL},
      {"hello world!!", 2069612503150846932ULL},
      {std::string(20, 'x'), 3621402210320469444ULL},
      {std::string(40, 'y'), 276292113409495006ULL},
      {std::string(100, 'z'), 4609163928736578169ULL},
      {"The quick brown fox jumps over the lazy dog and keeps running far away",
       1956545269649439193ULL}};
  for (const auto& [s, want] : cases)
    EXPECT_EQ(farmhash_fingerprint64(s) % (uint64_t(1) << 62), want) << "'" << s << "'";
}

TEST(TextStrings, TokenCounterKerasOrder) {
  TokenCounter c;
  c.add_document({"the", "cat", "sat"});
  c.add_document({"the", "dog"});
  c.add_document({"a", "b", "b"});
  // Keras: ['', '[UNK]', 'the', 'b', 'sat', 'dog', 'cat', 'a'] for these three texts.
  EXPECT_EQ(c.vocabulary(), (std::vector<std::string>{"the", "b", "sat", "dog", "cat", "a"}));
  EXPECT_EQ(c.vocabulary(3), (std::vector<std::string>{"the", "b", "sat"}));
  EXPECT_EQ(c.document_count("b"), 1);
  EXPECT_EQ(c.document_count("the"), 2);
  EXPECT_EQ(c.num_documents(), 3);
}

#include "lockstep/tools/text_export.h"

TEST(ExportFortunes, OneFilePerQuoteInClassFolders) {
  fs::path src = fresh_dir("fortunes_src"), out = fresh_dir("fortunes_out");
  write(src / "alpha", "first quote\n%\nsecond\n  quote\n%\n%\n\n%\nthird\n");
  write(src / "beta", "only one\r\n%\r\n");
  EXPECT_EQ(tools::split_fortunes("a\n%\n\n%\nb\n c\n"), (std::vector<std::string>{"a", "b\n c"}));
  auto res = tools::export_fortunes(src.string(), out.string(), {.categories = {"alpha", "beta"}});
  EXPECT_EQ(res.files, 4);
  EXPECT_EQ(res.per_class, (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(test_util::read_text_file((out / "alpha" / "00001.txt").string()), "second\n  quote\n");
  auto ds = text_dataset_from_directory(out.string(), quiet({.batch_size = 0, .shuffle = false}));
  EXPECT_EQ(ds.class_names(), (std::vector<std::string>{"alpha", "beta"}));
  EXPECT_EQ(ds.file_paths().size(), 4u);
  test_util::expect_has(
      test_util::error_of(
          [&] { tools::export_fortunes(src.string(), out.string(), {.categories = {"gamma"}}); }),
      {"gamma", "apt-get install fortunes"});
  EXPECT_THROW(tools::export_fortunes(src.string(), out.string(), {.categories = {"../alpha"}}),
               Error);
}
