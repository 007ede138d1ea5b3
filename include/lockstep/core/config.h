// Process-wide switches (Keras's keras.config / tf.config names). Op determinism:
//
//   ls::config::enable_op_determinism();   // before fit(); keras.config.enable_op_determinism
//
// What the mode guarantees, and what it does not (README, "Deterministic training"):
//  (a) The same program, data, seeds and thread count give bit-identical weights on every run:
//      parallel Dataset stages (map, interleave) keep their input order even when asked not to
//      (deterministic = false is overridden), and a shuffle, list_files or image folder without
//      a seed is refused (a drawn seed would differ per run: pass one). Not promised: the same
//      bits under another thread count (oneDNN's and Lockstep's reductions split their sums by
//      thread).
//  (b) Random ops in the train step (dropout and the augmentation layers) draw from Philox
//      keyed by (seed, step, the example's global row in the global batch) instead of (seed,
//      step, replica, local row), so the same example gets the same mask and the same
//      transform however the global batch is split across replicas and workers. Runs with the
//      same number of replicas in sync and threads per replica are then bit-identical whether
//      the replicas share a process (MirroredStrategy) or not (MultiWorkerMirroredStrategy):
//      each replica computes the same gradient from the same rows, and a 2-way all-reduce does
//      not depend on the order of its terms.
//      Gradient shards make 1 replica x B bit-identical to 2 replicas x B/2 (in one process
//      or as 2 workers): enable_op_determinism({.shards = S}) (or
//      LOCKSTEP_DETERMINISTIC_SHARDS=S) fixes the reduction's structure. The global batch is
//      always cut into S equal shards (rows [s*B/S, (s+1)*B/S)); each shard's gradient comes
//      from a program for B/S rows, as a replica of an S-replica run computes it; the shard
//      gradients, each scaled by its share of the batch, are summed as a balanced binary tree
//      in shard order (sum(a, b) = sum(a, m) + sum(m, b), m = a + (b - a) / 2; for 4:
//      (g0 + g1) + (g2 + g3)). A run with R replicas in sync runs S/R shards one after another
//      on each replica, sums them with the same tree, and the 2-way all-reduce adds the two
//      halves. R must divide S and be 1 or 2 (more replicas: the all-reduce of more parts does
//      not follow the tree; refused), with a float32 all-reduce. The same threads per shard
//      are needed (a replica's threads), as ever. Loss and metrics are the unsharded ones up
//      to rounding. Costs: S/R smaller programs per step instead of one (less parallel work
//      per kernel, one compiled program and arena each) and copying the shard gradients.
//      BatchNormalization then normalises each shard with its own statistics (as each
//      replica does under MirroredStrategy; its moving statistics are averaged over the
//      shards at the end of each epoch); BatchNormalization({.synchronized = true}) cannot
//      run with shards one after another and is refused when a replica has more than one.
//      S = 0 (the default): as many shards as replicas in sync, the behaviour above, and
//      then not bit-identical: 1 replica x B against N replicas x B/N. The weight gradient is
//      a sum over the batch, and one program summing B rows rounds differently from N
//      programs summing B/N rows each plus an all-reduce adding the N parts; the difference
//      is float rounding (a few 1e-8 on the weights after a few steps of the tests' CNN,
//      against 1e-1 without the mode, where each replica draws its own masks).
//      Unsynchronised BatchNormalization differs for a real reason (per-replica statistics):
//      use BatchNormalization({.synchronized = true}).
//  (c) BackupAndRestore resumes a run killed in the middle of an epoch to the same bits as an
//      uninterrupted run: the backup holds the position (epoch, step), the optimizer's step
//      count that keys the random ops, and the model seed (a resume under another seed is
//      refused); with seeded shuffles the input pipeline is a pure function of (seeds, epoch,
//      position), so fit rebuilds it and fast-forwards it to the saved position: no batch is
//      trained on twice or skipped (the fast-forward does rerun the pipeline's maps for the
//      batches it passes).
// The mode is off by default; LOCKSTEP_DETERMINISTIC=1 or TF_DETERMINISTIC_OPS=1 in the
// environment turns it on at start-up. Its cost: README, "Deterministic training".
#pragma once
#include <optional>

