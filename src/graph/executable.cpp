// Compiles a graph into a static program: schedule, fuse, plan one arena, build kernels once.
#include "lockstep/graph/executable.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <set>

#include "lockstep/core/allocator.h"
#include "lockstep/core/device_allocator.h"

namespace lockstep {

struct Executable::Step {
  int node = -1;
  std::unique_ptr<Kernel> kernel;
  std::vector<Tensor> in, out;
  KernelArgs args;
  double seconds = 0;  // accumulated when LOCKSTEP_PROFILE is set
};

// LOCKSTEP_PROFILE=1: time every kernel and print a per-op table when the Executable dies.
static bool profiling_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("LOCKSTEP_PROFILE");
    return e && *e && std::string(e) != "0";
  }();
  return on;
}

// LOCKSTEP_FUSE=0: skip the fusion pass in every executable (A/B profiling of the fusions).
static bool fusion_disabled_env() {
  static const bool off = [] {
    const char* e = std::getenv("LOCKSTEP_FUSE");
    return e && std::string(e) == "0";
  }();
  return off;
}

// LOCKSTEP_LAYOUTS=0: keep every tensor NHWC (A/B profiling of plan_layouts).
static bool layouts_disabled_env() {
  static const bool off = [] {
    const char* e = std::getenv("LOCKSTEP_LAYOUTS");
    return e && std::string(e) == "0";
  }();
  return off;
}

static bool is_source(const std::string& op) { return op == "input" || op == "variable"; }

std::vector<int> schedule_nodes(const Graph& g, const std::vector<Value>& outputs) {
  std::vector<char> live(g.size(), 0);
  for (Value v : outputs) live[v.node] = 1;
  for (int i = 0; i < g.size(); ++i)
    if (OpRegistry::get().op(g.node(i).op).side_effects) live[i] = 1;
  for (int i = g.size() - 1; i >= 0; --i) {
    if (!live[i]) continue;
    for (Value v : g.node(i).inputs) live[v.node] = 1;
  }
  std::vector<int> pure, effects;
  for (int i = 0; i < g.size(); ++i) {
    if (!live[i]) continue;
    (OpRegistry::get().op(g.node(i).op).side_effects ? effects : pure).push_back(i);
  }
  // Index order is topological as built; a rewrite (fusion) may give a node an input made
  // later (a mixed-precision bias cast after its conv): such inputs move up to just before
  // their first consumer.
  std::vector<char> emitted(g.size(), 0);
  std::vector<int> order;
  std::function<void(int)> visit = [&](int i) {
    if (emitted[i]) return;
    emitted[i] = 1;
    for (Value v : g.node(i).inputs) visit(v.node);
    order.push_back(i);
  };
  for (int i : pure) visit(i);
  for (int i : effects) visit(i);
  pure = std::move(order);
  // Nodes marked "schedule_early" (a gradient bucket's all-reduce start) move up to right after
  // their last producer, so their work overlaps whatever is scheduled after.
  for (size_t k = 0; k < pure.size(); ++k) {
    const Node& nd = g.node(pure[k]);
    if (!nd.attrs.b("schedule_early")) continue;
    size_t target = 0;
    for (Value v : nd.inputs)
      for (size_t j = 0; j < k; ++j)
        if (pure[j] == v.node) target = std::max(target, j + 1);
    if (target < k) {
      int id = pure[k];
      pure.erase(pure.begin() + long(k));
      pure.insert(pure.begin() + long(target), id);
    }
  }
  return pure;
}

static void fuse_batch_norm(Graph& g, std::vector<Value>& outputs,
                            std::vector<std::string>& report);
static void fuse_updates(Graph& g, std::vector<Value>& outputs, std::vector<std::string>& report);
static void fold_batch_norm(Graph& g, std::vector<Value>& outputs,
                            std::vector<std::string>& report);
static void fuse_pool_relu_grad(Graph& g, std::vector<Value>& outputs,
                                std::vector<std::string>& report);

std::vector<std::string> fuse_graph(Graph& g, std::vector<Value>& outputs) {
  std::vector<std::string> report;
  auto sched = schedule_nodes(g, outputs);
  std::vector<int> uses(g.size(), 0);
  for (int i : sched)
    for (Value v : g.node(i).inputs) uses[v.node]++;
  for (Value v : outputs) uses[v.node]++;
  auto turn_into_identity = [&](Node& n, Value src) {
    n.op = "identity";
    n.inputs = {src};
    n.attrs = {};
  };
  for (int i : sched) {
    Node& conv = g.node(i);
    if (conv.op != "conv2d" || attr_b(conv, "fused_bias") || attr_s(conv, "activation") != "linear")
      continue;
    if (uses[i] != 1) continue;
    // Find the single consumer.
    int consumer = -1;
    for (int j : sched)
      for (Value v : g.node(j).inputs)
        if (v.node == i) consumer = j;
    if (consumer < 0 || g.node(consumer).op != "bias_add" || g.node(consumer).inputs[0].node != i)
      continue;
    Node& bias = g.node(consumer);
    conv.inputs.push_back(bias.inputs[1]);
    conv.attrs.set("fused_bias", true);
    turn_into_identity(bias, Value{i, 0});
    std::string what = "conv2d+bias";
    // Then an activation that consumes only the bias output.
    if (uses[consumer] == 1) {
      for (int j : sched) {
        Node& act = g.node(j);
        if (act.op == "relu" && act.inputs[0].node == consumer) {
          conv.attrs.set("activation", "relu");
          turn_into_identity(act, Value{consumer, 0});
          what += "+relu";
          break;
        }
      }
    }
    report.push_back("fused " + what + " '" + conv.name + "'");
  }
  fuse_batch_norm(g, outputs, report);
  fold_batch_norm(g, outputs, report);
  fuse_pool_relu_grad(g, outputs, report);
  fuse_updates(g, outputs, report);
  return report;
}

