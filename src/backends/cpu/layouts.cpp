// The cpu backend's memory layouts (layouts.h): which float32 activations stay in oneDNN's
// blocked nChw16c layout between the kernels that take it.
#include "backends/cpu/layouts.h"

#include <algorithm>
#include <functional>
#include <map>

#include "graph/internal/passes.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep::cpu {

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

// What the cpu kernels take blocked (see plan_layouts in executable.h).
std::vector<PortGroup> blocked_ports(const Graph& g, const Node& n) {
  const auto& op = n.op;
  if (op == op::conv2d || op == op::conv2d_pointwise_depthwise)
    return {{{0}, "src_layout"}, {{out_port(0)}, "dst_layout"}};
  if (op == op::conv2d_backward_input) return {{{out_port(0)}, "src_layout"}, {{0}, "dst_layout"}};
  if (op == op::conv2d_backward_filter) return {{{1}, "src_layout"}, {{0}, "dst_layout"}};
  if (op == op::max_pool2d) return {{{0}, "src_layout"}};
  if (op == op::max_pool2d_grad) return {{{1, out_port(0)}, "src_layout"}};
  if (op == op::batch_norm_train || op == op::batch_norm_infer) {
    PortGroup p{{0, out_port(0)}, "layout"};
    if (attr_b(n, "residual")) p.ports.push_back(op == op::batch_norm_train ? 3 : 5);
    return {p};
  }
  if (op == op::batch_norm_train_grad) {
    PortGroup p{{0, 1, out_port(0)}, "layout"};
    const FusedActivation act = attr_activation(n);
    if ((act == FusedActivation::relu || act == FusedActivation::relu6) &&
        !attr_b(n, "mask_from_x"))
      p.ports.push_back(5);  // y (with swish or mask_from_x: beta, [C])
    if (attr_b(n, "emit_dy")) p.ports.push_back(out_port(3));
    return {p};
  }
  if ((op == op::reduce_sum || op == op::reduce_mean) &&
      channel_reduction(n, g.type(n.inputs[0]).shape))
    return {{{0}, "layout"}};
  if ((op == op::reduce_sum_grad || op == op::reduce_mean_grad) &&
      channel_reduction(n, n.outputs[0].shape))
    return {{{1, out_port(0)}, "layout"}};  // input 1 gives only the shape
  if (op == op::add || op == op::sub || op == op::mul || op == op::div) {
    // [N, H, W, C] with one [1, 1, C] row per image (EfficientNet's squeeze-and-excitation
    // scale, and its gradient): the image operand and y blocked, the row plain.
    const Shape &a = g.type(n.inputs[0]).shape, &b = g.type(n.inputs[1]).shape;
    const Shape& y = n.outputs[0].shape;
    auto per_image_row = [&](const Shape& r) {
      return y.rank() == 4 && r == Shape{y[0], 1, 1, y[3]} && y[1] * y[2] > 1;
    };
    if (a == y && per_image_row(b)) return {{{0, out_port(0)}, "layout"}};
    if (b == y && per_image_row(a)) return {{{1, out_port(0)}, "layout"}};
    // One scalar per image (a drop-connect mask [N, 1, 1, 1]): each image's elements are
    // contiguous in any layout, so the kernel needs no attribute.
    auto per_image_scalar = [&](const Shape& r) {
      return y.rank() == 4 && r == Shape{y[0], 1, 1, 1};
    };
    if (a == y && per_image_scalar(b)) return {{{0, out_port(0)}, ""}};
    if (b == y && per_image_scalar(a)) return {{{1, out_port(0)}, ""}};
  }
  if (OpRegistry::get().op(op).layout_agnostic) {
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

// The planner's state: union-find classes of values tied to one layout by port groups.
class LayoutPlanner {
 public:
  LayoutPlanner(Graph& g, const std::vector<Value>& outputs)
      : g_(g), sched_(schedule_nodes(g, outputs)), cons_(consumers_of(g, sched_, outputs)) {}

  // Ties the values of each node's port groups into classes.
  void tie_ports() {
    for (int i : sched_) {
      groups_[i] = blocked_ports(g_, g_.node(i));
      for (const PortGroup& p : groups_[i]) {
        const int first = key(value_of(i, p.ports[0]));
        for (int port : p.ports) parent_[size_t(find(key(value_of(i, port))))] = find(first);
      }
    }
  }

  // A class may be blocked when each of its values is a float32 4-D tensor with channels a
  // multiple of 16 whose producer and every reader take it blocked (a graph output never
  // does), and it pays when a convolution writes or reads it.
  void decide() {
    for (const auto& [kv, k] : id_) {
      const Value v{kv.first, kv.second};
      const int c = find(k);
      ok_.try_emplace(c, true);
      ok_[c] = ok_[c] && takes_blocked(v);
      bool touches = is_conv(v.node);
      for (int r : cons_[{v.node, v.index}]) touches = touches || is_conv(r);
      conv_[c] = conv_[c] || touches;
    }
  }

  // Sets the layout attributes of the blocked classes' nodes; one report line per class.
  void apply(std::vector<std::string>& report) {
    std::map<int, std::vector<std::string>> names;  // per blocked class, the nodes taking it
    for (int i : sched_) {
      Node& n = g_.node(i);
      for (const PortGroup& p : groups_[i]) {
        const int c = find(key(value_of(i, p.ports[0])));
        if (!ok_[c] || !conv_[c]) continue;
        if (*p.attr) n.attrs.set(p.attr, "nChw16c");
        if (is_view(n)) continue;
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

 private:
  int key(Value v) {
    auto [it, fresh] = id_.try_emplace({v.node, v.index}, int(parent_.size()));
    if (fresh) parent_.push_back(it->second);
    return it->second;
  }
  int find(int a) {
    while (parent_[size_t(a)] != a) a = parent_[size_t(a)] = parent_[size_t(parent_[size_t(a)])];
    return a;
  }
  Value value_of(int node, int port) const {
    return port >= 0 ? g_.node(node).inputs[size_t(port)] : Value{node, -1 - port};
  }
  bool covered(int node, int port, Value v) {
    if (node < 0) return false;
    for (const PortGroup& p : groups_[node])
      for (int q : p.ports)
        if (q == port && value_of(node, q) == v) return true;
    return false;
  }
  // v's producer and every reader take it blocked, and its shape and dtype allow it.
  bool takes_blocked(Value v) {
    const TensorType& t = g_.type(v);
    if (t.dtype != DType::f32 || t.shape.rank() != 4 || t.shape[3] % 16 != 0 ||
        !covered(v.node, out_port(v.index), v))
      return false;
    for (int r : cons_[{v.node, v.index}]) {
      if (r < 0) return false;
      const Node& rn = g_.node(r);
      for (int port = 0; port < int(rn.inputs.size()); ++port)
        if (rn.inputs[size_t(port)] == v && !covered(r, port, v)) return false;
    }
    return true;
  }
  bool is_conv(int node) const {
    if (node < 0) return false;
    const OpId op = g_.node(node).op;
    return op == op::conv2d || op == op::conv2d_backward_input || op == op::conv2d_backward_filter;
  }

  Graph& g_;
  std::vector<int> sched_;
  Consumers cons_;
  std::map<std::pair<int, int>, int> id_;
  std::vector<int> parent_;
  std::map<int, std::vector<PortGroup>> groups_;
  std::map<int, bool> ok_, conv_;
};

}  // namespace

void plan_layouts(Graph& g, std::vector<Value>& outputs, std::vector<std::string>& report) {
  LayoutPlanner planner(g, outputs);
  planner.tie_ports();
  planner.decide();
  planner.apply(report);
}

}  // namespace lockstep::cpu
