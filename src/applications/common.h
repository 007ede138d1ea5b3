// Helpers shared by the keras.applications backbones (src/applications/*.cpp): input
// shape defaults, Keras's correct_pad, the classifier top and the pooling of a headless base.
#pragma once
#include <string>
#include <vector>

#include "lockstep/applications/applications.h"
#include "lockstep/nn/layers.h"

namespace lockstep::applications::detail {

// o.input_shape, or (224, 224, 3); checks rank 3 and at least `min_size` pixels each side.
std::vector<int64_t> input_shape(const Options& o, const char* model, int64_t min_size);

// keras.applications.imagenet_utils.correct_pad: ((k/2 - 1 + h%2, k/2), (k/2 - 1 + w%2, k/2)),
// flattened as {top, bottom, left, right}, for a stride-2 "valid" convolution after it.
std::vector<int64_t> correct_pad(const KTensor& x, int64_t kernel_size);

// include_top: GlobalAveragePooling2D(pool_name) + [Dropout] + Dense(classes, "predictions");
// else the pooling ("avg" / "max" / none). dense_init: the classifier's kernel initializer.
KTensor top(KTensor x, const Options& o, const std::string& avg_name, const std::string& max_name,
            double dropout_rate = 0.0, const std::string& dense_init = "glorot_uniform");

}  // namespace lockstep::applications::detail
