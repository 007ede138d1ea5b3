// Writes the seed corpus of the fuzz targets (tests/fuzz/corpus/<target>/, committed): a few
// small valid inputs each, made with Lockstep's own writers so they stay valid as formats
// evolve. Run by hand after a format change:
//   cmake --preset fuzz && cmake --build build-fuzz && build-fuzz/bin/make_fuzz_corpus
//   tests/fuzz/corpus
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "distribute/store_protocol.h"
#include "lockstep/data/image.h"
#include "lockstep/io/checkpoint.h"
#include "lockstep/io/keras_file.h"
#include "lockstep/nn/config.h"
#include "lockstep/nn/layers.h"

namespace fs = std::filesystem;
using namespace lockstep;

namespace {

void write(const fs::path& path, const std::vector<uint8_t>& bytes) {
  fs::create_directories(path.parent_path());
  data::write_file_bytes(path.string(), bytes);
}
void write(const fs::path& path, const std::string& text) {
  write(path, std::vector<uint8_t>(text.begin(), text.end()));
}

Tensor gradient_image(int64_t height, int64_t width, int64_t channels) {
  Tensor image = Tensor::empty(Shape{height, width, channels}, DType::u8);
  uint8_t* p = image.data<uint8_t>();
  for (int64_t i = 0; i < image.numel(); ++i) p[i] = uint8_t((i * 37) & 0xff);
  return image;
}

std::vector<uint8_t> idx_file(uint8_t type, const std::vector<uint32_t>& dims, size_t elem) {
  std::vector<uint8_t> out = {0, 0, type, uint8_t(dims.size())};
  size_t count = 1;
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(uint8_t(d >> shift));
    count *= d;
  }
  for (size_t i = 0; i < count * elem; ++i) out.push_back(uint8_t(i * 7));
  return out;
}

void images(const fs::path& root) {
  write(root / "image_png/gray_4x3.png", data::encode_png(gradient_image(3, 4, 1)));
  write(root / "image_png/gray_alpha_4x3.png", data::encode_png(gradient_image(3, 4, 2)));
  write(root / "image_png/rgb_5x4.png", data::encode_png(gradient_image(4, 5, 3)));
  write(root / "image_png/rgba_3x3.png", data::encode_png(gradient_image(3, 3, 4)));
  write(root / "image_jpeg/gray_8x8.jpg", data::encode_jpeg(gradient_image(8, 8, 1), 75));
  write(root / "image_jpeg/rgb_9x7.jpg", data::encode_jpeg(gradient_image(7, 9, 3), 75));
  write(root / "image_bmp/rgb_5x3.bmp", data::encode_bmp(gradient_image(3, 5, 3)));
  write(root / "image_bmp/rgba_4x4.bmp", data::encode_bmp(gradient_image(4, 4, 4)));
}

void idx(const fs::path& root) {
  write(root / "idx/labels_u8_10.idx", idx_file(0x08, {10}, 1));
  write(root / "idx/images_u8_2x3x4.idx", idx_file(0x08, {2, 3, 4}, 1));
  // Gzip copies of these seeds (the reader inflates .gz) are made by run_fuzz.sh at run time,
  // so that no compressed file is committed.
  write(root / "idx/images_u8_3x2x2.idx", idx_file(0x08, {3, 2, 2}, 1));
}

void checkpoints(const fs::path& root) {
  io::CheckpointFile file;
  file.metadata = {{"format", "fuzz seed"}, {"epoch", 1}};
  file.tensors.push_back({"dense/kernel", Tensor::from_vector(Shape{2, 3}, {1, 2, 3, 4, 5, 6})});
  file.tensors.push_back({"dense/bias", Tensor::from_vector(Shape{3}, {0.5f, -1, 2})});
  file.tensors.push_back({"labels", Tensor::from_vector_i32(Shape{2}, {7, 9})});
  const fs::path tmp = fs::temp_directory_path() / "lockstep_fuzz_seed.lsckpt";
  io::write_checkpoint_file(tmp.string(), file);
  write(root / "checkpoint/three_tensors.lsckpt", data::read_file_bytes(tmp.string()));
  file.tensors.clear();
  io::write_checkpoint_file(tmp.string(), file);
  write(root / "checkpoint/metadata_only.lsckpt", data::read_file_bytes(tmp.string()));
  fs::remove(tmp);
}

