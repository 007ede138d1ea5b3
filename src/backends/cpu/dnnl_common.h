// Shared oneDNN plumbing for the cpu backend: one engine/stream, workspace planning, user
// memories rebound per run, compile-time reorders, and allocation-free primitive execution.
#pragma once
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "lockstep/graph/op_registry.h"

namespace lockstep::cpu {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

dnnl::engine& engine();
dnnl::stream& stream();

// Attributes with user-managed scratchpad (plus optional post-ops).
dnnl::primitive_attr user_scratchpad_attr();

// Bump allocator over the kernel's workspace: offsets planned at compile time.
struct WsPlan {
  size_t bytes = 0;
  size_t take(size_t n) {
    size_t off = bytes;
    bytes += (n + 63) / 64 * 64;
    return off;
  }
};

// A primitive plus its argument list, prebuilt at compile time; run() allocates nothing.
struct Exec {
  dnnl::primitive prim;
  std::vector<dnnl_exec_arg_t> args;
  void arg(int key, const memory& m) { args.push_back({key, m.get()}); }
  void run() const;
};

// One tensor argument of a primitive: the user's buffer (plain layout, handle rebound per run)
// and, when the primitive wants a different layout, a workspace buffer plus a reorder.
struct Arg {
  memory user, prim;
  bool reordered = false, output = false;
  size_t ws_off = 0;
  Exec reorder;
  // user_md: the plain layout; want: what the primitive chose. Reorder scratch is shared with
  // the primitive's scratchpad (they never run concurrently): scratch_bytes grows to fit.
  void init(const memory::desc& user_md, const memory::desc& want, bool is_output, WsPlan& ws,
            size_t* scratch_bytes);
  void bind(void* user_ptr, char* ws) const;
  void add_scratch(const memory& s) {
    if (reordered) reorder.arg(DNNL_ARG_SCRATCHPAD, s);
  }
  void before() const {
    if (reordered && !output) reorder.run();
  }
  void after() const {
    if (reordered && output) reorder.run();
  }
};

// The scratchpad memory all primitives of one kernel share (at workspace offset 0).
struct Scratch {
  memory mem;
  size_t bytes = 0;
  void init() { mem = memory({{int64_t(bytes)}, dt::u8, tag::a}, engine(), DNNL_MEMORY_NONE); }
  void bind(char* ws) const { mem.set_data_handle(ws); }
  size_t aligned() const { return (bytes + 63) / 64 * 64; }
};

memory::dims dims4(int64_t a, int64_t b, int64_t c, int64_t d);

// oneDNN's data type for a float tensor type (f32 or bf16).
dt to_dt(DType t);
// Whether all the given types are f32, or all bf16: the mixes oneDNN's primitives run.
bool same_float_type(const std::vector<TensorType>& types);

}  // namespace lockstep::cpu
