// Thread replicas: how fit() splits a training step over the cores of one CPU.
//
// By default a compiled step splits every kernel over the OpenMP threads, so each layer hands
// half of its output to the other thread's next kernel. On this project's 2-vCPU Zen 4 VM the
// host sometimes places the two vCPUs on different CCDs (no shared L3), and that exchange then
// runs at ~95 GB/s against ~260 GB/s; MobileNetV2's 96x96 training step lost 25-30% in that state
// (231-235 against 290-313 img/s, docs/benchmarks.md). Thread replicas split the batch instead:
// replica r (one per OpenMP thread, each with a team of one) runs the whole step on its rows,
// so its activations stay in its own core's caches from layer to layer; the gradients are
// summed in process (the MirroredStrategy machinery, lockstep/distribute/strategy.h), every
// replica applies the same update, and every BatchNormalization pools its batch statistics
// over the replicas (batch_norm_train's "group" attribute: a few doubles per channel through a
// ReplicaExchange), so the step computes what one replica on the whole batch computes, up to
// the order of floating-point sums. A batch with fewer rows than replicas runs on one program
// of the whole model (FitLoop::stage_alone).
//
// fit() uses them when all of these hold:
//   - the model has no strategy and op determinism is off (lockstep/core/config.h);
//   - it is compiled for the cpu backend, not run_eagerly;
//   - more than one OpenMP thread, no enclosing parallel region;
//   - each replica gets at least kMinThreadReplicaRows rows of a batch (an array batch's size;
//     a Dataset's is taken as kAssumedBatchRows, Keras's default);
//   - its activations outweigh its trainable parameters: a replica's rows times the elements a
//     row writes through the layers are at least kActivationsPerParameter times the trainable
//     parameters. Each replica repeats the optimizer update, and the gradients are summed once
//     per step: a cost in parameters, against a gain in activations. Measured at 2 threads:
//     the reference CNN (1.2M parameters, ~86K elements a row, 64 rows a replica: 4.6) lost
//     10%; MobileNetV2 and EfficientNetB0 at 96x96 (16 rows a replica) and the bench ResNet
//     gained or held, and a frozen backbone (a head's few parameters) is the extreme case;
//   - config::thread_replicas() (lockstep/core/config.h) is not 1 (off); N >= 2 asks for N
//     replicas instead of one per thread.
#pragma once
#include <cstdint>

#include "lockstep/trainers/model.h"
#include "trainers/compile_resolution.h"

namespace lockstep {

inline constexpr int64_t kMinThreadReplicaRows = 8;
inline constexpr int64_t kAssumedBatchRows = 32;
inline constexpr double kActivationsPerParameter = 8;

// The replica count fit() should use (1: none); batch_rows < 0 when the batch size is not known.
int fit_thread_replicas(const Model& model, const ResolvedCompile& resolved, bool has_strategy,
                        int64_t batch_rows);

}  // namespace lockstep
