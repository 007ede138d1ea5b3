// Reading the optimized module back (see compiled_module.h).
#include "backends/xla/compiled_module.h"

#include <cstdint>
#include <functional>
#include <numeric>
#include <optional>

#include "backends/xla/sharding_lowering.h"

namespace lockstep::xla {

namespace {

// A protobuf message's fields, read in order (wire format: varint keys, then a varint, a
// fixed 64/32-bit value or a length-delimited payload).
class Reader {
 public:
  explicit Reader(std::string_view bytes) : s_(bytes) {}
  struct Field {
    int number = 0, wire = 0;
    uint64_t value = 0;      // varint / fixed
    std::string_view bytes;  // length-delimited
  };
  // The next field; false at the end or on a malformed one (ok() then says which).
  bool next(Field& f) {
    if (pos_ >= s_.size()) return false;
    uint64_t key = 0;
    if (!varint(key)) return fail();
    f.number = int(key >> 3), f.wire = int(key & 7);
    switch (f.wire) {
      case 0:
        return varint(f.value) || fail();
      case 1:
        if (s_.size() - pos_ < 8) return fail();
        pos_ += 8;
        return true;
      case 5:
        if (s_.size() - pos_ < 4) return fail();
        pos_ += 4;
        return true;
      case 2: {
        uint64_t n = 0;
        if (!varint(n) || n > s_.size() - pos_) return fail();
        f.bytes = s_.substr(pos_, size_t(n));
        pos_ += size_t(n);
        return true;
      }
      default:
        return fail();
    }
  }
  bool ok() const { return ok_; }
  bool varint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64 && pos_ < s_.size(); shift += 7) {
      const uint8_t b = uint8_t(s_[pos_++]);
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }

