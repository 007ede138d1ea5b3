// Host kernels of the image ops, registered by each CPU-side backend (reference: serial; cpu:
// parallel over the batch) from one table: attributes parsed once per kernel, per-image
// parameters drawn with the dropout keying (attr seed, node id, replica, model seed; counter =
// step; under op determinism the image's global row instead of the replica), then the shared
// transformations of src/imaging/internal/augment.h.
#include "ops/internal/image_kernels.h"

#include "imaging/internal/augment.h"
#include "ops/internal/kernel_math.h"
#include "ops/internal/kernel_util.h"

namespace lockstep {

namespace {

// What a factory of the table gets: the node, and whether to run OpenMP-parallel.
using ImageKernelFactory = std::unique_ptr<Kernel> (*)(const Node& n, bool parallel);

augment::FillSpec fill_spec(const Node& n) {
  return {augment::parse_fill_mode(attr_s(n, "fill_mode")),
          augment::parse_interpolation(attr_s(n, "interpolation")), float(attr_f(n, "fill_value"))};
}

std::pair<float, float> value_range(const Node& n) {
  const auto& r = attr_floats(n, "value_range");
  return {float(r[0]), float(r[1])};
}

void range(const Node& n, const char* k, double out[2]) {
  if (!n.attrs.has(k)) return;
  const auto& v = attr_floats(n, k);
  out[0] = v[0], out[1] = v[1];
}

uint64_t step_of(const KernelArgs& a) { return a.step ? a.step->step : 0; }

// ---- flip ----
std::unique_ptr<Kernel> random_flip(const Node& n, bool par) {
  const int mode = augment::parse_flip_mode(attr_s(n, "mode"));
  const uint64_t node = ew::node_key(n);
  return make_kernel([node, mode, par](const KernelArgs& a) {
    float* flags = a.out(1).data<float>();
    augment::sample_flip(mode, ew::dropout_key(node, a.step), step_of(a), a.in(0).dim(0), flags,
                         ew::first_index(a.step));
    augment::apply_flip(a.in(0), a.out(0), flags, par);
  });
}
std::unique_ptr<Kernel> flip(const Node&, bool par) {
  return make_kernel([par](const KernelArgs& a) {
    augment::apply_flip(a.in(0), a.out(0), a.in(1).data<float>(), par);
  });
}

// ---- affine ----
std::unique_ptr<Kernel> random_affine(const Node& n, bool par) {
  augment::AffineRanges r;
  range(n, "rotation", r.rotation);
  range(n, "zoom_height", r.zoom_height);
  if (n.attrs.has("zoom_width")) {
    r.zoom_width_from_height = false;
    range(n, "zoom_width", r.zoom_width);
  }
  range(n, "translation_height", r.translation_height);
  range(n, "translation_width", r.translation_width);
  const augment::FillSpec f = fill_spec(n);
  const uint64_t node = ew::node_key(n);
  return make_kernel([node, r, f, par](const KernelArgs& a) {
    const Tensor& x = a.in(0);
    float* t = a.out(1).data<float>();
    augment::sample_affine(r, ew::dropout_key(node, a.step), step_of(a), x.dim(0), x.dim(1),
                           x.dim(2), t, ew::first_index(a.step));
    augment::apply_affine(x, a.out(0), t, f, par);
  });
}
std::unique_ptr<Kernel> affine_transform(const Node& n, bool par) {
  return make_kernel([f = fill_spec(n), par](const KernelArgs& a) {
    augment::apply_affine(a.in(0), a.out(0), a.in(1).data<float>(), f, par);
  });
}
std::unique_ptr<Kernel> affine_transform_grad(const Node& n, bool par) {
  return make_kernel([f = fill_spec(n), par](const KernelArgs& a) {
    augment::apply_affine_grad(a.in(0), a.out(0), a.in(1).data<float>(), f, par);
  });
}

// ---- contrast ----
std::unique_ptr<Kernel> random_contrast(const Node& n, bool par) {
  auto [lo, hi] = value_range(n);
  const double flo = 1.0 - attr_f(n, "lower"), fhi = 1.0 + attr_f(n, "upper");
  const uint64_t node = ew::node_key(n);
  return make_kernel([node, lo, hi, flo, fhi, par](const KernelArgs& a) {
    float* f = a.out(1).data<float>();
    augment::sample_uniform(augment::Kind::contrast, flo, fhi, ew::dropout_key(node, a.step),
                            step_of(a), a.in(0).dim(0), f, ew::first_index(a.step));
    augment::apply_contrast(a.in(0), a.out(0), f, lo, hi, par);
  });
}
std::unique_ptr<Kernel> adjust_contrast(const Node& n, bool par) {
  auto [lo, hi] = value_range(n);
  return make_kernel([lo, hi, par](const KernelArgs& a) {
    augment::apply_contrast(a.in(0), a.out(0), a.in(1).data<float>(), lo, hi, par);
  });
}
std::unique_ptr<Kernel> adjust_contrast_grad(const Node& n, bool par) {
  auto [lo, hi] = value_range(n);
  return make_kernel([lo, hi, par](const KernelArgs& a) {
    augment::apply_contrast_grad(a.in(0), a.in(1), a.out(0), a.in(2).data<float>(), lo, hi, par);
  });
}

// ---- brightness ----
std::unique_ptr<Kernel> random_brightness(const Node& n, bool par) {
  auto [lo, hi] = value_range(n);
  const double span = double(hi) - double(lo);
  const double dlo = attr_f(n, "lower") * span, dhi = attr_f(n, "upper") * span;
  const uint64_t node = ew::node_key(n);
  return make_kernel([node, lo, hi, dlo, dhi, par](const KernelArgs& a) {
    float* d = a.out(1).data<float>();
    augment::sample_uniform(augment::Kind::brightness, dlo, dhi, ew::dropout_key(node, a.step),
                            step_of(a), a.in(0).dim(0), d, ew::first_index(a.step));
    augment::apply_brightness(a.in(0), a.out(0), d, lo, hi, par);
  });
}
std::unique_ptr<Kernel> adjust_brightness(const Node& n, bool par) {
  auto [lo, hi] = value_range(n);
  return make_kernel([lo, hi, par](const KernelArgs& a) {
    augment::apply_brightness(a.in(0), a.out(0), a.in(1).data<float>(), lo, hi, par);
  });
}
std::unique_ptr<Kernel> adjust_brightness_grad(const Node& n, bool par) {
  auto [lo, hi] = value_range(n);
  return make_kernel([lo, hi, par](const KernelArgs& a) {
    augment::apply_brightness_grad(a.in(0), a.in(1), a.out(0), a.in(2).data<float>(), lo, hi, par);
  });
}

// ---- crop and resize ----
std::unique_ptr<Kernel> random_crop(const Node& n, bool par) {
  const uint64_t node = ew::node_key(n);
  return make_kernel([node, par](const KernelArgs& a) {
    const Tensor &x = a.in(0), &y = a.out(0);
    float* off = a.out(1).data<float>();
    augment::sample_crop(ew::dropout_key(node, a.step), step_of(a), x.dim(0), x.dim(1), x.dim(2),
                         y.dim(1), y.dim(2), off, ew::first_index(a.step));
    augment::apply_crop(x, y, off, par);
  });
}
std::unique_ptr<Kernel> crop(const Node&, bool par) {
  return make_kernel([par](const KernelArgs& a) {
    augment::apply_crop(a.in(0), a.out(0), a.in(1).data<float>(), par);
  });
}
std::unique_ptr<Kernel> crop_grad(const Node&, bool par) {
  return make_kernel([par](const KernelArgs& a) {
    augment::apply_crop_grad(a.in(0), a.out(0), a.in(1).data<float>(), par);
  });
}
std::unique_ptr<Kernel> resize(const Node& n, bool par) {
  const auto ip = augment::parse_interpolation(attr_s(n, "interpolation"));
  return make_kernel(
      [ip, par](const KernelArgs& a) { augment::resize(a.in(0), a.out(0), ip, par); });
}

// Every image op and its kernel.
const std::pair<OpId, ImageKernelFactory> kImageKernels[] = {
    {op::image_random_flip, random_flip},
    {op::image_flip, flip},
    {op::image_random_affine, random_affine},
    {op::image_affine_transform, affine_transform},
    {op::image_affine_transform_grad, affine_transform_grad},
    {op::image_random_contrast, random_contrast},
    {op::image_adjust_contrast, adjust_contrast},
    {op::image_adjust_contrast_grad, adjust_contrast_grad},
    {op::image_random_brightness, random_brightness},
    {op::image_adjust_brightness, adjust_brightness},
    {op::image_adjust_brightness_grad, adjust_brightness_grad},
    {op::image_random_crop, random_crop},
    {op::image_crop, crop},
    {op::image_crop_grad, crop_grad},
    {op::image_resize, resize},
};

}  // namespace

void register_image_kernels(const char* backend, bool par) {
  for (auto [op, make] : kImageKernels)
    OpRegistry::get().add_kernel(
        op, backend,
        [make, par](const Node& n, const std::vector<TensorType>&) { return make(n, par); });
}

}  // namespace lockstep
