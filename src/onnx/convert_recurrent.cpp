// LSTM and GRU as ONNX's LSTM and GRU operators (layout 0, time-major, between Transposes:
// onnxruntime runs no other). Keras's kernel (features, G units) and recurrent kernel (units,
// G units) become ONNX's W (1, G units, features) and R (1, G units, units), the gates
// reordered from Keras's LSTM i, f, c, o to ONNX's i, o, f, c (GRU's z, r, h are the same in
// both); the bias becomes B = (input bias, recurrent bias): GRU reset_after=True is ONNX's
// linear_before_reset=1 with Keras's two biases, the others have no recurrent bias.
// go_backwards is direction "reverse", whose sequence ONNX keeps in input order: a Slice flips
// it to Keras's processing order. A Keras mask has no ONNX form here (ONNX's sequence_lens would
// cover trailing padding only): refused by name.
#include <limits>

#include "onnx/onnx_graph.h"

namespace lockstep::onnx {
namespace {

// Keras (rows, G * H) -> ONNX (G * H, rows), ONNX gate j from Keras gate perm[j].
std::vector<float> to_onnx(const std::vector<float>& src, int64_t rows, int64_t G, int64_t H,
                           const int* perm) {
  std::vector<float> dst(src.size());
  for (int64_t j = 0; j < G; ++j)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t r = 0; r < rows; ++r)
        dst[size_t((j * H + h) * rows + r)] = src[size_t(r * G * H + perm[j] * H + h)];
  return dst;
}

// ONNX's B: (input bias, recurrent bias), each G * H, in ONNX's gate order.
std::vector<float> onnx_bias(const ConvertCall& c, int64_t G, int64_t H, const int* perm,
                             bool two_biases) {
  std::vector<float> out(size_t(2 * G * H), 0.f);
  const Tensor* b = find_weight(c.layer(), "bias");
  if (!b) return out;
  const std::vector<float> v = b->to_vector();
  for (int half = 0; half < (two_biases ? 2 : 1); ++half)
    for (int64_t j = 0; j < G; ++j)
      for (int64_t h = 0; h < H; ++h)
        out[size_t(half * G * H + j * H + h)] = v[size_t(half * G * H + perm[j] * H + h)];
  return out;
}

std::string squeeze(GraphBuilder& b, const std::string& x, int64_t axis, const std::string& base) {
  return b.add("Squeeze", {x, b.constant_i64(base + "/axes", {axis})}, base);
}

// (a, b, c) -> (b, a, c).
std::string transpose_nt(GraphBuilder& b, const std::string& x, const std::string& base) {
  pb::NodeProto& t = b.node("Transpose", {x}, base);
  set_attr(t, "perm", std::vector<int64_t>{1, 0, 2});
  return t.output(0);
}

// y[:, ::-1] along axis 1.
std::string flip_time(GraphBuilder& b, const std::string& x, const std::string& base) {
  return b.add("Slice",
               {x, b.constant_i64(base + "/starts", {-1}),
                b.constant_i64(base + "/ends", {std::numeric_limits<int64_t>::min()}),
                b.constant_i64(base + "/axes", {1}), b.constant_i64(base + "/steps", {-1})},
               base);
}

void check_exportable(const ConvertCall& c) {
  const json& cfg = c.config;
  if (cfg.value("activation", "tanh") != "tanh" ||
      cfg.value("recurrent_activation", "sigmoid") != "sigmoid")
    unsupported(c, "only activation tanh and recurrent_activation sigmoid have ONNX defaults");
  for (const KTensor& in : c.call.inputs)
    if (in.masked())
      unsupported(c,
                  "its input carries a Keras mask, which the exported LSTM/GRU cannot skip "
                  "steps by; export a model without the mask");
}

std::vector<OnnxValue> recurrent(ConvertCall& c, bool lstm) {
  check_exportable(c);
  const json& cfg = c.config;
  const int64_t H = cfg.at("units").get<int64_t>(), G = lstm ? 4 : 3;
  const bool reset_after = !lstm && cfg.value("reset_after", true);
  static const int kLstm[4] = {0, 3, 1, 2}, kGru[3] = {0, 1, 2};
  const int* perm = lstm ? kLstm : kGru;
  const Tensor& k = weight(c.layer(), "kernel");
  const Tensor& rk = weight(c.layer(), "recurrent_kernel");
  const int64_t F = k.dim(0);
  GraphBuilder& b = c.b;
  const std::string n = c.name();
  // ONNX's time-major layout 0 (onnxruntime runs no other): x (N, T, F) -> (T, N, F).
  const std::string x =
      transpose_nt(b, b.to_layout(c.inputs.at(0), Layout::kChannelsLast).name, n + "/time_major");
  const std::string W = b.constant(n + "/W", to_onnx(k.to_vector(), F, G, H, perm), {1, G * H, F});
  const std::string R = b.constant(n + "/R", to_onnx(rk.to_vector(), H, G, H, perm), {1, G * H, H});
  const std::string B = b.constant(n + "/B", onnx_bias(c, G, H, perm, reset_after), {1, 2 * G * H});
  std::vector<std::string> outs;
  {
    pb::NodeProto& node = b.node(lstm ? "LSTM" : "GRU", {x, W, R, B}, n, lstm ? 3 : 2);
    set_attr(node, "hidden_size", H);
    set_attr(node, "direction",
             std::string(cfg.value("go_backwards", false) ? "reverse" : "forward"));
    if (!lstm) set_attr(node, "linear_before_reset", int64_t(reset_after ? 1 : 0));
    for (int i = 0; i < node.output_size(); ++i) outs.push_back(node.output(i));
  }
  std::vector<OnnxValue> result;
  std::string y;
  if (cfg.value("return_sequences", false)) {
    y = transpose_nt(b, squeeze(b, outs[0], 1, n + "/y"), n + "/batch_major");  // (T, 1, N, H)
    if (cfg.value("go_backwards", false)) y = flip_time(b, y, n + "/flip");
  } else {
    y = squeeze(b, outs[1], 0, n + "/y");  // Y_h (1, N, H): the step processed last
  }
  result.push_back(c.output(y, Layout::kChannelsLast, 0));
  if (cfg.value("return_state", false))
    for (size_t s = 1; s < outs.size(); ++s)
      result.push_back(
          c.output(squeeze(b, outs[s], 0, n + "/state"), Layout::kChannelsLast, int(s)));
  return result;
}

}  // namespace

void add_recurrent_converters(ConverterTable& t) {
  t["LSTM"] = [](ConvertCall& c) { return recurrent(c, true); };
  t["GRU"] = [](ConvertCall& c) { return recurrent(c, false); };
}

}  // namespace lockstep::onnx