 private:
  bool fail() {
    ok_ = false;
    return false;
  }
  std::string_view s_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// A repeated int64 field: packed (wire 2) or one value per field (wire 0).
void append_ints(const Reader::Field& f, std::vector<int64_t>& out) {
  if (f.wire == 0) {
    out.push_back(int64_t(f.value));
    return;
  }
  Reader r(f.bytes);
  uint64_t v = 0;
  while (r.varint(v)) out.push_back(int64_t(v));
}

// OpSharding (xla_data.proto) as GSPMD's text; a tuple's elements go to `tuple`.
std::string sharding_text(std::string_view bytes, std::vector<std::string>* tuple) {
  Reader r(bytes);
  Reader::Field f;
  int type = 0;
  bool replicate_last = false;
  std::vector<int64_t> dims, devices, iota_dims, iota_perm, last_tile_dims;
  while (r.next(f)) {
    if (f.number == 1) type = int(f.value);
    if (f.number == 3) append_ints(f, dims);
    if (f.number == 4) append_ints(f, devices);
    if (f.number == 5 && tuple) tuple->push_back(sharding_text(f.bytes, nullptr));
    if (f.number == 6) replicate_last = f.value != 0;
    if (f.number == 8) append_ints(f, last_tile_dims);
    if (f.number == 9) append_ints(f, iota_dims);
    if (f.number == 10) append_ints(f, iota_perm);
  }
  // type: REPLICATED 0, MAXIMAL 1, TUPLE 2, OTHER 3, MANUAL 4, UNKNOWN 5, UNREDUCED 6
  if (type == 0) return "{replicated}";
  if (type == 1)
    return "{maximal device=" + (devices.empty() ? "?" : std::to_string(devices[0])) + "}";
  if (type == 2) return "{tuple}";
  if (type == 4) return "{manual}";
  if (type != 3) return "{unknown}";
  const int64_t n = std::accumulate(dims.begin(), dims.end(), int64_t(1), std::multiplies<>());
  if (devices.empty() && !iota_dims.empty()) {  // iota(n).reshape(iota_dims).transpose(perm)
    const size_t k = iota_dims.size();
    if (iota_perm.size() != k)
      iota_perm.resize(k), std::iota(iota_perm.begin(), iota_perm.end(), 0);
    std::vector<int64_t> pdims(k), strides(k, 1);
    for (size_t i = k; i-- > 1;) strides[i - 1] = strides[i] * iota_dims[i];
    for (size_t i = 0; i < k; ++i) pdims[i] = iota_dims[size_t(iota_perm[i])];
    for (int64_t j = 0; j < n; ++j) {
      int64_t rest = j, src = 0;
      for (size_t i = k; i-- > 0;) {
        const int64_t c = rest % pdims[i];
        rest /= pdims[i];
        src += c * strides[size_t(iota_perm[i])];
      }
      devices.push_back(src);
    }
  }
  std::string s = "{devices=[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  s += "]";
  for (size_t i = 0; i < devices.size(); ++i) s += (i ? "," : "") + std::to_string(devices[i]);
  // last_tile_dims holds OpSharding.Type per trailing subgroup dim (REPLICATED = 0)
  const bool replicated_subgroup =
      replicate_last || (last_tile_dims.size() == 1 && last_tile_dims[0] == 0);
  return s + (replicated_subgroup ? " last_tile_dim_replicate}" : "}");
}

bool is_collective(std::string_view op) {
  for (const char* c : {"all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                        "collective-permute", "collective-broadcast"})
    if (op.rfind(c, 0) == 0 && !op.ends_with("-done")) return true;
  return false;
}

}  // namespace

CompiledModule read_compiled_module(const std::string& bytes, const std::string& format) {
  CompiledModule m;
  m.format = format;
  std::string_view module = bytes;
  if (format == "hlo_with_config") {  // HloModuleProtoWithConfig { hlo_module = 1; config = 2 }
    Reader r(bytes);
    Reader::Field f;
    module = {};
    while (r.next(f))
      if (f.number == 1 && f.wire == 2) module = f.bytes;
    if (!r.ok() || module.empty()) return m;
  } else if (format != "hlo") {
    return m;
  }
  Reader r(module);
  Reader::Field f;
  std::vector<std::string_view> computations;
  while (r.next(f)) {
    if (f.number == 3 && f.wire == 2) computations.push_back(f.bytes);
    if (f.number == 12 && f.wire == 2) {  // spmd_output_sharding: a tuple for several results
      std::vector<std::string> tuple;
      const std::string text = sharding_text(f.bytes, &tuple);
      m.result_shardings = text == "{tuple}" ? tuple : std::vector<std::string>{text};
    }
    if (f.number == 14 && f.wire == 2)
      m.parameter_shardings.push_back(sharding_text(f.bytes, nullptr));
  }
  if (!r.ok()) return m;
  for (std::string_view c : computations) {  // HloComputationProto: instructions = 2
    Reader cr(c);
    Reader::Field cf;
    while (cr.next(cf)) {
      if (cf.number != 2 || cf.wire != 2) continue;
      ++m.instructions;
      Reader ir(cf.bytes);  // HloInstructionProto: opcode = 2
      Reader::Field i;
      while (ir.next(i))
        if (i.number == 2 && i.wire == 2) {
          if (is_collective(i.bytes)) ++m.collectives[std::string(i.bytes)];
          break;
        }
    }
  }
  m.read = true;
  return m;
}

std::optional<DimAxes> layout_of_sharding(const std::string& sharding, const MeshShape& mesh,
                                          int rank) {
  DimAxes axes(static_cast<size_t>(rank), std::string());
  std::function<bool(size_t)> search = [&](size_t d) -> bool {
    if (d == axes.size()) return gspmd_sharding(mesh, axes) == sharding;
    for (int a = -1; a < int(mesh.axis_names.size()); ++a) {
      const std::string name = a < 0 ? "" : mesh.axis_names[size_t(a)];
      bool used = false;
      for (size_t e = 0; e < d; ++e) used = used || (!name.empty() && axes[e] == name);
      if (used) continue;
      axes[d] = name;
      if (search(d + 1)) return true;
    }
    return false;
  };
  if (search(0)) return axes;
  return std::nullopt;
}

}  // namespace lockstep::xla
