// oneDNN engine/stream singletons and the Arg/Exec helpers (see dnnl_common.h).
#include "backends/cpu/dnnl_common.h"

#include "lockstep/core/error.h"

namespace lockstep::cpu {

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// Per thread: a stream is not safe to share between threads running executables concurrently.
dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

void Exec::run() const {
  dnnl_status_t st =
      dnnl_primitive_execute(prim.get(), stream().get(), int(args.size()), args.data());
  LS_CHECK(st == dnnl_success, "oneDNN primitive execution failed (status ", int(st), ")");
}

void Arg::init(const memory::desc& user_md, const memory::desc& want, bool is_output, WsPlan& ws,
               size_t* scratch_bytes) {
  output = is_output;
  user = memory(user_md, engine(), DNNL_MEMORY_NONE);
  reordered = user_md != want;
  if (!reordered) {
    prim = user;
    return;
  }
  ws_off = ws.take(want.get_size());
  prim = memory(want, engine(), DNNL_MEMORY_NONE);
  auto attr = user_scratchpad_attr();
  const memory::desc& from = output ? want : user_md;
  const memory::desc& to = output ? user_md : want;
  dnnl::reorder::primitive_desc pd(engine(), from, engine(), to, attr);
  *scratch_bytes = std::max(*scratch_bytes, pd.scratchpad_desc().get_size());
  reorder.prim = dnnl::reorder(pd);
  reorder.arg(DNNL_ARG_FROM, output ? prim : user);
  reorder.arg(DNNL_ARG_TO, output ? user : prim);
}

void Arg::bind(void* user_ptr, char* ws) const {
  user.set_data_handle(user_ptr);
  if (reordered) prim.set_data_handle(ws + ws_off);
}

memory::dims dims4(int64_t a, int64_t b, int64_t c, int64_t d) { return {a, b, c, d}; }

dt to_dt(DType t) {
  LS_CHECK(t == DType::f32 || t == DType::bf16, "oneDNN kernel: dtype ", dtype_name(t),
           " is not float32 or bfloat16");
  return t == DType::bf16 ? dt::bf16 : dt::f32;
}

bool same_float_type(const std::vector<TensorType>& types) {
  for (const TensorType& t : types)
    if (t.dtype != types.front().dtype || (t.dtype != DType::f32 && t.dtype != DType::bf16))
      return false;
  return true;
}

}  // namespace lockstep::cpu