// Consumers of every value of the scheduled graph; a graph output counts as consumer -1.
static std::map<std::pair<int, int>, std::vector<int>> consumers_of(
    const Graph& g, const std::vector<int>& sched, const std::vector<Value>& outputs) {
  std::map<std::pair<int, int>, std::vector<int>> cons;
  for (int i : sched)
    for (Value v : g.node(i).inputs) cons[{v.node, v.index}].push_back(i);
  for (Value v : outputs) cons[{v.node, v.index}].push_back(-1);
  return cons;
}

// Whether `target` is among the nodes `from` (transitively) reads; a rewrite that would make
// `target` read one of them would close a cycle.
static bool reaches(const Graph& g, const std::vector<Value>& from, int target) {
  std::vector<char> seen(size_t(g.size()), 0);
  std::vector<int> stack;
  for (Value v : from) stack.push_back(v.node);
  while (!stack.empty()) {
    int n = stack.back();
    stack.pop_back();
    if (n == target) return true;
    if (seen[size_t(n)]) continue;
    seen[size_t(n)] = 1;
    for (Value v : g.node(n).inputs) stack.push_back(v.node);
  }
  return false;
}

// batch_norm_train -> relu and batch_norm_train -> add(·, z) -> relu become one
// batch_norm_train (activation relu, residual z): one pass writes relu(bn(x) + z); the same for
// batch_norm_infer (inference and evaluation programs, z its 6th input). In the
// backward, relu_grad(dy, y) -> batch_norm_train_grad becomes one batch_norm_train_grad that
// masks dy by y > 0 itself; when the masked gradient has other consumers (the residual
// branch), the first fused gradient node also writes it (emit_dy, output 3).
static void fuse_batch_norm(Graph& g, std::vector<Value>& outputs,
                            std::vector<std::string>& report) {
  auto to_identity = [&](Node& n, Value src) {
    n.op = "identity";
    n.inputs = {src};
    n.attrs = {};
  };
  auto sched = schedule_nodes(g, outputs);
  auto cons = consumers_of(g, sched, outputs);
  auto only_consumer = [&](int node) {
    const auto& c = cons[{node, 0}];
    return c.size() == 1 ? c[0] : -1;
  };
  for (int i : sched) {
    Node& bn = g.node(i);
    if ((bn.op != "batch_norm_train" && bn.op != "batch_norm_infer") ||
        attr_s(bn, "activation") != "linear" || attr_b(bn, "residual"))
      continue;
    const std::string kind = bn.op == "batch_norm_train" ? "batch_norm" : "batch_norm_infer";
    const int j = only_consumer(i);
    if (j < 0) continue;
    Node& next = g.node(j);
    const TensorType& t = bn.outputs[0];
    if (next.op == "relu" && next.outputs[0] == t) {
      bn.attrs.set("activation", "relu");
      to_identity(next, Value{i, 0});
      report.push_back("fused " + kind + "+relu '" + bn.name + "'");
      continue;
    }
    if (next.op != "add" || next.inputs.size() != 2 || next.outputs[0] != t) continue;
    const Value z = next.inputs[0] == Value{i, 0} ? next.inputs[1] : next.inputs[0];
    if (g.type(z) != t || z == Value{i, 0}) continue;
    const int k = only_consumer(j);
    if (k < 0 || g.node(k).op != "relu" || g.node(k).outputs[0] != t) continue;
    if (reaches(g, {z}, i)) continue;
    bn.inputs.push_back(z);
    bn.attrs.set("activation", "relu");
    bn.attrs.set("residual", true);
    to_identity(next, Value{i, 0});
    to_identity(g.node(k), Value{i, 0});
    report.push_back("fused " + kind + "+add+relu '" + bn.name + "'");
  }
  for (int i : sched) {
    if (g.node(i).op != "relu_grad") continue;
    const Value dy = g.node(i).inputs[0], y = g.node(i).inputs[1];
    const TensorType t = g.node(i).outputs[0];
    if (g.type(dy) != t || g.type(y) != t) continue;
    std::vector<int> fused, others;
    for (int k : cons[{i, 0}]) {
      if (k >= 0 && std::find(fused.begin(), fused.end(), k) != fused.end()) continue;
      Node* bg = k >= 0 ? &g.node(k) : nullptr;
      if (!bg || bg->op != "batch_norm_train_grad" || attr_s(*bg, "activation") != "linear" ||
          bg->inputs[0] != Value{i, 0} || g.type(bg->inputs[1]) != t ||
          std::count(bg->inputs.begin(), bg->inputs.end(), Value{i, 0}) != 1) {
        others.push_back(k);
        continue;
      }
      fused.push_back(k);
    }
    if (fused.empty()) continue;
    // The node that writes the masked gradient for the others must not read any of them.
    const int emit = fused[0];
    if (!others.empty()) {
      std::vector<Value> rest(g.node(emit).inputs.begin() + 1, g.node(emit).inputs.end());
      if (reaches(g, rest, i)) continue;
    }
    for (int k : fused) {
      Node& bg = g.node(k);
      std::vector<Value> in(bg.inputs.begin(), bg.inputs.begin() + 5);
      in[0] = dy;
      in.push_back(y);
      in.insert(in.end(), bg.inputs.begin() + 5, bg.inputs.end());  // dmean, dvar
      bg.inputs = std::move(in);
      bg.attrs.set("activation", "relu");
      report.push_back("fused relu_grad+batch_norm_train_grad '" + bg.name + "'");
    }
    if (!others.empty()) {
      Node& bg = g.node(emit);
      bg.attrs.set("emit_dy", true);
      bg.outputs.push_back(t);
      to_identity(g.node(i), Value{emit, 3});
    }
  }
}

