// CPU kernels of the image ops: the reference kernels' shared augmentation code
// (src/imaging/internal/augment.h) run OpenMP-parallel over the images of the batch, so cpu and
// reference results are bit-identical.
#include "ops/internal/image_kernels.h"

#include "lockstep/graph/op_registry.h"

namespace lockstep {

LOCKSTEP_REGISTER(cpu_image_kernels) {
  register_image_kernels("cpu", true);
  register_upsample_kernels("cpu", true);
}

}  // namespace lockstep
