// Image op kernels (src/ops/image_ops.cpp). Both backends run the shared augmentation code of
// src/imaging/internal/augment.h; the cpu backend registers the same kernels parallel over the
// batch.
#pragma once

namespace lockstep {

// Registers every image op kernel for `backend`; `parallel`: OpenMP over the images.
void register_image_kernels(const char* backend, bool parallel);

// Registers upsample2d and upsample2d_grad for `backend` (src/ops/upsample_kernels.cpp).
void register_upsample_kernels(const char* backend, bool parallel);

}  // namespace lockstep