// Inference: conv2d -> batch_norm_infer (maybe fused with relu, not with a residual) becomes
// conv2d(x, w * s, beta - mean * s [+ b * s]) with the batch norm's activation, s = gamma /
// sqrt(var + eps): one batch_norm_fold node computes the folded weights and bias from the live
// variables each run (a few thousand floats), and the pass over the activations is gone. In
// mixed precision the folded weights are rounded to bfloat16 once (w * s instead of w).
static void fold_batch_norm(Graph& g, std::vector<Value>& outputs,
                            std::vector<std::string>& report) {
  auto sched = schedule_nodes(g, outputs);
  auto cons = consumers_of(g, sched, outputs);
  for (int i : sched) {
    if (g.node(i).op != "batch_norm_infer" || attr_b(g.node(i), "residual")) continue;
    // Through the identities earlier fusions left (a bias_add fused into the conv), each the
    // only reader of the one before.
    Value src = g.node(i).inputs[0];
    int reader = i;
    bool single = true;
    while (g.node(src.node).op == "identity") {
      single = single && cons[{src.node, 0}] == std::vector<int>{reader};
      reader = src.node;
      src = g.node(src.node).inputs[0];
    }
    const int c = src.node;
    const Node& conv = g.node(c);
    if (!single || conv.op != "conv2d" || src.index != 0 ||
        attr_s(conv, "activation") != "linear" || cons[{c, 0}] != std::vector<int>{reader})
      continue;
    // Mixed precision: the conv reads bfloat16 weights (and bias) cast from float32 values;
    // the fold takes those float32 sources, and its weights are cast to bfloat16 for the conv
    // (its bias stays float32, which a bf16 conv takes).
    const bool mixed = conv.outputs[0].dtype == DType::bf16;
    auto f32_source = [&](Value v) {
      if (!mixed || g.type(v).dtype == DType::f32) return v;
      const Node& cast = g.node(v.node);
      return cast.op == "cast" && g.type(cast.inputs[0]).dtype == DType::f32 ? cast.inputs[0]
                                                                             : Value{};
    };
    std::vector<Value> in{f32_source(conv.inputs[1])};
    for (int k = 1; k < 5; ++k) in.push_back(g.node(i).inputs[size_t(k)]);
    if (conv.inputs.size() == 3) in.push_back(f32_source(conv.inputs[2]));
    bool f32 = conv.outputs[0].dtype == DType::f32 || mixed;
    for (Value v : in) f32 = f32 && v.valid() && g.type(v).dtype == DType::f32;
    const Shape& w = g.type(conv.inputs[1]).shape;
    if (!f32 || w[-1] != conv.outputs[0].shape[-1] || reaches(g, in, c)) continue;
    const std::string bn_name = g.node(i).name, activation = attr_s(g.node(i), "activation");
    auto fold = g.add_multi("batch_norm_fold", in, Attrs{{"epsilon", attr_f(g.node(i), "epsilon")}},
                            bn_name + "/fold");
    const Value weights =
        mixed ? g.add("cast", {fold[0]}, Attrs{{"dtype", std::string("bfloat16")}}) : fold[0];
    Node& cv = g.node(c);  // add_multi may have moved the nodes
    cv.inputs = {cv.inputs[0], weights, fold[1]};
    cv.attrs.set("fused_bias", true);
    cv.attrs.set("activation", activation);
    Node& bn = g.node(i);
    bn.op = "identity";
    bn.inputs = {Value{c, 0}};
    bn.attrs = {};
    report.push_back("folded batch_norm_infer '" + bn_name + "' into conv2d '" + cv.name + "'");
  }
}

// relu_grad(max_pool2d_grad(dy, x, y), x), where the pool read a relu's output x (conv + relu ->
// max_pool, the reference CNN's): one max_pool2d_grad that masks dx by x > 0 itself, saving a
// pass over the pool's input-sized gradient. x may reach the two through identities.
static void fuse_pool_relu_grad(Graph& g, std::vector<Value>& outputs,
                                std::vector<std::string>& report) {
  auto sched = schedule_nodes(g, outputs);
  auto cons = consumers_of(g, sched, outputs);
  auto through_identities = [&](Value v) {
    while (g.node(v.node).op == "identity") v = g.node(v.node).inputs[0];
    return v;
  };
  for (int i : sched) {
    if (g.node(i).op != "relu_grad") continue;
    const Value d = g.node(i).inputs[0], x = g.node(i).inputs[1];
    const Node& pg = g.node(d.node);
    if (pg.op != "max_pool2d_grad" || d.index != 0 || attr_s(pg, "activation") != "linear" ||
        cons[{d.node, 0}] != std::vector<int>{i} ||
        through_identities(pg.inputs[1]) != through_identities(x) ||
        g.type(x) != g.node(i).outputs[0])
      continue;
    Node& pool_grad = g.node(d.node);
    pool_grad.attrs.set("activation", "relu");
    Node& r = g.node(i);
    r.op = "identity";
    r.inputs = {d};
    r.attrs = {};
    report.push_back("fused max_pool2d_grad+relu_grad '" + pool_grad.name + "'");
  }
}

