// Hooks for layers whose Keras form is more than "args = the inputs, weights under the layer's
// own vars": a layer class registers how its Keras call node maps onto Lockstep's input list
// (keyword tensors such as MultiHeadAttention's key= and attention_mask=, and call options such
// as use_causal_mask), and where its weights live in the .keras weights file (sublayers such as
// query_dense/vars). src/nn/config.cpp consults both when it reads or writes a model.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "lockstep/nn/config.h"

namespace lockstep {

/// How one layer class's Keras call node maps onto Lockstep's inputs.
struct KerasCallConvention {
  /// Reading a config: the node's "args" and "kwargs" -> the tensor references ([layer, node,
  /// index]) in the layer's input order; may set call options on the layer (an error when a
  /// second call's options differ from the first's).
  std::function<std::vector<json>(Layer& layer, const json& args, const json& kwargs)> read;
  /// Writing a config: the call's inputs as Keras tensors -> {"args": [...], "kwargs": {...}}.
  std::function<json(const Layer& layer, const std::vector<json>& inputs)> write;
};
/// Registers `c` for layers of Keras class `class_name`.
void register_call_convention(const std::string& class_name, KerasCallConvention c);
/// The convention of `class_name`, or nullptr (args are the inputs, no kwargs).
const KerasCallConvention* call_convention(const std::string& class_name);

/// The weight slots of a layer stored at `path` ("layers/multi_head_attention"): its own
/// (usually empty) vars first, then its sublayers' ("<path>/query_dense" ...).
using WeightSlotsFn =
    std::function<std::vector<KerasWeightSlot>(const LayerPtr& layer, const std::string& path)>;
/// Registers `f` for layers of Keras class `class_name`.
void register_weight_slots(const std::string& class_name, WeightSlotsFn f);
/// The slots function of `class_name`, or nullptr (the layer's weights under its own vars).
const WeightSlotsFn* weight_slots_of(const std::string& class_name);

/// The tensors a node's args refer to ([layer, node, index] histories, nested lists): config.cpp's
/// reading of a plain call, for conventions that read their args the same way.
void collect_keras_args(const json& args, std::vector<json>& out);

}  // namespace lockstep
