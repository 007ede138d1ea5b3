// The backbones' shared parts (common.h) and by_name / names.
#include "applications/common.h"

#include <algorithm>
#include <cctype>

namespace lockstep::applications {
namespace detail {

std::vector<int64_t> input_shape(const Options& o, const char* model, int64_t min_size) {
  std::vector<int64_t> s =
      o.input_shape.empty() ? std::vector<int64_t>{224, 224, 3} : o.input_shape;
  LS_CHECK(s.size() == 3, model, ": input_shape must be (height, width, channels), got ",
           Shape(s).str());
  LS_CHECK(s[0] >= min_size && s[1] >= min_size && s[2] > 0, model,
           ": input size must be at least ", min_size, "x", min_size,
           "; got input_shape=", Shape(s).str());
  LS_CHECK(o.pooling.empty() || o.pooling == "avg" || o.pooling == "max", model,
           ": pooling must be \"\" (none), \"avg\" or \"max\", got \"", o.pooling, "\"");
  LS_CHECK(o.classes > 0, model, ": classes must be positive, got ", o.classes);
  return s;
}

std::vector<int64_t> correct_pad(const KTensor& x, int64_t k) {
  const Shape& s = x.shape();
  int64_t adjust_h = s[1] < 0 ? 1 : 1 - s[1] % 2, adjust_w = s[2] < 0 ? 1 : 1 - s[2] % 2;
  return {k / 2 - adjust_h, k / 2, k / 2 - adjust_w, k / 2};
}

KTensor top(KTensor x, const Options& o, const std::string& avg_name, const std::string& max_name,
            double dropout_rate, const std::string& dense_init) {
  if (o.include_top) {
    x = layers::GlobalAveragePooling2D(false, avg_name)(x);
    if (dropout_rate > 0) x = layers::Dropout(dropout_rate, 0, "top_dropout")(x);
    return layers::Dense(o.classes, {.activation = o.classifier_activation,
                                     .kernel_initializer = dense_init,
                                     .name = "predictions"})(x);
  }
  if (o.pooling == "avg") return layers::GlobalAveragePooling2D(false, avg_name)(x);
  if (o.pooling == "max") return layers::GlobalMaxPooling2D(false, max_name)(x);
  return x;
}

}  // namespace detail

namespace {
std::string squash(std::string s) {
  std::string r;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c)))
      r.push_back(char(std::tolower(static_cast<unsigned char>(c))));
  return r;
}
}  // namespace

std::vector<std::string> names() { return {"MobileNetV2", "ResNet50", "EfficientNetB0"}; }

namespace {
// `name` squashed ("mobilenetv2", "resnet50", "efficientnetb0"); an error lists names().
std::string known_name(const std::string& name, const char* caller) {
  const std::string n = squash(name);
  std::string known;
  for (const auto& k : names()) {
    if (squash(k) == n) return n;
    known += (known.empty() ? "" : ", ") + k;
  }
  LS_FAIL(caller, ": unknown application '", name, "'; Lockstep builds ", known);
}
}  // namespace

Model by_name(const std::string& name, Options o) {
  const std::string n = known_name(name, "applications::by_name");
  if (n == "mobilenetv2") return MobileNetV2(std::move(o));
  if (n == "resnet50") return ResNet50(std::move(o));
  return EfficientNetB0(std::move(o));
}

KTensor preprocess_input(const std::string& model, const KTensor& x) {
  const std::string n = known_name(model, "applications::preprocess_input");
  const Shape& s = x.shape();
  LS_CHECK(s.rank() == 4 && s[3] == 3, "preprocess_input(", model,
           "): expects RGB images [N, H, W, 3], got ", s.str());
  if (n == "mobilenetv2") return layers::Rescaling(1.0 / 127.5, -1.0, "preprocess")(x);
  if (n == "efficientnetb0") return x;
  // caffe: y[..., c] = x[..., 2 - c] - mean_bgr[c], exactly (the other taps are zeros).
  LayerHandle caffe = layers::Conv2D(3, 1, {.name = "preprocess"});
  caffe->set_dtype_policy("float32");
  KTensor y = caffe(x);
  caffe->trainable = false;
  const auto& w = caffe->weights();  // kernel [1, 1, 3, 3] (HWIO), bias [3]
  float* kernel = w[0]->value.data<float>();
  float* bias = w[1]->value.data<float>();
  const float mean_bgr[3] = {103.939f, 116.779f, 123.68f};
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 3; ++i) kernel[i * 3 + c] = i == 2 - c ? 1.f : 0.f;
    bias[c] = -mean_bgr[c];
  }
  return y;
}

}  // namespace lockstep::applications