namespace {

// A node's ports (inputs, then outputs as -1 - k) that may hold a blocked (nChw16c) tensor,
// grouped: the ports of one group share a layout, named by the group's attribute (empty for
// layout-agnostic elementwise ops, which need none).
struct PortGroup {
  std::vector<int> ports;
  const char* attr;
};

int out_port(int k) { return -1 - k; }

// The 4-D axes a reduction over a blocked tensor may take: all but channels, or the spatial
// ones (global pooling).
bool channel_reduction(const Node& n, const Shape& x) {
  if (x.rank() != 4 || !n.attrs.has("axes")) return false;
  std::vector<int64_t> axes = attr_ints(n, "axes");
  for (int64_t& a : axes) a = a < 0 ? a + 4 : a;
  std::sort(axes.begin(), axes.end());
  return axes == std::vector<int64_t>{0, 1, 2} || axes == std::vector<int64_t>{1, 2};
}

bool layout_agnostic(const std::string& op) {
  // clang-format off
  static const std::set<std::string> ops{
      "identity", "add", "sub", "mul", "div", "maximum", "minimum", "neg", "square", "abs",
      "scale_shift", "relu", "relu6", "sigmoid", "tanh", "leaky_relu", "swish", "gelu",
      "relu_grad", "relu6_grad", "sigmoid_grad", "tanh_grad", "leaky_relu_grad", "swish_grad",
      "gelu_grad", "abs_grad"};
  // clang-format on
  return ops.count(op) > 0;
}

// What the cpu kernels take blocked (see plan_layouts in executable.h).
std::vector<PortGroup> blocked_ports(const Graph& g, const Node& n) {
  const auto& op = n.op;
  if (op == "conv2d") return {{{0}, "src_layout"}, {{out_port(0)}, "dst_layout"}};
  if (op == "conv2d_backward_input") return {{{out_port(0)}, "src_layout"}, {{0}, "dst_layout"}};
  if (op == "conv2d_backward_filter") return {{{1}, "src_layout"}, {{0}, "dst_layout"}};
  if (op == "max_pool2d") return {{{0}, "src_layout"}};
  if (op == "max_pool2d_grad") return {{{1, out_port(0)}, "src_layout"}};
  if (op == "batch_norm_train" || op == "batch_norm_infer") {
    PortGroup p{{0, out_port(0)}, "layout"};
    if (attr_b(n, "residual")) p.ports.push_back(op == "batch_norm_train" ? 3 : 5);
    return {p};
  }
  if (op == "batch_norm_train_grad") {
    PortGroup p{{0, 1, out_port(0)}, "layout"};
    if (attr_s(n, "activation") == "relu") p.ports.push_back(5);
    if (attr_b(n, "emit_dy")) p.ports.push_back(out_port(3));
    return {p};
  }
  if ((op == "reduce_sum" || op == "reduce_mean") &&
      channel_reduction(n, g.type(n.inputs[0]).shape))
    return {{{0}, "layout"}};
  if ((op == "reduce_sum_grad" || op == "reduce_mean_grad") &&
      channel_reduction(n, n.outputs[0].shape))
    return {{{1, out_port(0)}, "layout"}};  // input 1 gives only the shape
  if (layout_agnostic(op)) {
    // Elementwise over tensors of one shape (no broadcasting): any layout, the same for all.
    PortGroup p{{out_port(0)}, ""};
    for (int i = 0; i < int(n.inputs.size()); ++i) {
      if (g.type(n.inputs[size_t(i)]).shape != n.outputs[0].shape) return {};
      p.ports.push_back(i);
    }
    return n.outputs.size() == 1 ? std::vector<PortGroup>{p} : std::vector<PortGroup>{};
  }
  return {};
}

}  // namespace

void plan_layouts(Graph& g, std::vector<Value>& outputs, std::vector<std::string>& report) {
  auto sched = schedule_nodes(g, outputs);
  auto cons = consumers_of(g, sched, outputs);
  // Union-find over the values: a port group ties its values to one layout.
  std::map<std::pair<int, int>, int> id;
  std::vector<int> parent;
  auto key = [&](Value v) {
    auto [it, fresh] = id.try_emplace({v.node, v.index}, int(parent.size()));
    if (fresh) parent.push_back(it->second);
    return it->second;
  };
  std::function<int(int)> find = [&](int a) {
    return parent[size_t(a)] == a ? a : parent[size_t(a)] = find(parent[size_t(a)]);
  };
  auto value_of = [&](const Node& n, int node, int port) {
    return port >= 0 ? n.inputs[size_t(port)] : Value{node, -1 - port};
  };
  std::map<int, std::vector<PortGroup>> groups;
  for (int i : sched) {
    groups[i] = blocked_ports(g, g.node(i));
    for (const PortGroup& p : groups[i]) {
      const int first = key(value_of(g.node(i), i, p.ports[0]));
      for (int port : p.ports)
        parent[size_t(find(key(value_of(g.node(i), i, port))))] = find(first);
    }
  }
  // A class may be blocked when each of its values is a float32 4-D tensor with channels a
  // multiple of 16 whose producer and every reader take it blocked (a graph output never
  // does), and it pays when a convolution writes or reads it.
  auto covered = [&](int node, int port, Value v) {
    if (node < 0) return false;
    for (const PortGroup& p : groups[node])
      for (int q : p.ports)
        if (q == port && value_of(g.node(node), node, q) == v) return true;
    return false;
  };
  std::map<int, bool> ok, conv;
  for (const auto& [kv, k] : id) {
    const Value v{kv.first, kv.second};
    const int c = find(k);
    const TensorType& t = g.type(v);
    bool good = t.dtype == DType::f32 && t.shape.rank() == 4 && t.shape[3] % 16 == 0 &&
                covered(v.node, out_port(v.index), v);
    for (int r : cons[{v.node, v.index}]) {
      if (!good) break;
      const Node* rn = r >= 0 ? &g.node(r) : nullptr;
      for (int port = 0; rn && port < int(rn->inputs.size()); ++port)
        if (rn->inputs[size_t(port)] == v) good = good && covered(r, port, v);
      good = good && rn;
    }
    auto is_conv = [&](int node) { return node >= 0 && g.node(node).op.rfind("conv2d", 0) == 0; };
    bool touches = is_conv(v.node);
    for (int r : cons[{v.node, v.index}]) touches = touches || is_conv(r);
    ok.try_emplace(c, true);
    ok[c] = ok[c] && good;
    conv[c] = conv[c] || touches;
  }
  std::map<int, std::vector<std::string>> names;  // per blocked class, the nodes taking it
  for (int i : sched) {
    Node& n = g.node(i);
    for (const PortGroup& p : groups[i]) {
      const int c = find(key(value_of(n, i, p.ports[0])));
      if (!ok[c] || !conv[c]) continue;
      if (*p.attr) n.attrs.set(p.attr, "nChw16c");
      if (n.op == "identity") continue;
      const std::string who = n.name.empty() ? n.op : n.name + " (" + n.op + ")";
      if (std::find(names[c].begin(), names[c].end(), who) == names[c].end())
        names[c].push_back(who);
    }
  }
  for (auto& [c, list] : names) {
    std::string line = "layout: nChw16c between";
    for (size_t k = 0; k < list.size(); ++k) line += (k ? ", '" : " '") + list[k] + "'";
    report.push_back(line);
  }
}