void clusters(const fs::path& root) {
  write(root / "tf_config/two_workers.json",
        R"({"cluster":{"worker":["127.0.0.1:23456","127.0.0.1:23457"]},)"
        R"("task":{"type":"worker","index":1}})");
  write(root / "tf_config/chief_and_worker.json",
        R"({"cluster":{"chief":["host-a:2222"],"worker":["host-b:2222","[::1]:2223"]},)"
        R"("task":{"type":"chief","index":0}})");
  write(root / "cluster_env/tf_config.env",
        "TF_CONFIG={\"cluster\":{\"worker\":[\"localhost:1\",\"localhost:2\"]},"
        "\"task\":{\"type\":\"worker\",\"index\":0}}\n");
  write(root / "cluster_env/openmpi.env",
        "OMPI_COMM_WORLD_RANK=1\nOMPI_COMM_WORLD_SIZE=4\nOMPI_COMM_WORLD_LOCAL_SIZE=4\n"
        "LOCKSTEP_MASTER_PORT=29500\n");
  write(root / "cluster_env/pmix.env", "PMIX_RANK=0\nPMIX_SIZE=2\nMASTER_ADDR=node7\n");
  write(root / "cluster_env/slurm.env",
        "SLURM_PROCID=2\nSLURM_NTASKS=3\nSLURM_STEP_NODELIST=gpu[01-02,07],cpu-x\n"
        "SLURMD_NODENAME=gpu02\nMASTER_PORT=29600\n");
}

void store_requests(const fs::path& root) {
  namespace sp = distribute::store_protocol;
  sp::Writer w;
  w.pod(uint8_t(sp::kHello)), w.str("job-token");
  w.pod(uint8_t(sp::kSet)), w.str("worker/0/address"), w.bytes({'1', '2', '7'});
  w.pod(uint8_t(sp::kGet)), w.str("worker/0/address"), w.pod(int64_t(1000));
  w.pod(uint8_t(sp::kAdd)), w.str("arrived"), w.pod(int64_t(1));
  w.pod(uint8_t(sp::kCheck)), w.str("arrived");
  w.pod(uint8_t(sp::kWait)), w.pod(uint32_t(2)), w.str("a"), w.str("b"), w.pod(int64_t(50));
  w.pod(uint8_t(sp::kRegister)), w.pod(int32_t(1));
  w.pod(uint8_t(sp::kLost)), w.pod(int64_t(0));
  w.pod(uint8_t(sp::kBye));
  write(root / "store_protocol/session.bin", std::vector<uint8_t>(w.buf.begin(), w.buf.end()));
  sp::Writer hello;
  hello.pod(uint8_t(sp::kHello)), hello.str("");
  write(root / "store_protocol/hello.bin",
        std::vector<uint8_t>(hello.buf.begin(), hello.buf.end()));
}

// Small Keras models: a Sequential CNN, a functional model with a branch, Add and Concatenate,
// and a model nesting a Sequential and a functional model.
std::vector<std::pair<std::string, Network>> keras_models() {
  using namespace layers;
  std::vector<std::pair<std::string, Network>> out;
  out.push_back({"sequential_cnn",
                 Network::sequential(
                     {Input({6, 6, 1}), Conv2D(2, 3, {.activation = "relu"}), BatchNormalization(),
                      MaxPooling2D(), Flatten(), Dropout(0.5), Dense(3, {.activation = "softmax"})},
                     "cnn", true)});
  KTensor in = Input({5, 5, 2}, "pixels");
  KTensor a = Conv2D(2, 1)(in);
  KTensor s = Add()({a, in});
  KTensor c = Concatenate()({s, in});
  KTensor o = Dense(2)(GlobalAveragePooling2D()(c));
  out.push_back({"functional_branch", Network({in}, {o}, "branch")});
  Network inner =
      Network::sequential({Input({4}), Dense(3, {.activation = "tanh"})}, "inner", true);
  KTensor fi = Input({3});
  Network inner_fn({fi}, {Dense(2)(fi)}, "inner_fn");
  KTensor x = Input({4}, "x");
  out.push_back({"nested", Network({x}, {Dense(1)(inner_fn(inner(x)))}, "outer")});
  return out;
}

