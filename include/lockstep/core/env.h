// Every environment variable Lockstep reads, declared once. The X-macro below is the registry:
// each entry has an id, the variable's name, its kind, its default and what it does; the
// accessors are the only code that reads the environment (tests/core/env_test.cpp fails on a
// getenv anywhere else in src/, on a "LOCKSTEP_..." name in src/ that is not declared here, and
// on a docs/cli.md table that differs from env::docs_table()).
//
// Reading a switch is typed: `env::flag(env::fuse)` compiles only for a flag, `env::text(...)`
// only for a value, so a switch cannot be read as the wrong kind, and a misspelt id does not
// compile.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lockstep::env {

/// flag: 1/true/on/yes or 0/false/off/no (any case), unset or empty = the default.
/// value: text the reader parses (a path, a number, a name); unset or empty = not given.
enum class Kind : uint8_t { flag, value };

// X(id, "NAME", kind, "default", "area", "what it does")
#define LOCKSTEP_ENV_SWITCHES(X)                                                                   \
  X(allow_unauthenticated, "LOCKSTEP_ALLOW_UNAUTHENTICATED", value, "", "distributed",             \
    "`1`: run a multi-worker job without a job token (a trusted network only)")                    \
  X(conv_act, "LOCKSTEP_CONV_ACT", value, "", "cpu",                                               \
    "`any`: let oneDNN choose the activations' layout for convolutions and reorder in and out "    \
    "(default: NHWC, no reorders; an experiment)")                                                 \
  X(conv_algorithm, "LOCKSTEP_CONV_ALGORITHM", value, "auto", "cpu",                               \
    "the 3x3 convolution algorithm at start-up: `auto`, `winograd` or `direct` "                   \
    "(config::set_conv_algorithm wins)")                                                           \
  X(conv_swish, "LOCKSTEP_CONV_SWISH", value, "", "cpu",                                           \
    "`onednn`: run a conv's fused swish as oneDNN's post-op rather than Lockstep's own pass")      \
  X(depthwise_onednn, "LOCKSTEP_DEPTHWISE_ONEDNN", flag, "0", "cpu",                               \
    "run depthwise convolutions on oneDNN rather than Lockstep's own kernel")                      \
  X(deterministic, "LOCKSTEP_DETERMINISTIC", flag, "0", "training",                                \
    "turn op determinism on at start-up (config::enable_op_determinism)")                          \
  X(deterministic_shards, "LOCKSTEP_DETERMINISTIC_SHARDS", value, "0", "training",                 \
    "gradient shards under op determinism, 0 to 64 (config::DeterminismOptions::shards wins)")     \
  X(dump_graph, "LOCKSTEP_DUMP_GRAPH", flag, "0", "diagnostics",                                   \
    "print each compiled graph after the passes on stderr")                                        \
  X(dw_fusion_bytes, "LOCKSTEP_DW_FUSION_BYTES", value, "", "cpu",                                 \
    "the intermediate size in bytes from which a pointwise+depthwise pair runs fused (default "    \
    "16 MiB)")                                                                                     \
  X(dw_fusion_impl, "LOCKSTEP_DW_FUSION_IMPL", value, "", "cpu",                                   \
    "`none`: act as if oneDNN offered no depthwise post-op (tests the fallback)")                  \
  X(fashion_mnist_dir, "LOCKSTEP_FASHION_MNIST_DIR", value, "/usr/share/datasets/fashion-mnist",   \
    "data", "the Fashion-MNIST IDX folder")                                                        \
  X(fuse, "LOCKSTEP_FUSE", flag, "1", "diagnostics",                                               \
    "`0`: compile graphs without the fusion passes")                                               \
  X(h5_reader, "LOCKSTEP_H5_READER", value, "", "files",                                           \
    "the lockstep_h5_reader program that parses HDF5 files in a separate process (default: next "  \
    "to the library, then the installed one)")                                                     \
  X(h5_reader_silence, "LOCKSTEP_H5_READER_SILENCE", value, "300", "files",                        \
    "seconds the HDF5 reader process may send nothing before it is stopped as stuck on a damaged " \
    "file, 1 to 86400 (the fuzz targets use 3)")                                                   \
  X(hdf5_in_process, "LOCKSTEP_HDF5_IN_PROCESS", flag, "0", "files",                               \
    "parse HDF5 files in this process, without the reader process's protection from libhdf5's "    \
    "crashes")                                                                                     \
  X(home, "HOME", value, "", "xla", "the home folder, for the default compile-cache folder")       \
  X(huge_pages, "LOCKSTEP_HUGE_PAGES", flag, "1", "cpu",                                           \
    "`0`: do not ask for transparent huge pages for large buffers")                                \
  X(job_secret_file, "LOCKSTEP_JOB_SECRET_FILE", value, "", "distributed",                         \
    "a file (mode 0600) holding the job token, instead of LOCKSTEP_JOB_TOKEN")                     \
  X(job_token, "LOCKSTEP_JOB_TOKEN", value, "", "distributed",                                     \
    "the shared secret that authenticates a multi-worker job's workers to one another")            \
  X(layouts, "LOCKSTEP_LAYOUTS", flag, "1", "cpu",                                                 \
    "`0`: keep every tensor in its plain layout (no blocked layouts between oneDNN ops)")          \
  X(master_addr, "LOCKSTEP_MASTER_ADDR", value, "", "distributed",                                 \
    "the chief's host (Slurm and MPI launches; also MASTER_ADDR)")                                 \
  X(master_port, "LOCKSTEP_MASTER_PORT", value, "", "distributed",                                 \
    "the chief's port (Slurm and MPI launches; also MASTER_PORT)")                                 \
  X(max_image_pixels, "LOCKSTEP_MAX_IMAGE_PIXELS", value, "", "data",                              \
    "the largest image (width x height) a decoder accepts")                                        \
  X(pjrt_plugin, "LOCKSTEP_PJRT_PLUGIN", value, "", "xla",                                         \
    "the plugin's `.so` when no plugin is named at all; a named one (`--device xla:cuda`) wins, "  \
    "with a warning")                                                                              \
  X(predict_thread_tiles, "LOCKSTEP_PREDICT_THREAD_TILES", flag, "1", "cpu",                       \
    "`0`: predict() runs each batch as one program, not one tile per core")                        \
  X(predict_tile, "LOCKSTEP_PREDICT_TILE", value, "", "cpu",                                       \
    "predict()'s tile (rows per program run) instead of the one it picks")                         \
  X(profile, "LOCKSTEP_PROFILE", flag, "0", "diagnostics",                                         \
    "print each kernel's time per step on stderr")                                                 \
  X(store_bind_addr, "LOCKSTEP_STORE_BIND_ADDR", value, "", "distributed",                         \
    "the address the chief's rendezvous store listens on (default: all interfaces)")               \
  X(strict_kernels, "LOCKSTEP_STRICT_KERNELS", flag, "0", "diagnostics",                           \
    "fail instead of falling back to the reference backend for an op the backend lacks")           \
  X(tf_deterministic_ops, "TF_DETERMINISTIC_OPS", flag, "0", "training",                           \
    "TensorFlow's name for LOCKSTEP_DETERMINISTIC, honoured too")                                  \
  X(train_thread_replicas, "LOCKSTEP_TRAIN_THREAD_REPLICAS", value, "0", "training",               \
    "0 (auto), 1 (off) or a replica count up to 1024: the batch split over the cores "             \
    "(config::set_thread_replicas wins)")                                                          \
  X(virtual_env, "VIRTUAL_ENV", value, "", "xla",                                                  \
    "the active Python environment, searched for a "                                               \
    "plugin given by name after LOCKSTEP_XLA_VENV")                                                \
  X(weight_cache, "LOCKSTEP_WEIGHT_CACHE", flag, "1", "cpu",                                       \
    "`0`: do not keep weights in oneDNN's blocked layouts between steps")                          \
  X(xdg_cache_home, "XDG_CACHE_HOME", value, "", "xla", "the cache root, for the compile cache")   \
  X(xla_cache_dir, "LOCKSTEP_XLA_CACHE_DIR", value, "", "xla",                                     \
    "the compile cache's folder (default `$XDG_CACHE_HOME/lockstep/xla` or "                       \
    "`~/.cache/lockstep/xla`); `off` turns it off")                                                \
  X(xla_f32_precision, "LOCKSTEP_XLA_F32_PRECISION", value, "", "xla",                             \
    "`default`, `high` or `highest`: the precision of f32 dots and convolutions in lowered "       \
    "programs")                                                                                    \
  X(xla_gpu_allocator, "LOCKSTEP_XLA_GPU_ALLOCATOR", value, "", "xla",                             \
    "CUDA: `default`, `platform`, `bfc` or `cuda_async`")                                          \
  X(xla_gpu_memory_fraction, "LOCKSTEP_XLA_GPU_MEMORY_FRACTION", value, "", "xla",                 \
    "CUDA: the share of the GPU's memory the process may use, in (0, 1]")                          \
  X(xla_gpu_preallocate, "LOCKSTEP_XLA_GPU_PREALLOCATE", flag, "0", "xla",                         \
    "CUDA: `true` to preallocate the GPU's memory at start (default `false`, for a shared GPU)")   \
  X(xla_plugin, "LOCKSTEP_XLA_PLUGIN", value, "", "xla",                                           \
    "the plugin when no `--device xla:PLUGIN` is given (a name or a `.so` path); `--device` sets " \
    "it")                                                                                          \
  X(xla_step_loop, "LOCKSTEP_XLA_STEP_LOOP", flag, "0", "xla",                                     \
    "`1`: steps_per_execution as one `stablehlo.while` (compile time flat in N; the XLA CPU "      \
    "plugin runs the loop's body 25-40x slower, so off by default: the steps unrolled)")           \
  X(xla_venv, "LOCKSTEP_XLA_VENV", value, "", "xla",                                               \
    "a Python environment searched first for a plugin given by name")