// Consecutive sgd_update (or adam_update) nodes of one optimizer (same attributes, learning
// rate and step, the same slots) become one node with count = n that updates every variable in
// one pass; the others become dead identities. Only neighbours in the schedule fuse, so no
// other side effect moves across an update.
static void fuse_updates(Graph& g, std::vector<Value>& outputs, std::vector<std::string>& report) {
  auto sched = schedule_nodes(g, outputs);
  auto fusable = [&](int i) {
    const Node& n = g.node(i);
    return (n.op == "sgd_update" || n.op == "adam_update") && attr_i(n, "count") == 1;
  };
  // Same op, attributes, input count, learning rate (input 2) and step (adam's input 5).
  auto compatible = [&](int a, int b) {
    const Node &x = g.node(a), &y = g.node(b);
    if (x.op != y.op || x.inputs.size() != y.inputs.size() || x.inputs[2] != y.inputs[2] ||
        x.attrs.str() != y.attrs.str())
      return false;
    return x.op != "adam_update" || x.inputs[5] == y.inputs[5];
  };
  for (size_t k = 0; k < sched.size();) {
    if (!fusable(sched[k])) {
      ++k;
      continue;
    }
    std::vector<int> run{sched[k]};
    while (k + run.size() < sched.size() && fusable(sched[k + run.size()]) &&
           compatible(sched[k], sched[k + run.size()]))
      run.push_back(sched[k + run.size()]);
    k += run.size();
    if (run.size() < 2) continue;
    const size_t n = run.size(), per = g.node(run[0]).inputs.size();
    const bool adam = g.node(run[0]).op == "adam_update";
    const size_t slots = per - 3 - (adam ? 1 : 0);
    std::vector<Value> in;
    for (size_t part : {size_t(0), size_t(1)})
      for (int i : run) in.push_back(g.node(i).inputs[part]);
    in.push_back(g.node(run[0]).inputs[2]);
    for (size_t s = 0; s < slots; ++s)
      for (int i : run) in.push_back(g.node(i).inputs[3 + s]);
    if (adam) in.push_back(g.node(run[0]).inputs[5]);
    for (size_t j = 1; j < n; ++j) {
      Node& dead = g.node(run[j]);
      const Value var = dead.inputs[0];
      dead.op = "identity";
      dead.inputs = {var};
      dead.attrs = {};
      dead.outputs = {g.type(var)};
    }
    Node& fused = g.node(run[0]);
    fused.inputs = std::move(in);
    fused.attrs.set("count", int(n));
    report.push_back("fused " + std::to_string(n) + " " + fused.op + " into one pass");
  }
}