void keras(const fs::path& root) {
  const fs::path tmp = fs::temp_directory_path() / "lockstep_fuzz_seed.keras";
  for (auto& [name, net] : keras_models()) {
    write(root / "keras_config" / (name + ".json"), net.get_config().dump());
    io::KerasArchive a;
    a.config = net.get_config();
    a.metadata = {{"keras_version", "3.15.1"}};
    a.groups = {"vars", "layers"};
    for (auto& slot : keras_weight_slots(net)) {
      a.groups.push_back(slot.path + "/vars");
      for (size_t i = 0; i < slot.weights.size(); ++i)
        a.weights.push_back({slot.path + "/vars/" + std::to_string(i), slot.weights[i]->value});
    }
    io::write_keras_archive(tmp.string(), a);
    write(root / "keras_file" / (name + ".keras"), data::read_file_bytes(tmp.string()));
  }
  fs::remove(tmp);
}

// keras_node_indices: the bytes of a valid two-input model (see keras_node_indices_fuzz.cpp for
// how they are read), then the same with the output's node index -1 (table entry 8) and its
// tensor index 2^32 - 1 (entry 10), the inputs of issue 25's crashes.
void node_indices(const fs::path& root) {
  const std::vector<uint8_t> valid = {1, 0, 0, 0, 1, 0, 1, 1, 0, 0, 1, 1, 1, 1, 2,
                                      0, 0, 1, 3, 0, 0, 1, 0, 1, 4, 0, 0, 1, 0, 1,
                                      0, 0, 0, 1, 1, 0, 0, 1, 0, 5, 0, 0, 1, 1};
  write(root / "keras_node_indices/two_inputs.bin", valid);
  std::vector<uint8_t> bad = valid;
  bad[bad.size() - 4] = 8;  // output ["out", -1, 0]
  write(root / "keras_node_indices/node_index_negative.bin", bad);
  bad = valid;
  bad[bad.size() - 3] = 10;  // output ["out", 0, 4294967295]
  write(root / "keras_node_indices/tensor_index_2_32.bin", bad);
}

// keras_weights: the fuzz target's model's weights, and two files whose one dataset declares
// (2^31 - 1, 2^31 + 1) and (24576, 32768) floats over 3 x 5 of them (issue 25, items 1 and 4).
void weights(const fs::path& root) {
  using namespace layers;
  Network net = Network::sequential(
      {Input({4, 4, 1}), Conv2D(2, 3), BatchNormalization(), Flatten(), Dense(3)}, "small", true);
  std::vector<io::NamedTensor> tensors;
  for (auto& slot : keras_weight_slots(net))
    for (size_t i = 0; i < slot.weights.size(); ++i)
      tensors.push_back({slot.path + "/vars/" + std::to_string(i), slot.weights[i]->value});
  const fs::path tmp = fs::temp_directory_path() / "lockstep_fuzz_seed.weights.h5";
  io::write_h5_tensors(tmp.string(), tensors, {"layers"});
  write(root / "keras_weights/small.weights.h5", data::read_file_bytes(tmp.string()));
  io::write_h5_tensors(tmp.string(), {{"x", Tensor::full(Shape{3, 5}, 1.f)}});
  const std::vector<uint8_t> source = data::read_file_bytes(tmp.string());
  auto patched = [&](uint64_t rows, uint64_t cols) {  // the dataspace's dims (3, 5), replaced
    std::vector<uint8_t> bytes = source;
    const uint64_t from[2] = {3, 5}, to[2] = {rows, cols};
    for (size_t at = 0; at + 16 <= bytes.size(); ++at)
      if (std::memcmp(&bytes[at], from, 16) == 0) std::memcpy(&bytes[at], to, 16);
    return bytes;
  };
  write(root / "keras_weights/huge_dims.weights.h5", patched((1ull << 31) - 1, (1ull << 31) + 1));
  write(root / "keras_weights/3_gb_dims.weights.h5", patched(24576, 32768));
  fs::remove(tmp);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_fuzz_corpus DIR (tests/fuzz/corpus)\n");
    return 2;
  }
  const fs::path root = argv[1];
  images(root);
  idx(root);
  checkpoints(root);
  clusters(root);
  store_requests(root);
  keras(root);
  node_indices(root);
  weights(root);
  return 0;
}
