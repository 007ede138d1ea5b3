// export_model: walks the network's layer calls in topological order, converts each through
// the converter table (BatchNormalization folded where it can be; nested models inlined,
// recursively), and wraps the graph in an ONNX ModelProto (opset 17..21) written atomically.
#include "lockstep/onnx/export.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "lockstep/core/file_io.h"
#include "onnx/onnx_graph.h"

namespace lockstep::onnx {

const ConverterTable& converters() {
  static const ConverterTable table = [] {
    ConverterTable t;
    add_kernel_converters(t);
    add_structure_converters(t);
    add_elementwise_converters(t);
    add_preprocessing_converters(t);
    add_recurrent_converters(t);
    add_sequence_converters(t);
    add_attention_converters(t);
    add_1d_converters(t);
    add_einsum_converters(t);
    return t;
  }();
  return table;
}

namespace {

using TensorKey = std::pair<const LayerCall*, int>;

// Which BatchNormalization calls fold into the call that produces their input: the producer
// has a kernel and a linear activation, and the BatchNormalization is the only use of that
// output (not a model output either).
struct FoldPlan {
  std::map<const LayerCall*, const Layer*> into;             // producer -> BatchNormalization
  std::map<const LayerCall*, const LayerCall*> folded_from;  // BatchNormalization -> producer
};

FoldPlan plan_folding(const Network& net, bool enabled) {
  FoldPlan plan;
  if (!enabled) return plan;
  std::map<TensorKey, int> uses;
  for (const auto& c : net.calls())
    for (const auto& t : c->inputs) ++uses[{t.call.get(), t.index}];
  for (const auto& t : net.outputs()) ++uses[{t.call.get(), t.index}];
  for (const auto& c : net.calls()) {
    if (c->layer->class_name() != "BatchNormalization" || c->inputs.size() != 1) continue;
    const KTensor& in = c->inputs[0];
    const LayerCall* producer = in.call.get();
    if (!producer->layer || !can_fold_batch_norm_into(producer->layer->class_name())) continue;
    const std::string act = producer->layer->config().value("activation", "linear");
    if ((act != "linear" && !act.empty()) || uses[{producer, in.index}] != 1) continue;
    if (plan.into.count(producer)) continue;
    plan.into[producer] = c->layer.get();
    plan.folded_from[c.get()] = producer;
  }
  return plan;
}

std::string known_classes() {
  std::string s;
  for (const auto& [name, fn] : converters()) s += (s.empty() ? "" : ", ") + name;
  return s;
}

int32_t onnx_elem_type(DType t) {
  switch (t) {
    case DType::f32:
      return pb::TensorProto::FLOAT;
    case DType::u8:
      return pb::TensorProto::UINT8;
    case DType::i32:
      return pb::TensorProto::INT32;
    case DType::i64:
      return pb::TensorProto::INT64;
    default:
      LS_FAIL("ONNX export: inputs of dtype ", dtype_name(t), " are not supported");
  }
}

// Declares the graph inputs (NHWC as the model's) and casts non-float inputs to float32, as
// Lockstep's layers do.
void add_inputs(GraphBuilder& b, const Network& net, const ExportOptions& o,
                std::map<const LayerCall*, std::vector<OnnxValue>>& values) {
  for (const auto& t : net.inputs()) {
    const std::string name = t.call->layer->name();
    b.declare(*b.graph().add_input(), name, t.shape(), onnx_elem_type(t.dtype()), o.batch_size);
    b.report().input_names.push_back(name);
    std::string v = name;
    if (t.dtype() != DType::f32) {
      pb::NodeProto& cast = b.node("Cast", {name}, name + "/float");
      set_attr(cast, "to", int64_t(pb::TensorProto::FLOAT));
      v = cast.output(0);
    }
    values[t.call.get()] = {OnnxValue{v, t.shape(), Layout::kChannelsLast}};
  }
}

std::vector<OnnxValue> convert_call(GraphBuilder& b, const LayerCall& call,
                                    std::vector<OnnxValue> inputs, const Layer* fold_bn,
                                    const std::string& scoped_name) {
  const Layer& layer = *call.layer;
  auto it = converters().find(layer.class_name());
  LS_CHECK(it != converters().end(), layer.class_name(), " '", scoped_name,
           "': cannot be exported to ONNX (no conversion for class ", layer.class_name(),
           "); exportable classes: ", known_classes(), ", InputLayer, Sequential, Functional");
  ConvertCall c{b, call, layer.config(), std::move(inputs), fold_bn, scoped_name};
  std::vector<OnnxValue> out;
  try {
    out = it->second(c);
  } catch (const Error& e) {
    std::string msg = e.what();
    if (msg.find(scoped_name) == std::string::npos)
      LS_FAIL(layer.class_name(), " '", scoped_name, "': ONNX export: ", msg);
    throw;
  }
  LS_CHECK(out.size() == call.outputs.size(), layer.class_name(), " '", scoped_name,
           "': ONNX export produced ", out.size(), " outputs, the layer has ", call.outputs.size());
  return out;
}

using Values = std::map<const LayerCall*, std::vector<OnnxValue>>;

// Converts a network's layer calls, given the values of its inputs in `values`. A nested
// model (Network::as_layer) is inlined: its calls are converted in its own scope, names
// prefixed "<model>/", with its own BatchNormalization folding; its outputs keep the layout
// they have (no Transposes at the boundary). A layer converted before (a shared layer, or a
// nested model called again) reuses the initializers it wrote the first time.
class Inliner {
 public:
  Inliner(GraphBuilder& b, const ExportOptions& o) : b_(b), o_(o) {}

