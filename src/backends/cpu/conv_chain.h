// The cpu backend's conv-pair fusion (run after the op fusions, before the layouts): a 1x1
// conv2d whose output only a 3x3 depthwise conv2d reads (MobileNetV2's and EfficientNet's
// expansion -> depthwise, batch norms folded) becomes one conv2d_pointwise_depthwise node, which
// oneDNN runs as the 1x1 convolution with a depthwise post-op: the rows of the expanded
// activation are convolved while still in cache and never written to memory. Where the
// expanded activation is large that saves more than the fused kernel costs; where it fits in
// the cache the separate convolutions are as fast or faster (96x96 EfficientNetB0 / MobileNetV2
// at batch 32: 28 MB at 48x48 saves 1-2 ms of ~5; 10 MB at 24x24 does not), so the pass fuses
// pairs whose intermediate is at least LOCKSTEP_DW_FUSION_BYTES (default 16 MiB; 0: every pair
// oneDNN fuses; -1: none) and that oneDNN computes fused (pointwise_depthwise_impl). float32 only
// (oneDNN's bfloat16 1x1 kernel with the post-op, jit_bf16_1x1, ran the 48x48 pair in 3.4-3.6
// ms against 2.9-3.0 ms for the two bf16 convolutions); the pair must need no gradient (inference,
// or a frozen backbone), which holds when the depthwise conv is the 1x1 conv's only reader.
#pragma once
#include <string>
#include <vector>

#include "lockstep/graph/graph.h"
#include "ops/internal/nn_geometry.h"

namespace lockstep::cpu {

void fuse_pointwise_depthwise(Graph& g, std::vector<Value>& outputs,
                              std::vector<std::string>& report);

// Whether depthwise conv d has a geometry oneDNN's depthwise post-op computes: a square filter,
// one stride, no dilation, equal top and left pads and the output ceil(input / stride) (the
// post-op's rule; the bottom and right pads follow from it).
bool dw_post_op_geometry(const ops::ConvGeom& d);

// The implementation oneDNN picks for the pair (conv_kernels.cpp), empty when it takes none:
// "jit_1x1:..." computes the depthwise conv from the 1x1's rows in cache; where oneDNN judges
// the intermediate small (its own cache estimate), or the channels are not whole 16-channel
// blocks, it picks "ref_fused_convolution:...", which runs the two convolutions one after the
// other through a buffer, and the pass leaves such a pair alone.
std::string pointwise_depthwise_impl(const ops::PointwiseDepthwise& g);

// The pass's question for one pair, which tests ask too: the implementation oneDNN takes for the
// fused pair (pointwise_depthwise_impl) of x [N, H, W, C], 1x1 filter w1 [1, 1, C, M] and
// depthwise filter wd [kh, kw, 1, M], attrs those of conv2d_pointwise_depthwise (activation,
// dw_activation, dw_strides, dw_pads); empty when it takes none, or when the test hook
// (force_no_fused_pair_impl, or LOCKSTEP_DW_FUSION_IMPL=none) says none. The answer depends on
// the CPU and on oneDNN's own heuristics (cache sizes): on a 2-core Xeon with AMX it takes only
// ref_fused_convolution for pairs a Zen 4/5 runs as jit_1x1.
std::string fused_pair_impl(const Shape& x, const Shape& w1, const Shape& wd, const Attrs& attrs);

// Whether the pass fuses a pair oneDNN answers `impl` for: any implementation but a reference one.
bool fuses_with(const std::string& impl);

// Test hook: while set, fused_pair_impl answers "none" for every pair, as oneDNN does on a CPU
// that has no fused kernel for it, so both branches of the pass run on every machine.
void force_no_fused_pair_impl(bool none);

// The condition CPU-dependent tests name in their output: oneDNN's version, the instruction set
// it runs (after ONEDNN_MAX_CPU_ISA) and the CPU's model name.
std::string onednn_condition();

// Whether oneDNN offers a Winograd convolution here (a float32 3x3 probe; its Winograd kernels
// need AVX-512): where it does not, the conv kernels run direct (conv_kernels.cpp).
bool onednn_offers_winograd();

// Whether a conv2d's fused swish runs as oneDNN's eltwise post-op (LOCKSTEP_CONV_SWISH=onednn,
// for A/B runs) rather than Lockstep's pass over the output (conv_kernels.cpp, the default).
// With the pass, a pair with a swish stays apart: oneDNN's fused kernel would apply the slow
// post-op to the whole expanded activation (EfficientNetB0's block2a at 96x96, batch 32: 3.4-3.6
// ms apart against 4.0 ms fused).
bool conv_swish_by_onednn();

}  // namespace lockstep::cpu