/// One enumerator per switch.
enum class Switch : uint8_t {
#define LOCKSTEP_ENV_ENUM(id, name, kind, fallback, area, doc) id,
  LOCKSTEP_ENV_SWITCHES(LOCKSTEP_ENV_ENUM)
#undef LOCKSTEP_ENV_ENUM
};

/// A switch's id, typed by its kind: the accessors below take only the matching kind.
template <Kind K>
struct Id {
  Switch sw;  ///< the switch
};

#define LOCKSTEP_ENV_ID(id, name, kind, fallback, area, doc) \
  inline constexpr Id<Kind::kind> id{Switch::id};
LOCKSTEP_ENV_SWITCHES(LOCKSTEP_ENV_ID)
#undef LOCKSTEP_ENV_ID

/// A switch's declaration.
struct Decl {
  Switch sw;             ///< its id
  const char* name;      ///< the variable: "LOCKSTEP_FUSE"
  Kind kind;             ///< flag or value
  const char* fallback;  ///< the default ("" for none)
  const char* area;      ///< "cpu", "xla", "distributed", ...
  const char* doc;       ///< what it does (Markdown)
};

/// Every declared switch, in declaration order.
const std::vector<Decl>& switches();
/// The declaration of `s`.
const Decl& decl(Switch s);

/// A flag: its value, or its declared default when unset or empty. A value that is not a
/// switch (e.g. "2") is an error naming the variable and the accepted spellings.
bool flag(Id<Kind::flag> id);
/// A flag's value when it is set (non-empty); nullopt otherwise.
std::optional<bool> flag_if_set(Id<Kind::flag> id);
/// A value switch: the text when set and non-empty; nullopt otherwise (the default is the
/// reader's to apply).
std::optional<std::string> text(Id<Kind::value> id);
/// text(id) or "".
std::string text_or_empty(Id<Kind::value> id);

/// Every variable of the process environment (for the cluster resolver, which reads a whole
/// launcher's set: TF_CONFIG, Slurm's and MPI's). Names it reads must be declared above when
/// they are Lockstep's own.
std::map<std::string, std::string> process_environment();

/// The Markdown table of docs/cli.md's "Environment switches" section, generated from the
/// declarations.
std::string docs_table();

}  // namespace lockstep::env
