// The reference backend's image kernels: the shared host kernels of src/ops/image_kernels.cpp,
// run one image after another.
#include "ops/internal/image_kernels.h"

#include "lockstep/graph/op_registry.h"

namespace lockstep {

LOCKSTEP_REGISTER(reference_image_kernels) {
  register_image_kernels("reference", false);
  register_upsample_kernels("reference", false);
}

}  // namespace lockstep
