// Checkpoints: weights round trip, optimizer state, atomic replacement, damaged files and
// mismatching architectures give errors naming the file and the weight.
#include "lockstep/io/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "lockstep/lockstep.h"
#include "lockstep/saving/checkpoint.h"
#include "test_util.h"

using namespace lockstep;
namespace fs = std::filesystem;

namespace {

Model net(int hidden, uint64_t seed) {
  set_random_seed(seed);
  reset_layer_names();
  Model m = Sequential(
      {layers::Input({5}), layers::Dense(hidden, {.activation = "relu"}), layers::Dense(2)});
  m.compile({.optimizer = optimizers::Adam(0.01),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  return m;
}

std::pair<Tensor, Tensor> make_data(int64_t n) {
  Tensor x = Tensor::empty(Shape{n, 5});
  Tensor y = Tensor::empty(Shape{n}, DType::i32);
  for (int64_t i = 0; i < n; ++i) {
    y.data<int32_t>()[i] = int32_t(i % 2);
    for (int j = 0; j < 5; ++j)
      x.data<float>()[i * 5 + j] = float((i * 7 + j * 3) % 11) / 11.f - float(i % 2);
  }
  return {x, y};
}

std::string tmpdir(const std::string& name) {
  return test_util::temp_dir("ckpt_" + name, /*fresh=*/true).string();
}

using lockstep::test_util::error_of;

}  // namespace

TEST(Checkpoint, WeightsRoundTrip) {
  auto dir = tmpdir("weights");
  auto [x, y] = make_data(32);
  Model a = net(4, 1);
  a.fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0});
  a.save_weights(dir + "/w.lsckpt");
  Model b = net(4, 99);
  b.load_weights(dir + "/w.lsckpt");
  auto wa = a.get_weights(), wb = b.get_weights();
  for (size_t i = 0; i < wa.size(); ++i) EXPECT_EQ(wa[i].to_vector(), wb[i].to_vector());
  EXPECT_EQ(a.predict(x).to_vector(), b.predict(x).to_vector());
  // No temporary file is left behind.
  int files = 0;
  for (auto& e : fs::directory_iterator(dir)) {
    ++files;
    EXPECT_EQ(e.path().filename(), "w.lsckpt");
  }
  EXPECT_EQ(files, 1);
}

TEST(Checkpoint, OptimizerStateResumesExactly) {
  auto dir = tmpdir("opt");
  auto [x, y] = make_data(32);
  Model ref = net(4, 1);
  ref.fit(x, y, {.batch_size = 8, .epochs = 2, .verbose = 0, .shuffle = false});
  Model a = net(4, 1);
  a.fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false});
  train::Checkpoint(a).save(dir + "/c.lsckpt", {1, 0});
  Model b = net(4, 5);  // different init, no program compiled yet: slots are created on restore
  auto p = train::Checkpoint(b).restore(dir + "/c.lsckpt");
  EXPECT_EQ(p.epoch, 1);
  EXPECT_FLOAT_EQ(b.compile_config().optimizer->iterations()->value.item(), 4.f);
  b.fit(x, y, {.batch_size = 8, .epochs = 2, .verbose = 0, .shuffle = false, .initial_epoch = 1});
  auto wr = ref.get_weights(), wb = b.get_weights();
  for (size_t i = 0; i < wr.size(); ++i) EXPECT_EQ(wr[i].to_vector(), wb[i].to_vector()) << i;
}

TEST(Checkpoint, MismatchAndDamageErrorsNameFileAndWeight) {
  auto dir = tmpdir("bad");
  Model a = net(4, 1);
  std::string path = dir + "/a.lsckpt";
  a.save_weights(path);
  Model wider = net(6, 1);
  std::string msg = error_of([&] { wider.load_weights(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("kernel"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(5, 4)"), std::string::npos) << msg;

  // Flip one byte in the data: checksum mismatch.
  std::string bad = dir + "/flipped.lsckpt";
  fs::copy_file(path, bad);
  {
    std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    char c;
    f.read(&c, 1);
    f.seekp(100);
    c = char(c ^ 0x5a);
    f.write(&c, 1);
  }
  msg = error_of([&] { a.load_weights(bad); });
  EXPECT_NE(msg.find("checksum"), std::string::npos) << msg;
  EXPECT_NE(msg.find(bad), std::string::npos) << msg;

  // Truncated: end marker missing.
  std::string cut = dir + "/cut.lsckpt";
  fs::copy_file(path, cut);
  fs::resize_file(cut, fs::file_size(cut) / 2);
  msg = error_of([&] { a.load_weights(cut); });
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;

  msg = error_of([&] { a.load_weights(dir + "/missing.lsckpt"); });
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
}

TEST(Checkpoint, OverwriteKeepsTheLastGoodFileUntilRename) {
  auto dir = tmpdir("atomic");
  std::string path = dir + "/c.lsckpt";
  io::CheckpointFile f;
  f.metadata = {{"v", 1}};
  f.tensors.push_back({"a", Tensor::full(Shape{3}, 1.f)});
  io::write_checkpoint_file(path, f);
  // A stale temporary file from a crashed writer does not matter.
  { std::ofstream(path + ".tmp-1") << "garbage"; }
  f.metadata = {{"v", 2}};
  io::write_checkpoint_file(path, f);
  auto g = io::read_checkpoint_file(path);
  EXPECT_EQ(g.metadata["v"], 2);
  EXPECT_EQ(g.tensors.at(0).value.to_vector(), std::vector<float>({1, 1, 1}));
}
