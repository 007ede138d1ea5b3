// ModelCheckpoint's filepath pattern is checked before training (issue 25, item 10): a key the
// logs will not have ({nonexistent}), a width that makes a name too long ({epoch:99999999d}) or
// a plain name over 255 bytes failed only after the first epoch's work, and `lockstep train
// --out` was then never written. Now fit fails before any epoch begins.
#include <gtest/gtest.h>

#include <filesystem>

#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::layers;
namespace fs = std::filesystem;

TEST(CheckpointPattern, BadPatternsFailBeforeTheFirstEpoch) {
  const fs::path dir = test_util::temp_dir("checkpoint_pattern", /*fresh=*/true);
  Tensor x = Tensor::full(Shape{8, 4}, 0.5f);
  Tensor y = Tensor::zeros(Shape{8}, DType::i32);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{nonexistent}.keras", "'nonexistent'"},
      {"{epoch:99999999d}.keras", "99999999d"},
      {"{epoch:300d}.keras", "at most 255"},
      {std::string(300, 'n') + "{epoch}.keras", "at most 255"}};
  for (const auto& [pattern, expected] : cases) {
    Model m = Sequential({Input({4}), Dense(3)});
    m.compile({.optimizer = optimizers::SGD(0.1),
               .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
               .metrics = {"accuracy"}});
    int epochs_begun = 0;
    LambdaHooks hooks;
    hooks.on_epoch_begin = [&](int, const Logs&) { ++epochs_begun; };
    const std::string e = test_util::error_of([&] {
      m.fit(x, y,
            {.batch_size = 4,
             .epochs = 2,
             .verbose = 0,
             .callbacks = {callbacks::ModelCheckpoint((dir / pattern).string()),
                           callbacks::LambdaCallback(hooks)}});
    });
    EXPECT_NE(e.find(expected), std::string::npos) << pattern.substr(0, 40) << ": " << e;
    EXPECT_EQ(epochs_begun, 0) << pattern.substr(0, 40) << ": the error came after training began";
  }
  // Keys the logs will have are accepted up front (and the files are written).
  Model m = Sequential({Input({4}), Dense(3)});
  m.compile({.optimizer = optimizers::SGD(0.1),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy"}});
  m.fit(x, y,
        {.batch_size = 4,
         .epochs = 1,
         .verbose = 0,
         .callbacks = {callbacks::ModelCheckpoint(
             (dir / "e{epoch:02d}-{loss:.2f}-{accuracy:.2f}.keras").string())}});
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}), 1);
}
