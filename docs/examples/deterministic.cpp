// Deterministic training (docs/determinism.md): the same seeds give the same weights, bit for
// bit, and a run killed mid-epoch and resumed from its backup ends with the same bytes too.
//   build/bin/deterministic [BACKUP_DIR]     (default determinism_backup/)
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <lockstep/lockstep.h>
#include <lockstep/tools/example_args.h>
namespace ls = lockstep;
using namespace ls::layers;

// docs: begin train
static std::vector<ls::Tensor> train(const ls::data::FashionMnist& data,
                                     std::vector<ls::CallbackPtr> callbacks = {}) {
  ls::set_random_seed(42);  // the weights' initial values ...
  ls::reset_layer_names();   // ... which depend on the layer names too: conv2d, not conv2d_1
  ls::Model model = ls::Sequential({Input({28, 28, 1}), RandomFlip("horizontal", 1),
                                    Conv2D(8, 3, {.activation = "relu"}), MaxPooling2D(),
                                    Flatten(), Dropout(0.3, 2), Dense(10)});
  model.compile({.optimizer = ls::optimizers::Adam(1e-3),
                 .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true})});
  const int64_t n = std::min<int64_t>(1024, data.x_train.dim(0));
  model.fit(data.x_train.slice(0, n), data.y_train.slice(0, n),
            {.batch_size = 64, .epochs = 2, .verbose = 0, .callbacks = callbacks,
             .seed = 3});  // the shuffle order
  return model.get_weights();
}
// docs: end train

static bool same_bytes(const std::vector<ls::Tensor>& a, const std::vector<ls::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].nbytes() != b[i].nbytes() || std::memcmp(a[i].raw(), b[i].raw(), a[i].nbytes()))
      return false;
  return true;
}

int main(int argc, char** argv) {
  const auto args = ls::tools::parse_example_args(
      argc, argv,
      "usage: deterministic [BACKUP_DIR]\n"
      "Trains twice with the same seeds, and once killed and resumed from BACKUP_DIR (default\n"
      "determinism_backup/, deleted first), and says whether the weights match bit for bit.\n",
      {}, 1);
  const std::string backup = args.positional_or(0, "determinism_backup");
  std::filesystem::remove_all(backup);
  // docs: begin main
  ls::config::enable_op_determinism();  // keras.config.enable_op_determinism()
  auto data = ls::data::load_fashion_mnist();
  std::vector<ls::Tensor> first = train(data), second = train(data);
  std::printf("two runs, same bytes: %s\n", same_bytes(first, second) ? "yes" : "NO");

  // Kill a run three quarters of the way through (a callback throws: step 24 of 32 with the full
  // data), then run it again: BackupAndRestore saves every 6 steps and at each epoch's end, so
  // the second run resumes from its last save and replays the same batches from there.
  const int64_t steps = 2 * ((std::min<int64_t>(1024, data.x_train.dim(0)) + 63) / 64);
  int64_t step = 0;
  auto crash = ls::callbacks::LambdaCallback(nullptr, [&](int, const ls::Logs&) {
    if (++step == steps * 3 / 4)
      throw std::runtime_error("simulated crash at step " + std::to_string(step));
  });
  try {
    train(data, {ls::callbacks::BackupAndRestore(backup, 6), crash});
  } catch (const std::exception& e) {
    std::printf("first attempt: %s\n", e.what());
  }
  std::vector<ls::Tensor> resumed = train(data, {ls::callbacks::BackupAndRestore(backup, 6)});
  std::printf("killed and resumed, same bytes: %s\n", same_bytes(first, resumed) ? "yes" : "NO");
  // docs: end main
  return same_bytes(first, second) && same_bytes(first, resumed) ? 0 : 1;
}
