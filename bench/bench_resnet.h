// The small ResNet of the peer benchmark (bench/run_peer_bench.sh); bench/peers.py builds the
// same network in Keras and in PyTorch. 64x64x3 input, 10 classes:
//   stem   Conv2D(32, 3, strides 2, same, no bias) - BN - ReLU              -> 32x32x32
//   block  32 filters, stride 1 (identity shortcut)                         -> 32x32x32
//   block  64 filters, stride 2 (1x1 conv stride 2 + BN projection)         -> 16x16x64
//   block 128 filters, stride 2 (projection)                                ->  8x8x128
//   GlobalAveragePooling2D - Dense(10) (logits)
// A basic block: Conv3x3(stride) - BN - ReLU - Conv3x3 - BN, + shortcut, ReLU. 49.1 M
// multiply-adds per image forward (convolutions and the Dense layer).
#pragma once
#include "lockstep/lockstep.h"

inline lockstep::KTensor bench_resnet_block(lockstep::KTensor x, int64_t filters, int64_t stride) {
  using namespace lockstep::layers;
  const lockstep::layers::ConvOptions conv{
      .strides = {stride, stride}, .padding = "same", .use_bias = false};
  lockstep::KTensor h = Conv2D(filters, 3, conv)(x);
  h = BatchNormalization()(h);
  h = ReLU()(h);
  h = Conv2D(filters, 3, {.padding = "same", .use_bias = false})(h);
  h = BatchNormalization()(h);
  lockstep::KTensor shortcut = x;
  if (stride != 1 || x.shape()[-1] != filters) {
    shortcut = Conv2D(filters, 1, {.strides = {stride, stride}, .use_bias = false})(x);
    shortcut = BatchNormalization()(shortcut);
  }
  lockstep::KTensor sum = Add()({h, shortcut});
  return ReLU()(sum);
}

inline lockstep::Model bench_resnet() {
  using namespace lockstep::layers;
  lockstep::KTensor in = Input({64, 64, 3});
  lockstep::KTensor h =
      Conv2D(32, 3, {.strides = {2, 2}, .padding = "same", .use_bias = false})(in);
  h = BatchNormalization()(h);
  h = ReLU()(h);
  h = bench_resnet_block(h, 32, 1);
  h = bench_resnet_block(h, 64, 2);
  h = bench_resnet_block(h, 128, 2);
  h = GlobalAveragePooling2D()(h);
  return lockstep::Model(in, Dense(10)(h), "bench_resnet");
}
