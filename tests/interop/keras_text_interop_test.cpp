// Text preprocessing against real Keras 3 (TensorFlow backend for string tensors): Keras builds
// models whose input is strings (Input(dtype="string") -> TextVectorization adapted, with a
// fixed vocabulary, by characters; StringLookup; Hashing -> Dense), saves them; Lockstep loads
// each (the vocabulary from the file's assets), predicts on the same strings within 1e-4, and
// saves it again; Keras loads Lockstep's files and predicts within 1e-4. Lockstep's adapt() gives
// Keras's vocabulary on the same corpus (words, bigrams, characters; tf_idf weights), and a
// TextVectorization Lockstep adapted, rebuilt in Keras from its config and vocabulary, gives
// Lockstep's ids. Runs when LOCKSTEP_INTEROP_PYTHON names a python with keras and tensorflow
// (ctest keras_text_interop, label interop); skipped otherwise.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "lockstep/lockstep.h"
#include "lockstep/nn/text_layers.h"
#include "test_util.h"

using namespace lockstep;
namespace fs = std::filesystem;

namespace {

json read_json(const fs::path& p) { return json::parse(std::ifstream(p)); }

data::Strings strings_of(const json& j) { return j.get<std::vector<std::string>>(); }

int run_python(const char* py, const std::string& mode, const fs::path& dir) {
  const std::string cmd = std::string(py) + " " + LOCKSTEP_SOURCE_DIR +
                          "/tests/interop/keras_text_interop.py " + mode + " " + dir.string();
  return std::system(cmd.c_str());
}

// Keras's files in Lockstep: the same predictions on the same strings; then saved again.
json keras_to_lockstep(const fs::path& dir) {
  json cases = read_json(dir / "keras_cases.json"), mine = json::object();
  for (auto& [name, c] : cases.items()) {
    SCOPED_TRACE(name);
    Model m = load_model((dir / ("keras_" + name + ".keras")).string());
    EXPECT_TRUE(m.host_preprocessing()) << name;
    const data::Strings s = strings_of(c["strings"]);
    auto ds = data::Dataset::from_tensor_slices({data::Component(s)}).batch(int64_t(s.size()));
    Tensor got = m.predict(ds);
    std::vector<float> want;
    for (auto& row : c["output"])
      for (auto& v : row) want.push_back(v.get<float>());
    if (got.numel() != int64_t(want.size())) {
      ADD_FAILURE() << name << ": Lockstep gives " << got.shape().str() << ", Keras " << want.size()
                    << " values";
      continue;
    }
    const auto g = got.to_vector();
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(g[i], want[i], 1e-4) << name << " " << i;
    m.save((dir / ("lockstep_" + name + ".keras")).string());
    json rows = json::array();
    const int64_t cols = got.numel() / got.dim(0);
    for (int64_t r = 0; r < got.dim(0); ++r)
      rows.push_back(std::vector<float>(g.begin() + r * cols, g.begin() + (r + 1) * cols));
    mine[name] = {{"strings", c["strings"]}, {"output", rows}};
  }
  return mine;
}

void adapt_matches_keras(const fs::path& dir) {
  json v = read_json(dir / "keras_vocab.json");
  const data::Strings corpus = strings_of(v["corpus"]), probe = strings_of(v["probe"]);
  auto words = layers::TextVectorization();
  words->adapt(corpus);
  EXPECT_EQ(words->get_vocabulary(), v["int"].get<std::vector<std::string>>());
  auto bigrams = layers::TextVectorization({.ngrams = {2}});
  bigrams->adapt(corpus);
  EXPECT_EQ(bigrams->get_vocabulary(), v["bigrams"].get<std::vector<std::string>>());
  auto chars = layers::TextVectorization({.split = "character"});
  chars->adapt(corpus);
  EXPECT_EQ(chars->get_vocabulary(), v["chars"].get<std::vector<std::string>>());
  auto tfidf = layers::TextVectorization({.output_mode = "tf_idf"});
  tfidf->adapt(corpus);
  const auto got = tfidf->apply(probe).to_vector();
  size_t i = 0;
  for (auto& row : v["tf_idf_output"])
    for (auto& x : row) {
      ASSERT_LT(i, got.size());
      EXPECT_NEAR(got[i++], x.get<float>(), 1e-5) << "tf_idf element " << i - 1;
    }
  EXPECT_EQ(i, got.size());
}

void write_lockstep_tv(const fs::path& dir) {
  json v = read_json(dir / "keras_vocab.json");
  auto tv = layers::TextVectorization({.max_tokens = 25, .output_sequence_length = 7});
  tv->adapt(strings_of(v["corpus"]));
  const data::Strings probe = strings_of(v["probe"]);
  Tensor ids = tv->apply(probe);
  json rows = json::array();
  for (int64_t r = 0; r < ids.dim(0); ++r) {
    std::vector<int64_t> row(ids.data<int64_t>() + r * 7, ids.data<int64_t>() + (r + 1) * 7);
    rows.push_back(row);
  }
  std::ofstream(dir / "lockstep_tv.json") << json{
      {"config", tv->config()},
      {"vocabulary", tv->get_vocabulary()},
      {"strings", v["probe"]},
      {"ids", rows}}.dump();
}

}  // namespace

TEST(KerasTextInterop, BothDirectionsOnStrings) {
  const char* py = std::getenv("LOCKSTEP_INTEROP_PYTHON");
  if (!py || !*py) GTEST_SKIP() << "needs Keras and TensorFlow: run `ctest -R keras_text_interop`";
  fs::path dir = test_util::temp_dir("keras_text_interop", /*fresh=*/true);
  ASSERT_EQ(run_python(py, "make", dir), 0) << "Keras could not build the text models";
  json mine = keras_to_lockstep(dir);
  std::ofstream(dir / "lockstep_cases.json") << mine.dump();
  adapt_matches_keras(dir);
  write_lockstep_tv(dir);
  EXPECT_EQ(run_python(py, "check", dir), 0) << "Keras did not load Lockstep's text files alike";
}
