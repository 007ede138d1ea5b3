// Input-pipeline benchmark (issue #3), the Lockstep side: JPEG folder -> decode -> resize to
// 180x180 (bilinear, f32) -> random horizontal flip -> random rotation (factor 0.1) -> batch 32,
// on --threads pipeline threads. Prints one JSON line with images/s.
//
//   build/bin/image_pipeline_bench --data-dir DIR [--threads 2] [--batches 150] [--warmup 5]
//       [--size 180] [--batch-size 32] [--pipeline fused|chained]
//
// fused:   files -> shuffle -> map(decode + resize + flip + rotation) -> batch -> prefetch
//          (the per-file work of image_dataset_from_directory plus augmentation in one map)
// chained: image_dataset_from_directory(batch_size=0) -> map(flip + rotation) -> batch -> prefetch
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "lockstep/data/dataset.h"
#include "lockstep/data/image_folder.h"
#if __has_include("lockstep/data/augment.h")
#include "lockstep/data/augment.h"
#define LOCKSTEP_BENCH_HAVE_AUGMENT 1
#endif

namespace ls = lockstep;
namespace data = lockstep::data;

namespace {

// Flip + rotation of one HWC f32 image, keyed by the element's (seed, epoch, index).
ls::Tensor augment(const ls::Tensor& img, uint64_t key) {
#ifdef LOCKSTEP_BENCH_HAVE_AUGMENT
  ls::Tensor x = data::random_flip(img, data::RandomKey(key), "horizontal");
  return data::random_rotation(x, data::RandomKey(key), 0.1);
#else
  // augment.h not available: flip only (rotation missing), reported in the JSON line.
  if (!(key & 1)) return img;
  const int64_t h = img.dim(0), w = img.dim(1), c = img.dim(2);
  ls::Tensor out = ls::Tensor::empty(img.shape());
  const float* s = img.data<float>();
  float* d = out.data<float>();
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      std::memcpy(d + (y * w + x) * c, s + (y * w + (w - 1 - x)) * c, sizeof(float) * c);
  return out;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, pipeline = "fused";
  int threads = 2, batches = 150, warmup = 5, size = 180, batch_size = 32;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--data-dir")
      dir = next();
    else if (a == "--threads")
      threads = std::atoi(next().c_str());
    else if (a == "--batches")
      batches = std::atoi(next().c_str());
    else if (a == "--warmup")
      warmup = std::atoi(next().c_str());
    else if (a == "--size")
      size = std::atoi(next().c_str());
    else if (a == "--batch-size")
      batch_size = std::atoi(next().c_str());
    else if (a == "--pipeline")
      pipeline = next();
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (dir.empty()) {
    std::fprintf(stderr, "usage: image_pipeline_bench --data-dir DIR [--threads N] ...\n");
    return 2;
  }
  try {
    data::ImageFolderOptions o;
    o.seed = 1;
    o.image_size = {size, size};
    o.verbose = false;
    o.num_parallel_calls = data::AUTOTUNE;
    data::MapOptions aug_opts;
    aug_opts.num_parallel_calls = data::AUTOTUNE;
    aug_opts.seed = 7;
    data::Dataset ds;
    int64_t files = 0;
    if (pipeline == "fused") {
      data::ImageFolderIndex idx = data::index_image_directory(dir, o);
      files = int64_t(idx.files.size());
      std::vector<int32_t> labels(idx.labels.begin(), idx.labels.end());
      aug_opts.name = "load+augment";
      ds = data::Dataset::from_tensor_slices(
               {data::Component(data::Strings(idx.files)),
                data::Component(ls::Tensor::from_vector_i32({files}, labels))})
               .repeat()
               .shuffle(batch_size * 8, {.seed = 1})
               .map(
                   [o](data::Element e, const data::MapContext& ctx) {
                     ls::Tensor img = data::load_image_for_dataset(e.string(0), o);
                     return data::Element{augment(img, ctx.key()), e.tensor(1)};
                   },
                   aug_opts);
    } else {
      o.batch_size = 0;
      data::ImageDataset folder = data::image_dataset_from_directory(dir, o);
      files = int64_t(folder.file_paths().size());
      aug_opts.name = "augment";
      ds = data::Dataset(folder).repeat().map(
          [](data::Element e, const data::MapContext& ctx) {
            return data::Element{augment(e.tensor(0), ctx.key()), e.tensor(1)};
          },
          aug_opts);
    }
    ds = ds.batch(batch_size, {.drop_remainder = true}).prefetch(data::AUTOTUNE);
    data::Options opts;
    opts.max_threads = threads;
    ds = ds.with_options(opts);

    data::Iterator it = ds.iterator(0);
    using clk = std::chrono::steady_clock;
    for (int b = 0; b < warmup; ++b) it.next();
    auto t0 = clk::now();
    int64_t images = 0;
    double checksum = 0;
    for (int b = 0; b < batches; ++b) {
      auto el = it.next();
      if (!el) break;
      images += el->tensor(0).dim(0);
      checksum += el->tensor(0).data<float>()[b % 1000];
    }
    double secs = std::chrono::duration<double>(clk::now() - t0).count();
    std::fprintf(stderr, "%s\n", it.autotune_report().c_str());
#ifdef LOCKSTEP_BENCH_HAVE_AUGMENT
    const char* aug = "random_flip+random_rotation";
#else
    const char* aug = "flip-only (augment.h missing)";
#endif
    std::printf(
        "{\"system\": \"lockstep\", \"pipeline\": \"%s\", \"images_per_sec\": %.1f, "
        "\"images\": %lld, \"seconds\": %.3f, \"threads\": %d, \"files\": %lld, "
        "\"augment\": \"%s\", \"checksum\": %.1f}\n",
        pipeline.c_str(), images / secs, (long long)images, secs, threads, (long long)files, aug,
        checksum);
  } catch (const ls::Error& e) {
    std::fprintf(stderr, "image_pipeline_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
