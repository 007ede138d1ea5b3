// The small Vision Transformer of `flowers --model vit` (shared with bench/transformer_bench.cpp
// so both measure the same model), in the shape of Keras's "Image classification with Vision
// Transformer" example: non-overlapping patch x patch patches embedded to `dim` features by a
// Conv2D with stride = patch, plus a learned position embedding (KerasHub's PositionEmbedding);
// `depth` pre-norm encoder blocks (KerasHub's TransformerEncoder with normalize_first:
// x + MHA(LN(x)), then x + MLP(LN(x)), a GELU MLP of mlp_dim; attention is the fused
// scaled_dot_product_attention op); a last layer norm, the mean over the patches and a Dense
// head (logits). With augment, the flowers CNN's augmentation layers come first.
#pragma once
#include <optional>
#include <string>

#include "lockstep/lockstep.h"
#include "lockstep/nn/keras_hub.h"
#include "lockstep/nn/layers_1d.h"

/// vision_transformer's hyperparameters (the defaults train on 2 cores in minutes).
struct VitOptions {
  int image_size = 64;    ///< square inputs [image_size, image_size, channels], pixels 0..255
  int channels = 3;       ///< input channels
  int classes = 10;       ///< logits
  int patch = 8;          ///< patch side (divides image_size): (image_size / patch)^2 tokens
  int64_t dim = 128;      ///< the token width
  int64_t depth = 4;      ///< encoder blocks
  int64_t heads = 4;      ///< attention heads (dim / heads each)
  int64_t mlp_dim = 256;  ///< the blocks' MLP width
  bool augment = true;    ///< RandomFlip, RandomRotation and RandomZoom first (training only)
  uint64_t seed = 123;    ///< the augmentation's seeds
};

// docs: begin vit
inline lockstep::Model vision_transformer(const VitOptions& o = {}) {
  namespace ls = lockstep;
  using namespace ls::layers;
  LS_CHECK(o.patch > 0 && o.image_size % o.patch == 0, "vision_transformer: image size ",
           o.image_size, " is not a multiple of the patch size ", o.patch);
  const int64_t side = o.image_size / o.patch, patches = side * side;
  ls::KTensor in = Input({o.image_size, o.image_size, o.channels});
  ls::KTensor x = in;
  if (o.augment) {
    x = RandomFlip("horizontal", o.seed)(x);
    x = RandomRotation(0.1, {.seed = o.seed + 1})(x);
    x = RandomZoom(0.1, std::nullopt, {.seed = o.seed + 2})(x);
  }
  x = Rescaling(1.0 / 255)(x);
  x = Conv2D(o.dim, o.patch, {.strides = {o.patch, o.patch}, .name = "patch_embedding"})(x);
  x = Reshape({patches, o.dim}, "patches")(x);  // [N, patches, dim]
  ls::KTensor positions =
      ls::keras_hub::PositionEmbedding(patches, "glorot_uniform", "position_embedding")(x);
  x = Add("add_positions")({x, positions})[0];
  for (int64_t i = 0; i < o.depth; ++i)
    x = ls::keras_hub::TransformerEncoder(o.mlp_dim, o.heads,
                                          {.activation = "gelu",
                                           .layer_norm_epsilon = 1e-6,
                                           .normalize_first = true,
                                           .name = "encoder_" + std::to_string(i)})(x);
  x = LayerNormalization({.epsilon = 1e-6, .name = "final_norm"})(x);
  x = GlobalAveragePooling1D(false, "mean_over_patches")(x);
  return ls::Model(in, Dense(o.classes, {.name = "head"})(x), "flowers_vit");
}
// docs: end vit
