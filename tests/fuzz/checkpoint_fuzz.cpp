// Fuzzes io::read_checkpoint_file (magic, sizes, CRC, the JSON metadata, tensor headers).
#include "fuzz_util.h"
#include "lockstep/io/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = lockstep::fuzz::write_scratch_file(data, size, ".lsckpt");
  lockstep::fuzz::expect_clean([&] { lockstep::io::read_checkpoint_file(path); });
  return 0;
}