namespace lockstep::config {

/// The most gradient shards a run may ask for.
inline constexpr int kMaxGradientShards = 1024;

/// Options of enable_op_determinism (the default, {}, takes the shard count from the
/// environment).
struct DeterminismOptions {
  /// Gradient shards S (see (b) above); 0: as many as replicas in sync. Unset:
  /// LOCKSTEP_DETERMINISTIC_SHARDS, else 0.
  std::optional<int> shards;
};

void enable_op_determinism();  ///< = enable_op_determinism({})
/// Turns the deterministic mode on for the whole process (keras.config.enable_op_determinism),
/// before compile/fit: see (a)-(c) above. An error when options.shards is outside
/// 0..kMaxGradientShards.
void enable_op_determinism(const DeterminismOptions& options);
/// Turns the mode off again (the default); programs compiled under it keep their behaviour.
void disable_op_determinism();
/// Whether the mode is on: enable_op_determinism was called, or LOCKSTEP_DETERMINISTIC /
/// TF_DETERMINISTIC_OPS was set at start-up (and disable_op_determinism has not been called).
bool op_determinism_enabled();
/// The gradient shards the mode uses (0: as many as replicas in sync): the last
/// enable_op_determinism's, else LOCKSTEP_DETERMINISTIC_SHARDS (an error when it is not a number
/// in 0..kMaxGradientShards), else 0.
int op_determinism_shards();

/// The algorithm of float32 3x3 stride-1 convolutions on the cpu backend (forward and both
/// backward passes). kAuto (the default): Winograd F(4x4, 3x3) where it is faster (at least 16
/// channels in and out, at least 512 output positions per batch), direct elsewhere; kWinograd:
/// Winograd wherever oneDNN takes the shape; kDirect: never Winograd. Winograd does 2.25x fewer
/// multiplies and rounds differently (about 1e-6 of a tensor's scale). Read when a program is
/// compiled: programs compiled earlier keep their kernels. LOCKSTEP_CONV_ALGORITHM=auto|winograd|
/// direct in the environment sets the start-up value (anything else is an error on first use).
enum class ConvAlgorithm { kAuto, kWinograd, kDirect };
/// Sets the algorithm for programs compiled from now on (overrides LOCKSTEP_CONV_ALGORITHM).
void set_conv_algorithm(ConvAlgorithm algorithm);
/// The algorithm in force: the last set_conv_algorithm's, else LOCKSTEP_CONV_ALGORITHM's
/// (an error when it is not auto, winograd or direct), else kAuto.
ConvAlgorithm conv_algorithm();

/// Thread replicas: fit() on the cpu backend may run a training step as one replica per OpenMP
/// thread, each on its share of the batch with a team of one, gradients summed in process and
/// BatchNormalization's statistics pooled over all of them (the same step, up to the order of
/// floating-point sums; when it does: src/trainers/thread_replicas.h). kAutoThreadReplicas (the
/// default): as many as OpenMP threads, where it applies; 1: never; N >= 2: N replicas, where it
/// applies. LOCKSTEP_TRAIN_THREAD_REPLICAS=N in the environment sets the start-up value (auto
/// when unset or empty; anything but a number in 0..1024 is an error on first use; 0 = auto).
/// Read at each fit().
inline constexpr int kAutoThreadReplicas = 0;
/// Sets the thread replicas of fits from now on: kAutoThreadReplicas, 1 (off) or 2..1024; an
/// error naming the value otherwise.
void set_thread_replicas(int replicas);
/// The setting in force: the last set_thread_replicas's, else the environment's, else auto.
int thread_replicas();

}  // namespace lockstep::config
