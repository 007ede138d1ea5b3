// TensorBoard event files (tf.summary.create_file_writer's job): one file per writer,
// `<dir>/events.out.tfevents.<unix seconds>.<host>.<pid>.<n>.v2`, a sequence of TFRecords
// (uint64 length, masked CRC32C of the length, an Event protobuf, masked CRC32C of the data)
// that `tensorboard --logdir` and tensorboard's EventAccumulator read. The first record is
// the "brain.Event:2" version event. callbacks::TensorBoard (callback.h) writes these per run.
//
//   tensorboard::SummaryWriter w("logs/train");
//   w.scalar("epoch_loss", 0.42, /*step=*/3);
//   w.histogram("dense/kernel/histogram", kernel.to_vector(), 3);
//   w.flush();
//
// Records are appended and flushed by flush() and the destructor; a reader may watch the file
// while it grows (as TensorBoard does).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lockstep::tensorboard {

/// One TensorBoard event file (tf.summary.create_file_writer): scalars, histograms, text and
/// the Keras model graph, each at a step.
class SummaryWriter {
 public:
  /// Creates `dir` (and parents) and a new event file in it; errors name the folder.
  explicit SummaryWriter(const std::string& dir);
  ~SummaryWriter();
  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;

  /// A scalar (Summary.Value.simple_value: TensorBoard's Scalars dashboard).
  void scalar(const std::string& tag, double value, int64_t step);
  /// A histogram of `values` in `buckets` equal-width buckets from min to max (HistogramProto,
  /// as tf.summary.histogram's 30 buckets; TensorBoard's Histograms and Distributions).
  void histogram(const std::string& tag, const std::vector<float>& values, int64_t step,
                 int buckets = 30);
  /// Markdown text (the text plugin; a string tensor).
  void text(const std::string& tag, const std::string& markdown, int64_t step);
  /// A Keras model config as JSON (the "graph_keras_model" plugin: TensorBoard's Graphs
  /// dashboard draws the layer graph; Keras writes it under the tag "keras").
  void keras_model(const std::string& tag, const std::string& model_json, int64_t step);
  void flush();                     ///< writes buffered records to the file
  const std::string& path() const;  ///< the event file's path

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// CRC-32C (Castagnoli, iSCSI; reflected polynomial 0x82F63B78), continuing from `crc`:
/// crc32c("123456789") = 0xE3069283.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
/// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xA282EAD8.
uint32_t masked_crc32c(const void* data, size_t size);
/// One TFRecord around `payload` (length, masked CRC of the length, payload, masked CRC).
std::string tfrecord(const std::string& payload);

}  // namespace lockstep::tensorboard
