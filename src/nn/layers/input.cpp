// keras.Input: an InputLayer whose single LayerCall has no inputs and one symbolic output.
#include "nn/layers/layer_util.h"

namespace lockstep {
namespace {

class InputLayer : public Layer {
 public:
  InputLayer(Shape batch_shape, DType dtype, std::string name)
      : Layer(std::move(name)), batch_shape_(batch_shape), dtype_(dtype) {}
  std::string class_name() const override { return "InputLayer"; }
  json layer_config() const override {
    json shape = json::array();
    for (int i = 0; i < batch_shape_.rank(); ++i) {
      if (batch_shape_[i] < 0)
        shape.push_back(nullptr);
      else
        shape.push_back(batch_shape_[i]);
    }
    json c = {{"batch_shape", shape}, {"sparse", false}, {"ragged", false}};
    // Integer ids (Embedding's input) as Keras writes keras.Input(dtype="int32"); Layer::config
    // keeps a dtype layer_config() sets.
    if (dtype_ == DType::i32 || dtype_ == DType::i64 || dtype_ == DType::u8)
      c["dtype"] = dtype_ == DType::i32 ? "int32" : dtype_ == DType::i64 ? "int64" : "uint8";
    return c;
  }
  // The model feeds its graph inputs straight through.
  std::vector<Value> call(CallContext&, const std::vector<Value>& in) override { return in; }

 private:
  Shape batch_shape_;
  DType dtype_;
};

}  // namespace

namespace layers {

KTensor Input(std::vector<int64_t> shape, std::string name, DType dtype) {
  std::string n = layer_util::default_name(name, "input_layer");
  LS_CHECK(int(shape.size()) + 1 <= Shape::kMaxRank, "Input '", n, "': shape has ", shape.size(),
           " dims; at most ", Shape::kMaxRank - 1, " are supported");
  for (int64_t d : shape)
    LS_CHECK(d > 0, "Input '", n, "': dimensions must be positive (the batch is implicit), got ",
             Shape(shape).str());
  Shape batch_shape{-1};
  for (int64_t d : shape) batch_shape.push_back(d);
  auto layer = std::make_shared<InputLayer>(batch_shape, dtype, n);
  layer->ensure_built({batch_shape});
  auto lc = std::make_shared<LayerCall>();
  lc->layer = layer;
  lc->outputs.push_back({dtype, batch_shape});
  return KTensor{lc, 0};
}

}  // namespace layers
}  // namespace lockstep
