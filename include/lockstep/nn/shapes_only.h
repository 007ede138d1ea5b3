// Building a model for its shapes only (`lockstep summary` of a model JSON): the layers, their
// output shapes and parameter counts, without the cost of the weights' values.
#pragma once

namespace lockstep {

/// While one is alive on this thread, Layer::add_weight gives each new weight storage that is
/// reserved but never written (no initializer runs, no page is touched), so building a model
/// from a config with one huge Dense costs neither the time nor the memory of its weights. Only
/// the weights' shapes may be read: their values are garbage. Scopes nest.
class ShapesOnlyScope {
 public:
  ShapesOnlyScope();
  ~ShapesOnlyScope();
  ShapesOnlyScope(const ShapesOnlyScope&) = delete;
  ShapesOnlyScope& operator=(const ShapesOnlyScope&) = delete;

 private:
  bool previous_;
};

}  // namespace lockstep
