// SummaryWriter: TensorBoard event files as TFRecords of Event protobufs (src/callbacks/proto).
#include "lockstep/callbacks/summary_writer.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "event.pb.h"
#include "lockstep/core/error.h"

namespace lockstep::tensorboard {

namespace pb = ::lockstep::tensorboard;  // the generated messages share this namespace

namespace {

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "localhost";
  return buf;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  const auto& table = crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

std::string tfrecord(const std::string& payload) {
  auto le = [](uint64_t v, int bytes) {
    std::string s;
    for (int i = 0; i < bytes; ++i) s += char((v >> (8 * i)) & 0xFF);
    return s;
  };
  const std::string length = le(payload.size(), 8);
  return length + le(masked_crc32c(length.data(), length.size()), 4) + payload +
         le(masked_crc32c(payload.data(), payload.size()), 4);
}

struct SummaryWriter::Impl {
  std::string path;
  std::ofstream out;

  void write(pb::Event& event) {
    if (event.wall_time() == 0) event.set_wall_time(now_seconds());
    std::string bytes;
    LS_CHECK(event.SerializeToString(&bytes), "TensorBoard: cannot serialise an event for '", path,
             "'");
    const std::string record = tfrecord(bytes);
    out.write(record.data(), std::streamsize(record.size()));
    LS_CHECK(out.good(), "TensorBoard: writing '", path, "' failed (disk full?)");
  }
  pb::Summary::Value* value(pb::Event& event, const std::string& tag, int64_t step) {
    event.set_step(step);
    pb::Summary::Value* v = event.mutable_summary()->add_value();
    v->set_tag(tag);
    return v;
  }
};

SummaryWriter::SummaryWriter(const std::string& dir) : impl_(std::make_unique<Impl>()) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  LS_CHECK(fs::is_directory(dir), "TensorBoard: cannot create the log folder '", dir, "'",
           ec ? ": " + ec.message() : std::string());
  static std::atomic<int> counter{0};
  const long long seconds = static_cast<long long>(now_seconds());
  impl_->path =
      (fs::path(dir) / ("events.out.tfevents." + std::to_string(seconds) + "." + host_name() + "." +
                        std::to_string(getpid()) + "." + std::to_string(counter++) + ".v2"))
          .string();
  impl_->out.open(impl_->path, std::ios::binary | std::ios::trunc);
  LS_CHECK(impl_->out.good(), "TensorBoard: cannot write '", impl_->path, "'");
  pb::Event version;
  version.set_file_version("brain.Event:2");
  impl_->write(version);
  flush();
}

SummaryWriter::~SummaryWriter() {
  if (impl_ && impl_->out.is_open()) impl_->out.flush();
}

void SummaryWriter::scalar(const std::string& tag, double value, int64_t step) {
  pb::Event e;
  impl_->value(e, tag, step)->set_simple_value(float(value));
  impl_->write(e);
}

void SummaryWriter::histogram(const std::string& tag, const std::vector<float>& values,
                              int64_t step, int buckets) {
  LS_CHECK(buckets >= 1, "TensorBoard histogram '", tag, "': buckets must be >= 1, got ", buckets);
  pb::Event e;
  pb::HistogramProto* h = impl_->value(e, tag, step)->mutable_histo();
  double lo = 0, hi = 0, sum = 0, sum_squares = 0;
  if (!values.empty()) {
    auto [mn, mx] = std::minmax_element(values.begin(), values.end());
    lo = *mn;
    hi = *mx;
  }
  std::vector<double> counts(size_t(buckets), 0.0);
  const double width = (hi - lo) / buckets;
  for (float v : values) {
    sum += v;
    sum_squares += double(v) * v;
    int b = width > 0 ? int(std::ceil((v - lo) / width)) - 1 : 0;  // (left, right] buckets
    counts[size_t(std::clamp(b, 0, buckets - 1))] += 1;
  }
  h->set_min(lo);
  h->set_max(hi);
  h->set_num(double(values.size()));
  h->set_sum(sum);
  h->set_sum_squares(sum_squares);
  for (int i = 0; i < buckets; ++i) {
    h->add_bucket_limit(i + 1 == buckets ? hi : lo + width * (i + 1));
    h->add_bucket(counts[size_t(i)]);
  }
  impl_->write(e);
}

namespace {

void string_tensor(pb::Summary::Value* v, const std::string& s, const std::string& plugin,
                   const std::string& content) {
  pb::TensorProto* t = v->mutable_tensor();
  t->set_dtype(pb::DT_STRING);
  t->mutable_tensor_shape();  // a scalar
  t->add_string_val(s);
  auto* data = v->mutable_metadata()->mutable_plugin_data();
  data->set_plugin_name(plugin);
  data->set_content(content);
}

}  // namespace

void SummaryWriter::text(const std::string& tag, const std::string& markdown, int64_t step) {
  pb::Event e;
  string_tensor(impl_->value(e, tag, step), markdown, "text", "");
  impl_->write(e);
}

void SummaryWriter::keras_model(const std::string& tag, const std::string& model_json,
                                int64_t step) {
  pb::Event e;
  string_tensor(impl_->value(e, tag, step), model_json, "graph_keras_model", "1");
  impl_->write(e);
}

void SummaryWriter::flush() {
  impl_->out.flush();
  LS_CHECK(impl_->out.good(), "TensorBoard: flushing '", impl_->path, "' failed (disk full?)");
}

const std::string& SummaryWriter::path() const { return impl_->path; }

}  // namespace lockstep::tensorboard
