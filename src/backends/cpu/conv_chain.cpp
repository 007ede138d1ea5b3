// The cpu backend's conv-pair fusion (conv_chain.h).
#include "backends/cpu/conv_chain.h"

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <optional>

#include "backends/cpu/dnnl_common.h"
#include "graph/internal/passes.h"
#include "lockstep/core/env.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep::cpu {

namespace {

int64_t min_intermediate_bytes() {
  auto e = env::text(env::dw_fusion_bytes);
  return e ? std::strtoll(e->c_str(), nullptr, 10) : int64_t(16) << 20;
}

// Whether oneDNN's depthwise post-op chain runs conv n's activation (its eltwise post-ops).
bool takes_activation(const Node& n) {
  switch (attr_activation(n)) {
    case FusedActivation::linear:
    case FusedActivation::relu:
    case FusedActivation::relu6:
      return true;
    case FusedActivation::swish:
      return conv_swish_by_onednn();
    case FusedActivation::sigmoid:
    case FusedActivation::gelu:
      return false;
  }
  return false;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::atomic<bool> g_force_no_impl{false};

// The fused node's attributes when conv2d pw (x -> 1x1) and conv2d dw (depthwise, reading pw's
// output) are a pair oneDNN's depthwise post-op computes: 3x3, one stride and no dilation, the
// left and top pads equal and the output ceil(input / stride) (the post-op's rule).
std::optional<Attrs> pair_attrs(const Graph& g, const Node& pw, const Node& dw) {
  if (pw.inputs.size() != 3 || dw.inputs.size() != 3 || !takes_activation(pw) ||
      !takes_activation(dw))
    return std::nullopt;
  for (const Node* n : {&pw, &dw})
    for (Value v : n->inputs)
      if (g.type(v).dtype != DType::f32) return std::nullopt;
  const Shape& w = g.type(pw.inputs[1]).shape;
  if (w.rank() != 4 || w[0] != 1 || w[1] != 1 || attr_i(pw, "groups") != 1 ||
      attr_i(dw, "groups") != w[3])
    return std::nullopt;
  const ops::ConvGeom a = ops::conv2d_geometry(g.type(pw.inputs[0]).shape, w, pw);
  const ops::ConvGeom d =
      ops::conv2d_geometry(g.type(dw.inputs[0]).shape, g.type(dw.inputs[1]).shape, dw);
  const bool one_by_one = a.SH == 1 && a.SW == 1 && a.PT + a.PB + a.PL + a.PR == 0;
  const bool depthwise = d.KH == 3 && d.Cg() == 1 && d.Og() == 1;
  if (!one_by_one || !depthwise || a.N < 0 || a.H < 0 || a.W < 0 || !dw_post_op_geometry(d))
    return std::nullopt;
  return Attrs{{"activation", fused_activation_name(attr_activation(pw))},
               {"dw_activation", fused_activation_name(attr_activation(dw))},
               {"dw_strides", std::vector<int64_t>{d.SH, d.SW}},
               {"dw_pads", std::vector<int64_t>{d.PT, d.PB, d.PL, d.PR}}};
}

}  // namespace

bool dw_post_op_geometry(const ops::ConvGeom& d) {
  return d.KH == d.KW && d.SH == d.SW && d.DH == 1 && d.DW == 1 && d.PT == d.PL && d.H > 0 &&
         d.W > 0 && d.OH == ceil_div(d.H, d.SH) && d.OW == ceil_div(d.W, d.SW);
}

std::string fused_pair_impl(const Shape& x, const Shape& w1, const Shape& wd, const Attrs& attrs) {
  if (g_force_no_impl.load()) return {};
  if (env::text_or_empty(env::dw_fusion_impl) == "none") return {};
  Node probe;
  probe.op = op::conv2d_pointwise_depthwise;
  probe.attrs = attrs;
  return pointwise_depthwise_impl(ops::pointwise_depthwise_geometry(x, w1, wd, probe));
}

bool fuses_with(const std::string& impl) {
  return !impl.empty() && impl.find("ref") == std::string::npos;
}

void force_no_fused_pair_impl(bool none) { g_force_no_impl.store(none); }

bool onednn_offers_winograd() {
  try {
    const memory::desc x({2, 16, 10, 10}, dt::f32, tag::any), w({16, 16, 3, 3}, dt::f32, tag::any),
        y({2, 16, 10, 10}, dt::f32, tag::any);
    dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_training,
                                      dnnl::algorithm::convolution_winograd, x, w, y, {1, 1},
                                      {1, 1}, {1, 1});
    const dnnl::convolution_forward::primitive_desc pd(d, engine());
    return std::string(pd.impl_info_str()).find("wino") != std::string::npos;
  } catch (const dnnl::error&) {
    return false;
  }
}

std::string onednn_condition() {
  using isa = dnnl::cpu_isa;
  const isa i = dnnl::get_effective_cpu_isa();
  const char* name = i == isa::avx512_core_amx    ? "avx512_core_amx"
                     : i == isa::avx512_core_bf16 ? "avx512_core_bf16"
                     : i == isa::avx512_core_vnni ? "avx512_core_vnni"
                     : i == isa::avx512_core      ? "avx512_core"
                     : i == isa::avx2_vnni        ? "avx2_vnni"
                     : i == isa::avx2             ? "avx2"
                                                  : "older than avx2";
  std::string model = "unknown CPU";
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  const dnnl_version_t* v = dnnl_version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + ", ISA " + name + ", " + model;
}

void fuse_pointwise_depthwise(Graph& g, std::vector<Value>& outputs,
                              std::vector<std::string>& report) {
  const int64_t min_bytes = min_intermediate_bytes();
  if (min_bytes < 0) return;
  const auto sched = schedule_nodes(g, outputs);
  auto cons = consumers_of(g, sched, outputs);
  for (int i : sched) {
    if (g.node(i).op != op::conv2d) continue;
    int reader = i;
    bool single = true;
    const Value src = producer_through_views(g, cons, i, reader, single);
    const Node& pw = g.node(src.node);
    const Node& dw = g.node(i);
    if (!single || pw.op != op::conv2d || src.index != 0 ||
        cons[{src.node, 0}] != std::vector<int>{reader})
      continue;
    const std::optional<Attrs> attrs = pair_attrs(g, pw, dw);
    if (!attrs) continue;
    const TensorType& mid = pw.outputs[0];
    if (int64_t(mid.shape.numel()) * 4 < min_bytes) continue;
    const std::vector<Value> in = {pw.inputs[0], pw.inputs[1], pw.inputs[2], dw.inputs[1],
                                   dw.inputs[2]};
    const std::string impl =
        fused_pair_impl(g.type(in[0]).shape, g.type(in[1]).shape, g.type(in[3]).shape, *attrs);
    if (!fuses_with(impl)) {
      report.push_back("conv2d '" + pw.name + "' + depthwise conv2d '" + dw.name +
                       "' stay apart: oneDNN offers no non-reference kernel for the pair here (" +
                       (impl.empty() ? std::string("none") : impl) + ")");
      continue;
    }
    report.push_back("fused conv2d '" + pw.name + "' + depthwise conv2d '" + dw.name +
                     "' (oneDNN depthwise post-op)");
    Node& n = g.node(i);
    n.op = op::conv2d_pointwise_depthwise;
    n.inputs = in;
    n.attrs = *attrs;
  }
}

}  // namespace lockstep::cpu