Executable::Executable(const Graph& graph, std::vector<Value> inputs, std::vector<Value> outputs,
                       CompileOptions options)
    : graph_(graph), options_(options), inputs_(std::move(inputs)), outputs_(std::move(outputs)) {
  auto t0 = std::chrono::steady_clock::now();
  allocator_ = &device_allocator(options_.device);  // throws, naming a device with no backend
  LS_CHECK(!options_.eager || allocator_->host_accessible(), "Executable: run_eagerly runs on ",
           "the host; device ", options_.device.str(), " needs a compiled executable");
  step_.seed = options.seed;
  step_.replica = options.replica;
  for (Value v : inputs_)
    LS_CHECK(graph_.node(v.node).op == "input", "Executable: input ", v.node,
             " is not a placeholder");
  for (Value v : outputs_)
    LS_CHECK(v.valid() && v.node < graph_.size(), "Executable: invalid output value");
  if (options_.fuse && !options_.eager && !fusion_disabled_env()) {
    report_ = fuse_graph(graph_, outputs_);
    if (options_.backend == "cpu" && !layouts_disabled_env())
      plan_layouts(graph_, outputs_, report_);
  }
  schedule_ = schedule_nodes(graph_, outputs_);
  if (const char* e = std::getenv("LOCKSTEP_DUMP_GRAPH"); e && *e && std::string(e) != "0") {
    // The live program after the passes, in schedule order (debugging the passes).
    std::fprintf(stderr, "--- executable: %zu live nodes\n", schedule_.size());
    for (int i : schedule_) {
      const Node& n = graph_.node(i);
      std::string line = "%" + std::to_string(i) + " = " + n.op + "(";
      for (size_t k = 0; k < n.inputs.size(); ++k)
        line += (k ? ", %" : "%") + std::to_string(n.inputs[k].node) + ":" +
                std::to_string(n.inputs[k].index);
      line += ") {" + n.attrs.str() + "} ->";
      for (const auto& t : n.outputs) line += " " + t.str();
      std::fprintf(stderr, "%s  # %s\n", line.c_str(), n.name.c_str());
    }
  }
  // Inputs the live graph does not read still get a buffer the caller can write.
  for (Value v : inputs_)
    if (std::find(schedule_.begin(), schedule_.end(), v.node) == schedule_.end())
      schedule_.insert(schedule_.begin(), v.node);
  for (int i : schedule_)
    for (auto& t : graph_.node(i).outputs)
      LS_CHECK(t.shape.is_known(), graph_.node(i).op, " '", graph_.node(i).name, "': output shape ",
               t.shape.str(), " is not known at compile time");
  if (options_.eager) {
    for (Value v : inputs_)
      input_tensors_.push_back(Tensor::zeros(graph_.type(v).shape, graph_.type(v).dtype));
  } else {
    plan_memory();
    build_kernels();
  }
  compile_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Executable::~Executable() {
  if (profiling_enabled() && step_.step > 0 && !steps_.empty()) print_profile();
  steps_.clear();
  if (arena_) allocator_->deallocate(arena_);
  if (workspace_) allocator_->deallocate(workspace_);
}

// The host side of a copy at the program's edge: defined, on the host, contiguous, and of the
// edge buffer's shape and dtype.
static void check_host_side(const char* what, int i, const Tensor& host, const Tensor& edge) {
  LS_CHECK(host.defined() && host.device().type == DeviceType::cpu && host.is_contiguous(),
           "Executable::", what, "(", i, "): needs a contiguous host tensor");
  const bool same = host.shape() == edge.shape() && host.dtype() == edge.dtype();
  LS_CHECK(same, "Executable::", what, "(", i, "): host tensor is ", dtype_name(host.dtype()),
           host.shape().str(), ", the program's is ", dtype_name(edge.dtype()), edge.shape().str());
}

void Executable::copy_input_from_host(int i, const Tensor& host) {
  LS_CHECK(i >= 0 && i < num_inputs(), "Executable::copy_input_from_host: no input ", i, " (",
           num_inputs(), " inputs)");
  check_host_side("copy_input_from_host", i, host, input_tensors_[size_t(i)]);
  allocator_->copy_from_host(input_tensors_[size_t(i)].raw(), host.raw(), host.nbytes());
}

void Executable::copy_output_to_host(int i, Tensor& host) const {
  LS_CHECK(i >= 0 && i < num_outputs(), "Executable::copy_output_to_host: no output ", i, " (",
           num_outputs(), " outputs", options_.eager ? "; eager outputs exist after run()" : "",
           ")");
  const Tensor& out = output_tensors_[size_t(i)];
  if (!host.defined()) host = Tensor::empty(out.shape(), out.dtype());
  check_host_side("copy_output_to_host", i, host, out);
  allocator_->copy_to_host(host.raw(), out.raw(), host.nbytes());
}

void Executable::plan_memory() {
  const int n = graph_.size();
  values_.assign(n, {});
  std::vector<int> pos(n, -1);
  for (int k = 0; k < int(schedule_.size()); ++k) pos[schedule_[k]] = k;
  const int end = int(schedule_.size());

  // Root buffer of each value (aliases share their input's root).
  struct Buf {
    int node, index;
    size_t bytes;
    int first, last;
    size_t offset = 0;
    bool arena;
  };
  std::map<std::pair<int, int>, int> buf_of;
  std::vector<Buf> bufs;
  for (int i : schedule_) {
    const Node& nd = graph_.node(i);
    const OpDef& def = OpRegistry::get().op(nd.op);
    for (int k = 0; k < int(nd.outputs.size()); ++k) {
      if (k == 0 && def.alias_input >= 0) {
        Value src = nd.inputs[def.alias_input];
        buf_of[{i, 0}] = buf_of.at({src.node, src.index});
        continue;
      }
      size_t bytes = size_t(nd.outputs[k].shape.numel()) * dtype_size(nd.outputs[k].dtype);
      bool arena = nd.op != "variable";
      int first = nd.op == "input" ? 0 : pos[i];
      buf_of[{i, k}] = int(bufs.size());
      bufs.push_back({i, k, bytes, first, first, 0, arena});
    }
  }
  for (int i : schedule_)
    for (Value v : graph_.node(i).inputs) {
      Buf& b = bufs[buf_of.at({v.node, v.index})];
      b.last = std::max(b.last, pos[i]);
    }
  for (Value v : outputs_) bufs[buf_of.at({v.node, v.index})].last = end;
  for (Value v : inputs_) bufs[buf_of.at({v.node, v.index})].last = end;  // user-written

  // Place biggest first at the lowest offset not overlapping any live-overlapping buffer.
  std::vector<int> order;
  for (int b = 0; b < int(bufs.size()); ++b)
    if (bufs[b].arena) order.push_back(b);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return bufs[a].bytes > bufs[b].bytes; });
  std::vector<int> placed;
  auto align = [](size_t x) { return (x + kAlignment - 1) / kAlignment * kAlignment; };
  for (int b : order) {
    Buf& B = bufs[b];
    unplanned_bytes_ += align(B.bytes);
    std::vector<std::pair<size_t, size_t>> busy;
    for (int p : placed) {
      const Buf& P = bufs[p];
      if (P.first <= B.last && B.first <= P.last)
        busy.push_back({P.offset, P.offset + align(P.bytes)});
    }
    std::sort(busy.begin(), busy.end());
    size_t off = 0;
    for (auto [lo, hi] : busy) {
      if (off + align(B.bytes) <= lo) break;
      off = std::max(off, hi);
    }
    B.offset = off;
    arena_bytes_ = std::max(arena_bytes_, off + align(B.bytes));
    placed.push_back(b);
  }
  arena_ = allocator_->allocate(std::max<size_t>(arena_bytes_, kAlignment));
  allocator_->zero(arena_, arena_bytes_);

  for (int i : schedule_) {
    const Node& nd = graph_.node(i);
    const OpDef& def = OpRegistry::get().op(nd.op);
    values_[i].resize(nd.outputs.size());
    for (int k = 0; k < int(nd.outputs.size()); ++k) {
      const TensorType& t = nd.outputs[k];
      if (k == 0 && def.alias_input >= 0) {
        Value src = nd.inputs[def.alias_input];
        values_[i][0] = values_[src.node][src.index].reshape(t.shape);
      } else if (nd.op == "variable") {
        LS_CHECK(nd.variable && nd.variable->value.defined(), "variable '", nd.name,
                 "' has no value");
        values_[i][k] = nd.variable->value;
      } else {
        const Buf& B = bufs[buf_of.at({i, k})];
        values_[i][k] = Tensor::borrow(static_cast<char*>(arena_) + B.offset, t.shape, t.dtype);
      }
    }
  }
  for (Value v : inputs_) input_tensors_.push_back(values_[v.node][v.index]);
  for (Value v : outputs_) output_tensors_.push_back(values_[v.node][v.index]);
  report_.push_back("memory: arena " + std::to_string(arena_bytes_ >> 10) + " KiB (" +
                    std::to_string(unplanned_bytes_ >> 10) + " KiB without reuse), " +
                    std::to_string(schedule_.size()) + " nodes");
}

