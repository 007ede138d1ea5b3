// keras.applications backbones: the same architecture, layer names, classes, configs and weight
// shapes, in the same order, as Keras 3 builds them, so each side's weight files and .keras files
// load into the other's model. Weights start random (Keras's weights=None); load pretrained ones
// with the model's weight loaders.
//   Model base = applications::MobileNetV2({.include_top = false, .input_shape = {96, 96, 3},
//                                           .pooling = "avg"});
#pragma once
#include <string>
#include <vector>

#include "lockstep/trainers/model.h"

namespace lockstep::applications {

/// The keyword arguments every backbone takes (Keras's names and defaults).
struct Options {
  bool include_top = true;                ///< the classifier (pooling + Dense "predictions")
  std::vector<int64_t> input_shape = {};  ///< (H, W, C); empty = (224, 224, 3)
  std::string pooling;                    ///< without the top: "" (4-D output), "avg" or "max"
  int64_t classes = 1000;                 ///< the classifier's units (include_top only)
  std::string classifier_activation =
      "softmax";       ///< the classifier's activation ("linear": logits)
  double alpha = 1.0;  ///< MobileNetV2's width multiplier (0.35, 0.5, 0.75, 1.0, 1.3, 1.4, ...)
  std::string name;    ///< "" = Keras's model name ("mobilenetv2_1.00_224", "resnet50", ...)
};

/// keras.applications.MobileNetV2: inverted residual blocks with ReLU(6); input >= 32 x 32.
Model MobileNetV2(Options o = {});
/// keras.applications.ResNet50 (v1, biased convolutions, BatchNormalization epsilon 1.001e-5).
Model ResNet50(Options o = {});
/// keras.applications.EfficientNetB0, with its preprocessing (Rescaling(1/255) and an adaptable
/// Normalization) and swish activations.
Model EfficientNetB0(Options o = {});

/// keras.applications.<model>.preprocess_input as layers of a model, on 0..255 RGB pixels (the
/// images a Keras user hands preprocess_input), named "preprocess":
/// - MobileNetV2 ("tf" mode): Rescaling(1/127.5, -1), pixels to [-1, 1];
/// - ResNet50 ("caffe" mode): RGB to BGR, then the ImageNet means subtracted (103.939, 116.779,
///   123.68 in BGR order), no scaling: one frozen float32 1x1 Conv2D (kernel = the channel
///   reversal, bias = minus the means), which Keras and ONNX read as an ordinary Conv2D;
/// - EfficientNetB0: x itself (the model rescales and normalises inside).
/// `model` as by_name spells it; x must have 3 channels last.
KTensor preprocess_input(const std::string& model, const KTensor& x);

/// The backbone named `name` ("MobileNetV2", "ResNet50", "EfficientNetB0"; case-insensitive,
/// "mobilenet_v2" and "efficientnet_b0" too); an error lists the names.
Model by_name(const std::string& name, Options o = {});
/// The backbones by_name knows (Keras's spelling).
std::vector<std::string> names();

}  // namespace lockstep::applications