  void convert(const Network& net, const std::string& prefix, Values& values) {
    const FoldPlan plan = plan_folding(net, o_.fold_batch_norm);
    for (const auto& c : net.calls()) {
      const std::string scoped = prefix + c->layer->name();
      if (c->inputs.empty()) {
        LS_CHECK(values.count(c.get()), c->layer->class_name(), " '", scoped,
                 "': an input layer that is not among the model's inputs");
        continue;
      }
      if (auto f = plan.folded_from.find(c.get()); f != plan.folded_from.end()) {
        values[c.get()] = values.at(f->second);
        b_.report().folded.push_back(scoped + " into " + prefix + f->second->layer->name());
        continue;
      }
      std::vector<OnnxValue> ins;
      for (const auto& t : c->inputs) ins.push_back(values.at(t.call.get()).at(size_t(t.index)));
      if (const Network* nested = nested_network(*c->layer)) {
        // The second call of a nested model is scoped "<model>_1/...", the third "_2", ...
        const int n = nested_calls_[c->layer.get()]++;
        values[c.get()] = inline_network(*c, *nested, scoped + (n ? "_" + std::to_string(n) : ""),
                                         std::move(ins));
        continue;
      }
      const bool again = !converted_.insert(c->layer.get()).second;
      b_.set_share_constants(again);
      auto fold = plan.into.find(c.get());
      values[c.get()] = convert_call(b_, *c, std::move(ins),
                                     fold == plan.into.end() ? nullptr : fold->second, scoped);
      b_.set_share_constants(false);
    }
  }

 private:
  std::vector<OnnxValue> inline_network(const LayerCall& call, const Network& net,
                                        const std::string& scoped, std::vector<OnnxValue> ins) {
    const std::string what = call.layer->class_name() + " '" + scoped + "'";
    LS_CHECK(ins.size() == net.inputs().size(), what, ": ONNX export: called on ", ins.size(),
             " input(s), the nested model takes ", net.inputs().size());
    Values inner;
    for (size_t i = 0; i < ins.size(); ++i) inner[net.inputs()[i].call.get()] = {ins[i]};
    try {
      convert(net, scoped + "/", inner);
    } catch (const Error& e) {
      std::string msg = e.what();
      if (msg.find(scoped) == std::string::npos) LS_FAIL(what, ": ONNX export: ", msg);
      throw;
    }
    LS_CHECK(net.outputs().size() == call.outputs.size(), what,
             ": ONNX export: the nested model has ", net.outputs().size(), " outputs, the call ",
             call.outputs.size());
    std::vector<OnnxValue> out;
    for (const auto& t : net.outputs()) {
      OnnxValue v = inner.at(t.call.get()).at(size_t(t.index));
      v.shape = call.outputs[out.size()].shape;  // the outer model's view of its shape
      out.push_back(v);
    }
    return out;
  }