// LOCKSTEP_STRICT_KERNELS=1: as CompileOptions::strict_kernels.
static bool strict_kernels_env() {
  static const bool on = [] {
    const char* e = std::getenv("LOCKSTEP_STRICT_KERNELS");
    return e && *e && std::string(e) != "0";
  }();
  return on;
}

// A node of a `backend` program runs the reference kernel: a report line, or in strict mode an
// error naming the op and the backend.
static void note_fallback(const Node& nd, const std::string& backend, const std::string& why,
                          bool strict, std::vector<std::string>* report) {
  LS_CHECK(!strict, "op '", nd.op, "' (", nd.name, ") would run the reference kernel on backend '",
           backend, "' (", why, ") and strict kernels are on (CompileOptions::strict_kernels or ",
           "LOCKSTEP_STRICT_KERNELS=1): compile for backend \"reference\", or turn strict off");
  if (report)
    report->push_back("fallback: " + nd.op + " runs the reference kernel on '" + backend +
                      "': " + why);
}

// A kernel without bf16 support on a node with bf16 inputs or outputs: converts the bf16 inputs
// to f32 in its workspace, runs the f32 kernel built for an f32 copy of the node, and rounds its
// results into the bf16 outputs. Correct for every op (the reference backend runs bf16 this
// way: f32 arithmetic on bf16-rounded values); the cpu backend's hot ops take bf16 natively.
class Bf16Adapter final : public Kernel {
 public:
  Bf16Adapter(const Node& nd, std::vector<TensorType> in_types, const KernelFactory& f)
      : node_(std::make_unique<Node>(nd)) {
    auto take = [&](const TensorType& t) {
      size_t off = bytes_;
      bytes_ += (size_t(t.shape.numel()) * 4 + kAlignment - 1) / kAlignment * kAlignment;
      return off;
    };
    for (int i = 0; i < int(in_types.size()); ++i)
      if (in_types[i].dtype == DType::bf16) {
        ins_.push_back({i, take(in_types[i]), in_types[i].shape});
        in_types[i].dtype = DType::f32;
      }
    for (int k = 0; k < int(node_->outputs.size()); ++k)
      if (node_->outputs[k].dtype == DType::bf16) {
        outs_.push_back({k, take(node_->outputs[k]), node_->outputs[k].shape});
        node_->outputs[k].dtype = DType::f32;
      }
    inner_ = f(*node_, in_types);
  }
  size_t workspace_bytes() const override { return bytes_ + inner_->workspace_bytes(); }
  std::string fallback_reason() const override { return inner_->fallback_reason(); }
  std::string algorithm() const override { return inner_->algorithm(); }
  void run(const KernelArgs& a) override {
    if (a.workspace != bound_ws_ || a.inputs != bound_in_) bind(a);
    for (const Conv& c : ins_)
      bf16_to_f32(a.in(c.index).data<bf16>(), in32_[size_t(c.index)].data<float>(),
                  c.shape.numel());
    inner_->run(args_);
    for (const Conv& c : outs_)
      f32_to_bf16(out32_[size_t(c.index)].data<float>(), a.out(c.index).data<bf16>(),
                  c.shape.numel());
  }

 private:
  struct Conv {
    int index;
    size_t offset;
    Shape shape;
  };
  // The inner kernel's arguments: the caller's tensors, with f32 workspace views for bf16 ones.
  // Rebuilt only when the caller's buffers change (once for a compiled program).
  void bind(const KernelArgs& a) {
    char* ws = static_cast<char*>(a.workspace);
    in32_.assign(a.inputs, a.inputs + a.num_inputs);
    out32_.assign(a.outputs, a.outputs + a.num_outputs);
    for (const Conv& c : ins_)
      in32_[size_t(c.index)] = Tensor::borrow(ws + c.offset, c.shape, DType::f32);
    for (const Conv& c : outs_)
      out32_[size_t(c.index)] = Tensor::borrow(ws + c.offset, c.shape, DType::f32);
    args_ = KernelArgs{in32_.data(),       int(in32_.size()), out32_.data(),
                       int(out32_.size()), ws + bytes_,       a.step};
    bound_ws_ = a.workspace;
    bound_in_ = a.inputs;
  }
  std::unique_ptr<Node> node_;  // f32 copy; the inner kernel may keep a pointer to it
  std::unique_ptr<Kernel> inner_;
  std::vector<Conv> ins_, outs_;
  size_t bytes_ = 0;
  std::vector<Tensor> in32_, out32_;
  KernelArgs args_;
  const void* bound_ws_ = nullptr;
  const Tensor* bound_in_ = nullptr;
};

std::unique_ptr<Kernel> bf16_via_f32(const Node& n, const std::vector<TensorType>& in,
                                     const KernelFactory& f) {
  return std::make_unique<Bf16Adapter>(n, in, f);
}

static bool has_bf16(const Node& nd, const std::vector<TensorType>& in_types) {
  for (const TensorType& t : in_types)
    if (t.dtype == DType::bf16) return true;
  for (const TensorType& t : nd.outputs)
    if (t.dtype == DType::bf16) return true;
  return false;
}

