// The activations a producer op can apply to its own output (conv2d's, batch_norm_*'s and
// max_pool2d_grad's "activation" attribute): one enum that every kernel and lowering switches
// over, so a backend that misses one fails to compile (-Werror=switch). Which op each one is, and
// which producers take it, is declared with the ops (OpDef::fused_as, OpDef::takes_activations);
// the fusion passes read those declarations, never a list of names.
#pragma once
#include <cstdint>
#include <string>

namespace lockstep {

/// An activation fused into the op that produces its input ("linear": none).
enum class FusedActivation : uint8_t {
  linear,   ///< y
  relu,     ///< max(y, 0)
  relu6,    ///< min(max(y, 0), 6)
  sigmoid,  ///< 1 / (1 + e^-y)
  swish,    ///< y * sigmoid(y)
  gelu,     ///< y * Phi(y), the erf form (approximate=false)
};

/// Every FusedActivation, in declaration order.
inline constexpr FusedActivation kAllFusedActivations[] = {
    FusedActivation::linear,  FusedActivation::relu,  FusedActivation::relu6,
    FusedActivation::sigmoid, FusedActivation::swish, FusedActivation::gelu};

/// A set of fused activations (OpDef::takes_activations), one bit each.
using FusedActivationSet = uint32_t;
/// The set holding `a` alone.
constexpr FusedActivationSet bit(FusedActivation a) { return 1u << unsigned(a); }
/// Whether set `s` holds `a`.
constexpr bool holds(FusedActivationSet s, FusedActivation a) { return (s & bit(a)) != 0; }

/// "relu": the attribute value that stands for `a`: the name of the op declared as it
/// (OpDef::fused_as); "linear" for none.
const char* fused_activation_name(FusedActivation a);
/// The activation attribute value `name` stands for; an error listing the valid ones otherwise.
FusedActivation fused_activation_named(const std::string& name);
/// "\"linear\", \"relu\" or \"swish\"": the names in set `s`, for docs and errors.
std::string fused_activation_names(FusedActivationSet s);

}  // namespace lockstep
