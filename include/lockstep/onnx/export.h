// ONNX export of a model's inference graph (keras2onnx / tf2onnx's job, without Python):
//
//   ls::onnx::export_model(model, "m.onnx");          // opset 17, batch dimension symbolic
//   // python: onnxruntime.InferenceSession("m.onnx").run(None, {"input_layer": x})
//
// What the file holds. The graph the model runs in predict(): Dropout and the random
// augmentation layers (RandomFlip, RandomRotation, RandomZoom, RandomTranslation,
// RandomContrast, RandomBrightness) are the identity at inference and vanish; RandomCrop,
// CenterCrop and Resizing export their inference behaviour (centre crop, smart resize). A
// BatchNormalization whose input is the only use of a Dense, Conv2D, DepthwiseConv2D or
// SeparableConv2D output with a linear activation is folded into that layer's kernel and bias
// (w' = w * gamma / sqrt(var + eps), b' = (b - mean) * gamma / sqrt(var + eps) + beta); any
// other BatchNormalization becomes an ONNX BatchNormalization in inference mode (rank 2 and 4)
// or a per-channel Mul and Add. Weights are float32 initializers named after the layers.
//
// Layout. Lockstep is NHWC (Keras channels_last) and ONNX's Conv and pooling are NCHW. The
// graph's inputs and outputs keep Lockstep's NHWC shapes (so the same arrays feed both); a
// Transpose to NCHW is inserted where a tensor first meets a Conv/pooling/Resize/
// BatchNormalization, the tensor then stays NCHW through elementwise layers, Add/Multiply and
// Concatenate (the axis is remapped), and one Transpose back to NHWC comes only where a layer
// needs channels_last order (Flatten, Reshape, Dense on rank > 2, Softmax, LayerNormalization,
// Normalization) or at a graph output. The reference CNN gets two Transposes: one after the
// input and one before Flatten.
//
// Layers: InputLayer, Dense, Conv2D (strides, dilation, groups, padding valid/same),
// DepthwiseConv2D, SeparableConv2D, MaxPooling2D, AveragePooling2D (Keras's "same" padding
// excludes the padded cells, as ONNX's count_include_pad=0), GlobalAverage/MaxPooling2D
// (keepdims too), Flatten, Reshape, Dropout, SpatialDropout2D, Activation and ReLU (linear,
// relu, relu6, sigmoid, tanh, softmax, log_softmax, gelu (exact, via Erf), swish/silu,
// leaky_relu (0.2), elu, softplus, exponential), LeakyReLU, ELU, PReLU, Rescaling, Normalization
// (fixed or adapted statistics), BatchNormalization, LayerNormalization, GroupNormalization
// (rank 2 or 4, via InstanceNormalization), Add, Multiply, Concatenate, the augmentation layers
// above, CenterCrop, RandomCrop and Resizing (bilinear, nearest). Any other layer (a user's
// registered layer, Resizing with "area") is an error naming the layer and its class.
//
// Nested models (a Sequential or Functional model used as a layer, Network::as_layer) are
// inlined, recursively: their layers become nodes and initializers named
// "<nested model>/<layer>/..." ("<outer>/<inner>/<layer>/..." deeper down), with the same
// BatchNormalization folding inside each nested model (not across its boundary) and the same
// layout rules (a tensor crosses the boundary in whatever layout it is in, no Transpose
// there). A nested model called twice is converted twice, the second call's nodes named
// "<model>_1/...", but its weights are stored once: the second call uses the first call's
// initializers (the same for a layer called twice).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/nn/network.h"

namespace lockstep::onnx {

/// What export_model writes (`lockstep export-onnx`'s flags).
struct ExportOptions {
  int64_t opset = 17;           ///< the default ONNX domain's opset, 17..21
  int64_t batch_size = -1;      ///< -1: a symbolic batch dimension named "batch"; > 0: fixed
  bool fold_batch_norm = true;  ///< fold BatchNormalization into the layer before it (above)
  std::string producer_name = "lockstep";  ///< the model proto's producer_name
  std::string doc_string;                  ///< stored in the model proto
};

/// What export wrote (tests and the CLI print it).
struct ExportReport {
  int64_t nodes = 0;                 ///< ONNX nodes in the graph
  int64_t initializers = 0;          ///< weight tensors stored
  int64_t parameters = 0;            ///< float values stored as initializers
  int64_t transposes = 0;            ///< layout Transposes inserted (see above)
  std::vector<std::string> folded;   ///< "batch_normalization into conv2d", ...
  std::vector<std::string> removed;  ///< layers that vanish at inference
  ///@{
  /// The graph's input and output names, in the model's order.
  std::vector<std::string> input_names, output_names;
  ///@}
};

/// Serialises the model's inference graph (ModelProto bytes). Throws lockstep::Error naming
/// the layer and its class when a layer cannot be expressed, or the option that is wrong.
std::string export_model_to_bytes(const Network& model, const ExportOptions& options = {},
                                  ExportReport* report = nullptr);
/// Writes export_model_to_bytes(model) to `path` atomically (temporary file, then rename);
/// errors name the file.
ExportReport export_model(const Network& model, const std::string& path,
                          const ExportOptions& options = {});

/// The `lockstep export-onnx` command: args = {"m.keras", "m.onnx", [--opset N]
/// [--batch-size N] [--no-fold-batch-norm]}; --help prints the usage. Returns the exit status
/// (0 ok, 2 usage error); other errors throw lockstep::Error naming the file.
int export_command(const std::vector<std::string>& args);

}  // namespace lockstep::onnx