// Builds nd's kernel for `backend`. A backend without one falls back to the reference kernel,
// and so may a backend's own factory for shapes it does not cover: both are noted.
static std::unique_ptr<Kernel> build_kernel(const Node& nd, const std::vector<TensorType>& in_types,
                                            const std::string& backend, bool strict,
                                            std::vector<std::string>* report) {
  const OpRegistry& registry = OpRegistry::get();
  const KernelFactory* f = registry.kernel(nd.op, backend);
  std::string used = backend;
  if (!f && backend != kReferenceBackend) {
    f = registry.kernel(nd.op, kReferenceBackend);
    used = kReferenceBackend;
    const std::string& declared = registry.op(nd.op).reference_only;
    if (f)
      note_fallback(nd, backend,
                    declared.empty() ? "no '" + backend + "' kernel, and the op " +
                                           "is not declared reference-only"
                                     : declared,
                    strict, report);
  }
  LS_CHECK(f, "op '", nd.op, "' (", nd.name, ") has no kernel for backend '", backend, "'");
  std::unique_ptr<Kernel> kernel;
  if (has_bf16(nd, in_types) && !registry.kernel_takes_bf16(nd.op, used)) {
    kernel = std::make_unique<Bf16Adapter>(nd, in_types, *f);
    if (report) report->push_back("bf16: " + nd.op + " runs its f32 kernel between conversions");
  } else {
    kernel = (*f)(nd, in_types);
  }
  if (std::string why = kernel->fallback_reason(); !why.empty())
    note_fallback(nd, backend, why, strict, report);
  return kernel;
}

void Executable::build_kernels() {
  std::vector<std::string> fallbacks;
  const bool strict = options_.strict_kernels || strict_kernels_env();
  for (int i : schedule_) {
    const Node& nd = graph_.node(i);
    const OpDef& def = OpRegistry::get().op(nd.op);
    if (is_source(nd.op) || def.alias_input >= 0) continue;
    // The reference fallback reads host memory: no host kernel on a device's arena.
    LS_CHECK(allocator_->host_accessible() || OpRegistry::get().kernel(nd.op, options_.backend),
             "op '", nd.op, "' (", nd.name, ") has no '", options_.backend, "' kernel, and the ",
             "host 'reference' kernel cannot run on ", options_.device.str(), "'s memory");
    auto st = std::make_unique<Step>();
    st->node = i;
    std::vector<TensorType> in_types;
    for (Value v : nd.inputs) {
      st->in.push_back(values_[v.node][v.index]);
      in_types.push_back(graph_.type(v));
    }
    st->out = values_[i];
    st->kernel = build_kernel(nd, in_types, options_.backend, strict, &fallbacks);
    if (std::string a = st->kernel->algorithm(); !a.empty())
      report_.push_back("algorithm: " + nd.op + " (" + nd.name + "): " + a);
    workspace_bytes_ = std::max(workspace_bytes_, st->kernel->workspace_bytes());
    steps_.push_back(std::move(st));
  }
  std::sort(fallbacks.begin(), fallbacks.end());
  fallbacks.erase(std::unique(fallbacks.begin(), fallbacks.end()), fallbacks.end());
  report_.insert(report_.end(), fallbacks.begin(), fallbacks.end());
  if (workspace_bytes_) workspace_ = allocator_->allocate(workspace_bytes_);
  for (auto& st : steps_) {
    st->args = KernelArgs{st->in.data(),       int(st->in.size()), st->out.data(),
                          int(st->out.size()), workspace_,         &step_};
  }
}

void Executable::run() {
  if (options_.eager) {
    run_eager();
  } else {
    if (profiling_enabled()) {
      for (auto& st : steps_) {
        auto t0 = std::chrono::steady_clock::now();
        st->kernel->run(st->args);
        st->seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
    } else {
      for (auto& st : steps_) st->kernel->run(st->args);
    }
  }
  ++step_.step;
}

void Executable::print_profile() const {
  double total = 0;
  for (auto& st : steps_) total += st->seconds;
  std::vector<const Step*> order;
  for (auto& st : steps_) order.push_back(st.get());
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->seconds > b->seconds; });
  std::fprintf(stderr, "profile: %llu steps, %.3f ms/step in kernels\n",
               (unsigned long long)step_.step, 1e3 * total / double(step_.step));
  for (const Step* st : order) {
    if (st->seconds < 0.005 * total) break;
    const Node& nd = graph_.node(st->node);
    std::fprintf(stderr, "  %6.2f ms %5.1f%%  %-22s %s\n", 1e3 * st->seconds / double(step_.step),
                 100.0 * st->seconds / total, nd.op.c_str(), nd.name.c_str());
  }
}

void Executable::run_eager() {
  std::map<std::pair<int, int>, Tensor> vals;
  for (size_t k = 0; k < inputs_.size(); ++k)
    vals[{inputs_[k].node, inputs_[k].index}] = input_tensors_[k];
  for (int i : schedule_) {
    const Node& nd = graph_.node(i);
    const OpDef& def = OpRegistry::get().op(nd.op);
    if (nd.op == "input") {
      LS_CHECK(vals.count({i, 0}), "eager: input '", nd.name, "' was not fed");
      continue;
    }
    if (nd.op == "variable") {
      vals[{i, 0}] = nd.variable->value;
      continue;
    }
    std::vector<Tensor> in, out;
    std::vector<TensorType> in_types;
    for (Value v : nd.inputs) {
      in.push_back(vals.at({v.node, v.index}));
      in_types.push_back(graph_.type(v));
    }
    if (def.alias_input >= 0) {
      vals[{i, 0}] = in[def.alias_input].reshape(nd.outputs[0].shape);
      continue;
    }
    for (auto& t : nd.outputs) out.push_back(Tensor::zeros(t.shape, t.dtype));
    auto kernel = build_kernel(nd, in_types, options_.backend,
                               options_.strict_kernels || strict_kernels_env(), nullptr);
    std::vector<char> ws(kernel->workspace_bytes() + kAlignment);
    void* wsp = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws.data()) + kAlignment - 1) &
                                        ~uintptr_t(kAlignment - 1));
    KernelArgs args{in.data(), int(in.size()), out.data(), int(out.size()), wsp, &step_};
    kernel->run(args);
    for (int k = 0; k < int(out.size()); ++k) vals[{i, k}] = out[k];
  }
  output_tensors_.clear();
  for (Value v : outputs_) output_tensors_.push_back(vals.at({v.node, v.index}));
}

}  // namespace lockstep