  GraphBuilder& b_;
  const ExportOptions& o_;
  std::set<const Layer*> converted_;
  std::map<const Layer*, int> nested_calls_;
};

// Graph outputs in NHWC, named after their layers (an Identity gives each its reserved name).
void add_outputs(GraphBuilder& b, const Network& net, const ExportOptions& o,
                 const std::vector<std::string>& names,
                 std::map<const LayerCall*, std::vector<OnnxValue>>& values) {
  for (size_t i = 0; i < net.outputs().size(); ++i) {
    const KTensor& t = net.outputs()[i];
    OnnxValue v = b.to_layout(values.at(t.call.get()).at(size_t(t.index)), Layout::kChannelsLast);
    pb::NodeProto& n = *b.graph().add_node();
    n.set_op_type("Identity");
    n.set_name(b.fresh(names[i] + "/Identity"));
    n.add_input(v.name);
    n.add_output(names[i]);
    ++b.report().nodes;
    b.declare(*b.graph().add_output(), names[i], t.shape(), pb::TensorProto::FLOAT, o.batch_size);
    b.report().output_names.push_back(names[i]);
  }
}

void build_graph(GraphBuilder& b, const Network& net, const ExportOptions& o) {
  // Reserve the input and output names first so no internal tensor takes them.
  for (const auto& t : net.inputs()) b.fresh(t.call->layer->name());
  std::vector<std::string> output_names;
  for (const auto& t : net.outputs()) output_names.push_back(b.fresh(t.call->layer->name()));
  Values values;
  add_inputs(b, net, o, values);
  Inliner(b, o).convert(net, "", values);
  add_outputs(b, net, o, output_names, values);
}

int64_t ir_version_for(int64_t opset) {
  if (opset <= 18) return 8;
  if (opset <= 20) return 9;
  return 10;
}

}  // namespace

std::string export_model_to_bytes(const Network& model, const ExportOptions& options,
                                  ExportReport* report) {
  LS_CHECK(options.opset >= 17 && options.opset <= 21, "ONNX export: opset must be in 17..21, got ",
           options.opset);
  LS_CHECK(options.batch_size == -1 || options.batch_size > 0,
           "ONNX export: batch_size must be -1 (symbolic) or positive, got ", options.batch_size);
  LS_CHECK(!model.outputs().empty(), "ONNX export: model '", model.name(), "' has no outputs");
  pb::ModelProto proto;
  proto.set_ir_version(ir_version_for(options.opset));
  proto.set_producer_name(options.producer_name);
  proto.set_producer_version(LOCKSTEP_VERSION);
  if (!options.doc_string.empty()) proto.set_doc_string(options.doc_string);
  auto* opset = proto.add_opset_import();
  opset->set_domain("");
  opset->set_version(options.opset);
  pb::GraphProto& graph = *proto.mutable_graph();
  graph.set_name(model.name().empty() ? "lockstep_model" : model.name());
  ExportReport local;
  GraphBuilder b(graph, local);
  build_graph(b, model, options);
  std::string bytes;
  LS_CHECK(proto.SerializeToString(&bytes), "ONNX export: cannot serialise model '", model.name(),
           "' (a ModelProto over 2 GiB?)");
  if (report) *report = std::move(local);
  return bytes;
}

ExportReport export_model(const Network& model, const std::string& path,
                          const ExportOptions& options) {
  ExportReport report;
  const std::string bytes = export_model_to_bytes(model, options, &report);
  namespace fs = std::filesystem;
  const fs::path target(path);
  LS_CHECK(!path.empty(), "ONNX export: the output path is empty");
  LS_CHECK(!fs::is_directory(target), "ONNX export: '", path, "' is a directory; name a file");
  write_file_atomic(path, bytes, "ONNX export");
  return report;
}

}  // namespace lockstep::onnx
