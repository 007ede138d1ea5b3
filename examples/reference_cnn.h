// The reference CNN of the Fashion-MNIST job (shared by examples/fashion_mnist.cpp and
// bench/train_bench.cpp so both measure the same model).
#pragma once
#include "lockstep/lockstep.h"

inline lockstep::Model reference_cnn() {
  using namespace lockstep::layers;
  return lockstep::Sequential({
      Input({28, 28, 1}),
      Conv2D(32, 3, {.activation = "relu"}),
      Conv2D(64, 3, {.activation = "relu"}),
      MaxPooling2D({2, 2}),
      Dropout(0.25),
      Flatten(),
      Dense(128, {.activation = "relu"}),
      Dropout(0.5),
      Dense(10),
  });
}
