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
//      not depend on the order of its terms. Not bit-identical: 1 replica x B against N
//      replicas x B/N. The weight gradient is a sum over the batch, and one program summing B
//      rows rounds differently from N programs summing B/N rows each plus an all-reduce adding
//      the N parts; the difference is float rounding (a few 1e-8 on the weights after a few
//      steps of the tests' CNN, against 1e-1 without the mode, where each replica draws its own
//      masks). Unsynchronised BatchNormalization differs for a real reason (per-replica
//      statistics): use BatchNormalization({.synchronized = true}).
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

namespace lockstep::config {

void enable_op_determinism();
void disable_op_determinism();
bool op_determinism_enabled();

}  // namespace lockstep::config
