// keras.callbacks.CSVLogger: the epoch logs as CSV rows (epoch first, then the sorted keys).
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/callbacks/callback.h"
#include "lockstep/core/error.h"

namespace lockstep {

namespace {

// Python's repr of a float (what Keras's csv writer prints): shortest round trip, ".0" on
// integral values, "nan" / "inf".
std::string python_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, end);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

class CSVLoggerCb : public Callback {
 public:
  CSVLoggerCb(std::string filename, std::string separator, bool append)
      : filename_(std::move(filename)), separator_(std::move(separator)), append_(append) {}

  void on_train_begin(const Logs&) override {
    write_header_ = true;
    if (append_) {
      std::ifstream existing(filename_);
      std::string first_line;
      if (existing && std::getline(existing, first_line)) write_header_ = first_line.empty();
    }
    file_.close();
    file_.clear();
    file_.open(filename_, append_ ? std::ios::app : std::ios::trunc);
    LS_CHECK(file_.good(), "CSVLogger: cannot open '", filename_, "' for writing");
    header_written_ = false;
  }

  void on_epoch_end(int epoch, const Logs& logs) override {
    if (!keys_) keys_ = columns(logs);
    if (!header_written_) {
      if (write_header_) {
        std::string header = field("epoch");
        for (auto& k : *keys_) header += separator_ + field(k);
        file_ << header << "\r\n";  // Python's csv module ends rows with \r\n
      }
      header_written_ = true;
    }
    std::string row = std::to_string(epoch);
    for (auto& k : *keys_) {
      auto it = logs.find(k);
      row += separator_ + (it == logs.end() ? std::string("NA") : python_float(it->second));
    }
    file_ << row << "\r\n";
    file_.flush();
    // A full disk (or --csv /dev/full) is an error, not epochs silently missing from the log.
    LS_CHECK(file_.good(), "CSVLogger: writing '", filename_, "' failed (", std::strerror(errno),
             "; is the disk full?)");
  }

  void on_train_end(const Logs&) override {
    if (!file_.is_open()) return;
    file_.close();
    LS_CHECK(!file_.fail(), "CSVLogger: closing '", filename_, "' failed (", std::strerror(errno),
             "; is the disk full?)");
  }

 private:
  // Sorted keys; without any "val_" key, a "val_" twin of each (Keras, for validation_freq).
  static std::vector<std::string> columns(const Logs& logs) {
    std::vector<std::string> keys;
    for (auto& [name, value] : logs) keys.push_back(name);  // std::map: already sorted
    bool has_validation = std::any_of(keys.begin(), keys.end(),
                                      [](const std::string& k) { return k.rfind("val_", 0) == 0; });
    if (!has_validation) {
      const size_t n = keys.size();
      for (size_t i = 0; i < n; ++i) keys.push_back("val_" + keys[i]);
    }
    return keys;
  }

  // A field quoted as Python's csv module quotes it (when it holds the separator, a quote or
  // a line break).
  std::string field(const std::string& s) const {
    if (s.find(separator_) == std::string::npos && s.find_first_of("\"\r\n") == std::string::npos)
      return s;
    std::string quoted = "\"";
    for (char c : s) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    return quoted + "\"";
  }

  std::string filename_, separator_;
  bool append_;
  bool write_header_ = true, header_written_ = false;
  std::optional<std::vector<std::string>> keys_;
  std::ofstream file_;
};

}  // namespace

namespace callbacks {

CallbackPtr CSVLogger(const std::string& filename, const std::string& separator, bool append) {
  LS_CHECK(!separator.empty(), "CSVLogger: the separator must not be empty");
  return std::make_shared<CSVLoggerCb>(filename, separator, append);
}

}  // namespace callbacks

}  // namespace lockstep
