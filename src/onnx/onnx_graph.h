// The pieces the ONNX exporter's layer converters share: a builder over an ONNX GraphProto
// (unique names, nodes, float/int64 initializers, cached layout Transposes), the tensor
// record they pass along (NHWC shape + the order its data is in) and the converter table.
#pragma once
#include <onnx/onnx_pb.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/nn/network.h"
#include "lockstep/onnx/export.h"

namespace lockstep::onnx {

namespace pb = ::onnx;

// Where a rank-4 tensor's channels are: Lockstep's NHWC, or ONNX Conv's NCHW.
enum class Layout { kChannelsLast, kChannelsFirst };

// A tensor of the exported graph: its ONNX name, its Keras shape (NHWC, -1 for the batch) and
// the order its data is in (only rank-4 tensors are ever channels-first).
struct OnnxValue {
  std::string name;
  Shape shape;
  Layout layout = Layout::kChannelsLast;
  bool channels_first() const { return layout == Layout::kChannelsFirst; }
};

// ONNX attribute values, set by name on a node.
void set_attr(pb::NodeProto& node, const std::string& name, int64_t value);
void set_attr(pb::NodeProto& node, const std::string& name, float value);
void set_attr(pb::NodeProto& node, const std::string& name, const std::string& value);
void set_attr(pb::NodeProto& node, const std::string& name, const std::vector<int64_t>& value);

class GraphBuilder {
 public:
  GraphBuilder(pb::GraphProto& graph, ExportReport& report) : graph_(graph), report_(report) {}

  // A tensor/node name not used before: base, base_1, base_2, ...
  std::string fresh(const std::string& base);
  // Adds a node with fresh output names derived from `base`; returns the node.
  pb::NodeProto& node(const std::string& op, const std::vector<std::string>& inputs,
                      const std::string& base, int outputs = 1);
  // Adds a one-output node and returns the output's name.
  std::string add(const std::string& op, const std::vector<std::string>& inputs,
                  const std::string& base) {
    return node(op, inputs, base).output(0);
  }
  // Initializers (float32 / int64), named from `base`; returns the name.
  std::string constant(const std::string& base, const std::vector<float>& values,
                       const std::vector<int64_t>& dims);
  std::string constant_i64(const std::string& base, const std::vector<int64_t>& values);

  // The value in the wanted layout: itself, or a Transpose of it (one per value and layout).
  OnnxValue to_layout(const OnnxValue& value, Layout want);
  // A graph input/output declaration: float32 (or `elem_type`) with the batch symbolic or fixed.
  void declare(pb::ValueInfoProto& info, const std::string& name, const Shape& shape,
               int32_t elem_type, int64_t batch_size) const;

  pb::GraphProto& graph() { return graph_; }
  ExportReport& report() { return report_; }
  // While on, constant() returns an existing float initializer with the same dims and values
  // instead of adding one (a layer or nested model called again: its weights stored once).
  void set_share_constants(bool on) { share_constants_ = on; }

 private:
  pb::GraphProto& graph_;
  ExportReport& report_;
  std::set<std::string> names_;
  std::map<std::pair<std::string, int>, OnnxValue> transposed_;
  bool share_constants_ = false;
  std::multimap<size_t, int> float_constants_;  // hash of dims and values -> initializer index
};

// One layer call being converted.
struct ConvertCall {
  GraphBuilder& b;
  const LayerCall& call;
  const json config;  // the layer's Keras config
  std::vector<OnnxValue> inputs;
  const Layer* fold_batch_norm = nullptr;  // a BatchNormalization to fold into the kernel
  // The layer's name in the graph: inside a nested model "<model>/<layer>" (recursively).
  std::string scoped_name;
  const Layer& layer() const { return *call.layer; }
  const std::string& name() const { return scoped_name; }
  const Shape& output_shape(int i = 0) const { return call.outputs.at(size_t(i)).shape; }
  // A value carrying output i's shape.
  OnnxValue output(const std::string& onnx_name, Layout layout, int i = 0) const {
    return OnnxValue{onnx_name, output_shape(i), layout};
  }
};

using Converter = std::function<std::vector<OnnxValue>(ConvertCall&)>;
using ConverterTable = std::map<std::string, Converter>;
// Every Keras class the exporter knows, by class name (converters_*.cpp add theirs).
const ConverterTable& converters();
void add_kernel_converters(ConverterTable& table);         // Dense, Conv2D, ... (weights)
void add_structure_converters(ConverterTable& table);      // pooling, reshaping, merging
void add_elementwise_converters(ConverterTable& table);    // activations, normalisation
void add_preprocessing_converters(ConverterTable& table);  // crops, resizing, augmentation
void add_recurrent_converters(ConverterTable& table);      // LSTM, GRU
void add_sequence_converters(ConverterTable& table);       // Embedding (Gather), Masking
void add_1d_converters(ConverterTable& table);             // Conv1D, the 1D pools, Permute, ...
void add_einsum_converters(ConverterTable& table);         // EinsumDense, RMSNormalization, Softmax
void add_attention_converters(ConverterTable& table);      // MultiHeadAttention, Attention
// Classes whose kernel and bias can absorb a following BatchNormalization.
bool can_fold_batch_norm_into(const std::string& class_name);

// The ONNX operator op `id` declares as its lowering (OpDef::onnx.op: conv2d's "Conv"), which the
// converter of the layer that builds the op writes; an error when the op declares none.
const std::string& declared_onnx_op(OpId id);

// ---- helpers for converters ----
// The layer's weight named `name` ("<layer>/<name>"), or nullptr when it has none.
const Tensor* find_weight(const Layer& layer, const std::string& name);
const Tensor& weight(const Layer& layer, const std::string& name);
// BatchNormalization's inference form y = x * scale + shift, per channel.
struct ChannelAffine {
  std::vector<float> scale, shift;
};
ChannelAffine batch_norm_affine(const Layer& batch_norm);
// The activation string of a Dense/Conv/Activation config applied to `value` (softmax-like
// activations in channels-last order).
OnnxValue apply_activation(GraphBuilder& b, const OnnxValue& value, const std::string& activation,
                           const std::string& layer_name);
// "same"/"valid" padding as ONNX pads [top, left, bottom, right] (TensorFlow's split: the
// extra cell goes after).
std::vector<int64_t> spatial_pads(const Shape& input_nhwc, const std::vector<int64_t>& kernel,
                                  const std::vector<int64_t>& strides,
                                  const std::vector<int64_t>& dilations,
                                  const std::string& padding);
// The axis of a channels-last axis in the value's layout.
int64_t layout_axis(const OnnxValue& value, int64_t nhwc_axis);
// Throws "<Class> '<name>': <message>" (for options the exporter cannot express).
[[noreturn]] void unsupported(const ConvertCall& c, const std::string& message);

}  // namespace lockstep::onnx
