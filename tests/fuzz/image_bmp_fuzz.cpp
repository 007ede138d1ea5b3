// Fuzzes data::decode_image on BMP input (the format is chosen by magic bytes; the seed
// corpus is BMP), then converts what decodes to 1, 3 and 4 channels. The pixel cap is lowered
// to 2^22 so that a header claiming a big image is refused the way the default cap refuses
// bigger ones, within libFuzzer's memory limit.
#include "fuzz_util.h"
#include "lockstep/data/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace ld = lockstep::data;
  ld::set_max_image_pixels(int64_t(1) << 22);
  lockstep::fuzz::expect_clean([&] {
    const lockstep::Tensor image = ld::decode_image(data, size, "fuzz.bmp");
    for (int channels : {1, 3, 4}) ld::convert_channels(image, channels, "fuzz.bmp");
  });
  return 0;
}
