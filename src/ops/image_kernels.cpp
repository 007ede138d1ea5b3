// Host kernels of the image ops, registered by each CPU-side backend (reference: serial; cpu:
// parallel over the batch): attributes parsed once per kernel, per-image parameters
// drawn with the dropout keying (attr seed, node id, replica, model seed; counter = step), then
// the shared transformations of src/imaging/internal/augment.h.
#include "ops/internal/image_kernels.h"

#include "ops/internal/kernel_util.h"
#include "ops/internal/kernel_math.h"
#include "imaging/internal/augment.h"

namespace lockstep {

namespace {

using Types = std::vector<TensorType>;

augment::FillSpec fill_spec(const Node& n) {
  return {augment::parse_fill_mode(n.attrs.s("fill_mode", "reflect")),
          augment::parse_interpolation(n.attrs.s("interpolation", "bilinear")),
          float(n.attrs.f("fill_value", 0.0))};
}

std::pair<float, float> value_range(const Node& n) {
  auto r = n.attrs.floats("value_range");
  return {float(r[0]), float(r[1])};
}

void range(const Node& n, const char* k, double out[2]) {
  if (!n.attrs.has(k)) return;
  auto v = n.attrs.floats(k);
  out[0] = v[0], out[1] = v[1];
}

uint64_t step_of(const KernelArgs& a) { return a.step ? a.step->step : 0; }

template <class Make>
void reg(const char* op, const char* backend, Make make) {
  OpRegistry::get().add_kernel(
      op, backend, [make](const Node& n, const Types& in) { return make_kernel(make(n, in)); });
}

}  // namespace

void register_image_kernels(const char* backend, bool par) {
  reg("image_random_flip", backend, [par](const Node& n, const Types&) {
    int mode = augment::parse_flip_mode(n.attrs.s("mode", "horizontal_and_vertical"));
    return [&n, mode, par](const KernelArgs& a) {
      float* flags = a.out(1).data<float>();
      augment::sample_flip(mode, ew::dropout_key(n, a.step), step_of(a), a.in(0).dim(0), flags);
      augment::apply_flip(a.in(0), a.out(0), flags, par);
    };
  });
  reg("image_flip", backend, [par](const Node&, const Types&) {
    return [par](const KernelArgs& a) {
      augment::apply_flip(a.in(0), a.out(0), a.in(1).data<float>(), par);
    };
  });

  reg("image_random_affine", backend, [par](const Node& n, const Types&) {
    augment::AffineRanges r;
    range(n, "rotation", r.rotation);
    range(n, "zoom_height", r.zoom_height);
    if (n.attrs.has("zoom_width")) {
      r.zoom_width_from_height = false;
      range(n, "zoom_width", r.zoom_width);
    }
    range(n, "translation_height", r.translation_height);
    range(n, "translation_width", r.translation_width);
    augment::FillSpec f = fill_spec(n);
    return [&n, r, f, par](const KernelArgs& a) {
      const Tensor& x = a.in(0);
      float* t = a.out(1).data<float>();
      augment::sample_affine(r, ew::dropout_key(n, a.step), step_of(a), x.dim(0), x.dim(1),
                             x.dim(2), t);
      augment::apply_affine(x, a.out(0), t, f, par);
    };
  });
  reg("image_affine_transform", backend, [par](const Node& n, const Types&) {
    augment::FillSpec f = fill_spec(n);
    return [f, par](const KernelArgs& a) {
      augment::apply_affine(a.in(0), a.out(0), a.in(1).data<float>(), f, par);
    };
  });
  reg("image_affine_transform_grad", backend, [par](const Node& n, const Types&) {
    augment::FillSpec f = fill_spec(n);
    return [f, par](const KernelArgs& a) {
      augment::apply_affine_grad(a.in(0), a.out(0), a.in(1).data<float>(), f, par);
    };
  });

  reg("image_random_contrast", backend, [par](const Node& n, const Types&) {
    auto [lo, hi] = value_range(n);
    double flo = 1.0 - n.attrs.f("lower"), fhi = 1.0 + n.attrs.f("upper");
    return [&n, lo, hi, flo, fhi, par](const KernelArgs& a) {
      float* f = a.out(1).data<float>();
      augment::sample_uniform(augment::Kind::contrast, flo, fhi, ew::dropout_key(n, a.step),
                              step_of(a), a.in(0).dim(0), f);
      augment::apply_contrast(a.in(0), a.out(0), f, lo, hi, par);
    };
  });
  reg("image_adjust_contrast", backend, [par](const Node& n, const Types&) {
    auto [lo, hi] = value_range(n);
    return [lo, hi, par](const KernelArgs& a) {
      augment::apply_contrast(a.in(0), a.out(0), a.in(1).data<float>(), lo, hi, par);
    };
  });
  reg("image_adjust_contrast_grad", backend, [par](const Node& n, const Types&) {
    auto [lo, hi] = value_range(n);
    return [lo, hi, par](const KernelArgs& a) {
      augment::apply_contrast_grad(a.in(0), a.in(1), a.out(0), a.in(2).data<float>(), lo, hi, par);
    };
  });

  reg("image_random_brightness", backend, [par](const Node& n, const Types&) {
    auto [lo, hi] = value_range(n);
    const double span = double(hi) - double(lo);
    double dlo = n.attrs.f("lower") * span, dhi = n.attrs.f("upper") * span;
    return [&n, lo, hi, dlo, dhi, par](const KernelArgs& a) {
      float* d = a.out(1).data<float>();
      augment::sample_uniform(augment::Kind::brightness, dlo, dhi, ew::dropout_key(n, a.step),
                              step_of(a), a.in(0).dim(0), d);
      augment::apply_brightness(a.in(0), a.out(0), d, lo, hi, par);
    };
  });
  reg("image_adjust_brightness", backend, [par](const Node& n, const Types&) {
    auto [lo, hi] = value_range(n);
    return [lo, hi, par](const KernelArgs& a) {
      augment::apply_brightness(a.in(0), a.out(0), a.in(1).data<float>(), lo, hi, par);
    };
  });
  reg("image_adjust_brightness_grad", backend, [par](const Node& n, const Types&) {
    auto [lo, hi] = value_range(n);
    return [lo, hi, par](const KernelArgs& a) {
      augment::apply_brightness_grad(a.in(0), a.in(1), a.out(0), a.in(2).data<float>(), lo, hi,
                                     par);
    };
  });

  reg("image_random_crop", backend, [par](const Node& n, const Types&) {
    return [&n, par](const KernelArgs& a) {
      const Tensor &x = a.in(0), &y = a.out(0);
      float* off = a.out(1).data<float>();
      augment::sample_crop(ew::dropout_key(n, a.step), step_of(a), x.dim(0), x.dim(1), x.dim(2),
                           y.dim(1), y.dim(2), off);
      augment::apply_crop(x, y, off, par);
    };
  });
  reg("image_crop", backend, [par](const Node&, const Types&) {
    return [par](const KernelArgs& a) {
      augment::apply_crop(a.in(0), a.out(0), a.in(1).data<float>(), par);
    };
  });
  reg("image_crop_grad", backend, [par](const Node&, const Types&) {
    return [par](const KernelArgs& a) {
      augment::apply_crop_grad(a.in(0), a.out(0), a.in(1).data<float>(), par);
    };
  });

  reg("image_resize", backend, [par](const Node& n, const Types&) {
    auto ip = augment::parse_interpolation(n.attrs.s("interpolation", "bilinear"));
    return [ip, par](const KernelArgs& a) { augment::resize(a.in(0), a.out(0), ip, par); };
  });
}


}  // namespace lockstep
