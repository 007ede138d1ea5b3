// `lockstep generate` on a tiny byte-level GPT saved as .keras (examples/gpt_model.h's "tiny",
// untrained): it prints the prompt and then what GptGenerator generates in-process from the
// same file, the same text for the same seed, with and without --no-cache; a model of another
// shape and missing flags are refused naming the problem.
#include <gtest/gtest.h>

#include "../../examples/gpt_model.h"
#include "lockstep/nn/generate.h"
#include "lockstep/tools/paths.h"
#include "test_util.h"
#include "tools/cli_test_util.h"

using namespace lockstep;

namespace {

// What the command prints for `text`: line by line, control characters escaped.
std::string as_printed(const std::string& text) {
  std::string out, line;
  for (char c : text + "\n") {
    if (c != '\n') {
      line += c;
      continue;
    }
    out += tools::printable(line) + "\n";
    line.clear();
  }
  return out;
}

// One compute thread while the test runs, as the command is given (--threads 1): the same
// summation order in both, and no OpenMP waits on a machine whose cores other jobs hold.
struct OneThread {
  int before = num_threads();
  OneThread() { set_num_threads(1); }
  ~OneThread() { set_num_threads(before); }
};

}  // namespace

TEST(CliGenerate, PrintsWhatTheGeneratorWritesForASeed) {
  OneThread one;
  const std::string bin = cli_test::binary();
  if (bin.empty()) GTEST_SKIP() << "bin/lockstep is not built";
  const auto dir = test_util::temp_dir("cli_generate", true);
  const std::string path = (dir / "gpt.keras").string();
  {
    reset_layer_names();
    set_random_seed(1);
    Model m = gpt_model(gpt_preset("tiny"));
    m.save(path);
  }
  Model loaded = load_model(path, false);
  GptGenerator gen(loaded);
  const std::string want = as_printed(ids_to_bytes(gen.generate(
      bytes_to_ids("Hello"), {.max_new_tokens = 24, .temperature = 0.9, .top_k = 8, .seed = 3})));
  const std::string cmd = "'" + bin + "' generate --model '" + path +
                          "' --prompt Hello --max-tokens 24 --temperature 0.9 --top-k 8 --seed 3 "
                          "--threads 1";
  const std::string err = (dir / "stderr.txt").string();
  const auto a = cli_test::run_shell(cmd + " 2>'" + err + "'");
  ASSERT_EQ(a.rc, 0) << a.out;
  EXPECT_EQ(a.out, want);
  EXPECT_EQ(a.out.rfind("Hello", 0), 0u);
  const std::string timing = test_util::read_text_file(err);  // the speed, on stderr
  EXPECT_NE(timing.find("24 bytes in"), std::string::npos) << timing;
  const auto b = cli_test::run_shell(cmd + " --no-cache 2>/dev/null");
  ASSERT_EQ(b.rc, 0) << b.out;
  EXPECT_EQ(b.out, want);
  const auto other = cli_test::run_shell(cmd + " --seed 4 2>/dev/null");
  EXPECT_NE(other.out, want);
}

TEST(CliGenerate, RefusesMissingFlagsAndModelsOfAnotherShape) {
  const std::string bin = cli_test::binary();
  if (bin.empty()) GTEST_SKIP() << "bin/lockstep is not built";
  const auto dir = test_util::temp_dir("cli_generate_refuses", true);
  const std::string path = (dir / "dense.keras").string();
  {
    Model m = Sequential({layers::Input({4}), layers::Dense(2)});
    m.save(path);
  }
  const auto no_prompt = cli_test::run_shell("'" + bin + "' generate --model '" + path + "' 2>&1");
  EXPECT_EQ(no_prompt.rc, 1);
  EXPECT_NE(no_prompt.out.find("--prompt TEXT is required"), std::string::npos) << no_prompt.out;
  const auto wrong =
      cli_test::run_shell("'" + bin + "' generate --model '" + path + "' --prompt hi 2>&1");
  EXPECT_EQ(wrong.rc, 1);
  EXPECT_NE(wrong.out.find("TokenAndPositionEmbedding"), std::string::npos) << wrong.out;
}
