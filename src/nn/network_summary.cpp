// Network::summary: Keras's table (layer (type), output shape, param #, totals).
#include <functional>
#include <iostream>
#include <set>
#include <sstream>

#include "lockstep/graph/sharding.h"
#include "lockstep/nn/network.h"

namespace lockstep {

static std::string with_commas(int64_t v) {
  std::string s = std::to_string(v);
  for (int i = int(s.size()) - 3; i > 0; i -= 3) s.insert(size_t(i), ",");
  return s;
}

static std::string human_bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB"};
  int u = 0;
  while (b >= 1024 && u < 3) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", b, units[u]);
  return buf;
}

static std::string pad(const std::string& s, size_t w, bool right = false) {
  // Count UTF-8 code points for width.
  size_t len = 0;
  for (unsigned char c : s) len += (c & 0xC0) != 0x80;
  if (len >= w) return s;
  return right ? std::string(w - len, ' ') + s : s + std::string(w - len, ' ');
}

static std::string rep(const std::string& ch, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += ch;
  return s;
}

// Under a distribution (lockstep/graph/sharding.h): each weight's layout and the bytes one
// device holds of it, and the totals per device (an optimizer's slots take their weight's
// layout, so Adam adds twice the trainable bytes per device).
static void summary_layouts(const ShardingPlan& plan, const std::vector<VariablePtr>& vars,
                            std::ostream& os) {
  std::vector<const Variable*> list;
  for (const VariablePtr& v : vars) list.push_back(v.get());
  const std::vector<DimAxes> layouts = plan.variable_layouts(list, false);
  os << " Distribution: " << plan.describe() << "\n";
  const size_t w1 = 31, w2 = 30, w3 = 18;
  double whole = 0, per_device = 0, trainable_per_device = 0;
  for (size_t i = 0; i < vars.size(); ++i) {
    const Variable& v = *vars[i];
    const double bytes = double(v.value.nbytes());
    const double mine = double(shard_shape(v.value.shape(), plan.mesh(), layouts[i]).numel()) *
                        double(dtype_size(v.value.dtype()));
    whole += bytes, per_device += mine;
    if (v.trainable) trainable_per_device += mine;
    os << "  " << pad(v.name, w1) << pad(dim_axes_str(layouts[i]), w2)
       << pad(human_bytes(mine) + " / device", w3, true) << "\n";
  }
  os << " Weights per device: " << human_bytes(per_device) << " of " << human_bytes(whole) << " ("
     << plan.mesh().size() << " devices); with an optimizer's slots, each slot adds "
     << human_bytes(trainable_per_device) << " per device\n";
}

void Network::summary(std::ostream& os) const {
  const size_t w1 = 33, w2 = 24, w3 = 15;
  os << "Model: \"" << name_ << "\"\n";
  os << "┏" << rep("━", w1) << "┳" << rep("━", w2) << "┳" << rep("━", w3) << "┓\n";
  os << "┃" << pad(" Layer (type)", w1) << "┃" << pad(" Output Shape", w2) << "┃"
     << pad("Param # ", w3, true) << "┃\n";
  os << "┡" << rep("━", w1) << "╇" << rep("━", w2) << "╇" << rep("━", w3) << "┩\n";
  // One row per layer call, skipping Sequential's InputLayer like Keras.
  std::vector<std::pair<std::string, std::string>> rows;
  std::vector<int64_t> params;
  std::set<Layer*> seen;
  bool sequential = name_.rfind("sequential", 0) == 0;
  // Reconstruct call order from outputs (same order as layers_).
  std::vector<const LayerCall*> calls;
  std::set<const LayerCall*> cs;
  std::function<void(const LayerCall*)> visit = [&](const LayerCall* c) {
    if (cs.count(c)) return;
    cs.insert(c);
    for (auto& in : c->inputs) visit(in.call.get());
    calls.push_back(c);
  };
  for (auto& o : outputs_) visit(o.call.get());
  for (const LayerCall* c : calls) {
    if (c->inputs.empty() && sequential) continue;
    std::string shape = c->outputs.size() == 1 ? c->outputs[0].shape.str() : "(multiple)";
    rows.push_back({" " + c->layer->name() + " (" + c->layer->class_name() + ")", " " + shape});
    params.push_back(seen.insert(c->layer.get()).second ? c->layer->count_params() : 0);
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i) os << "├" << rep("─", w1) << "┼" << rep("─", w2) << "┼" << rep("─", w3) << "┤\n";
    os << "│" << pad(rows[i].first, w1) << "│" << pad(rows[i].second, w2) << "│"
       << pad(with_commas(params[i]) + " ", w3, true) << "│\n";
  }
  os << "└" << rep("─", w1) << "┴" << rep("─", w2) << "┴" << rep("─", w3) << "┘\n";
  int64_t total = count_params(), trainable = 0;
  for (auto& v : trainable_weights()) trainable += v->value.numel();
  os << " Total params: " << with_commas(total) << " (" << human_bytes(4.0 * total) << ")\n";
  os << " Trainable params: " << with_commas(trainable) << " (" << human_bytes(4.0 * trainable)
     << ")\n";
  os << " Non-trainable params: " << with_commas(total - trainable) << " ("
     << human_bytes(4.0 * (total - trainable)) << ")\n";
  if (std::shared_ptr<const ShardingPlan> plan = sharding_plan())
    summary_layouts(*plan, weights(), os);
}

void Network::summary() const { summary(std::cout); }

}  // namespace lockstep
