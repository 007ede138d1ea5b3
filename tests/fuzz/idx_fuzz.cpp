// Fuzzes data::read_idx (IDX files, plain or gzipped: input that starts with the gzip magic is
// written as a .gz file).
#include "fuzz_util.h"
#include "lockstep/data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const bool gzipped = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  const std::string path =
      lockstep::fuzz::write_scratch_file(data, size, gzipped ? ".idx.gz" : ".idx");
  lockstep::fuzz::expect_clean([&] { lockstep::data::read_idx(path); });
  return 0;
}
