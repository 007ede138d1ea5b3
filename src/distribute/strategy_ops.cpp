// The gradient all-reduce as ops of the compiled step:
//   all_reduce_start(g_1..g_k){group, bucket, replica} -> packed f32[sum numel]
//     packs the bucket's gradients (scaled by this replica's sample weight) and hands the
//     buffer to the strategy's communication thread; the executable schedules it right after
//     its last producer ("schedule_early"), so the reduction overlaps the rest of backward.
//   all_reduce_wait(packed){group, bucket, replica, ranks, shapes} -> g_1'..g_k'
//     waits for the bucket's reduction and unpacks the summed gradients.
//   cross_replica_sum(x){group, replica[, gradient]} -> sum of x over every replica
//     (synchronized BatchNormalization's statistics). Blocking, and queued on the same
//     communication thread as the buckets, so all replicas issue collectives in one order.
//     Its gradient is a cross_replica_sum of the output gradients, weighted: replica r's
//     gradients are scaled by its sample weight w_r when buckets are packed, so the backward
//     sum is (sum_r' w_r' dy_r') / w_r, which after that scaling contributes exactly the
//     gradient of the sample-weighted total loss.
#include <cmath>
#include <cstring>

#include "distribute/internal/strategy_runtime.h"
#include "lockstep/graph/autodiff.h"
#include "lockstep/graph/op_registry.h"
#include "ops/internal/kernel_util.h"

namespace lockstep::distribute {

namespace {

using Types = std::vector<TensorType>;

// With attr nonfinite_flag, the last input is the replica's loss (one value), packed as one
// float: 1 when it is NaN or inf, else 0, so the reduced bucket counts the bad replicas.
Types start_infer(const Node& n, const Types& in) {
  LS_CHECK(!in.empty(), "all_reduce_start needs at least one gradient");
  int64_t total = 0;
  for (auto& t : in) {
    LS_CHECK(t.dtype == DType::f32, "all_reduce_start: gradients must be float32, got ",
             dtype_name(t.dtype));
    total += t.shape.numel();
  }
  if (attr_b(n, "nonfinite_flag"))
    LS_CHECK(in.back().shape.numel() == 1, "all_reduce_start: the flagged loss must be a scalar");
  return {TensorType{DType::f32, Shape{total}}};
}

Types wait_infer(const Node& n, const Types& in) {
  LS_CHECK(in.size() == 1, "all_reduce_wait takes the packed bucket");
  const auto& ranks = attr_ints(n, "ranks");
  const auto& dims = attr_ints(n, "shapes");
  Types out;
  size_t k = 0;
  int64_t total = 0;
  for (int64_t r : ranks) {
    std::vector<int64_t> s(dims.begin() + int64_t(k), dims.begin() + int64_t(k) + r);
    k += size_t(r);
    out.push_back({DType::f32, Shape(s)});
    total += out.back().shape.numel();
  }
  if (attr_b(n, "nonfinite_flag")) {  // + the count of replicas whose loss was not finite
    out.push_back({DType::f32, Shape{}});
    total += 1;
  }
  LS_CHECK(total == in[0].shape.numel(), "all_reduce_wait: bucket has ", in[0].shape.numel(),
           " values, shapes say ", total);
  return out;
}

// The attributes every collective op reads, once per kernel.
struct Collective {
  int64_t group;
  int replica, bucket;
  bool flag;  // nonfinite_flag (start and wait) or gradient (cross_replica_sum)
};
Collective bucket_of(const Node& n) {
  return {attr_i(n, "group"), int(attr_i(n, "replica")), int(attr_i(n, "bucket")),
          attr_b(n, "nonfinite_flag")};
}

void start_kernel(const Collective& c, const KernelArgs& a) {
  GradientReducer* r = GradientReducer::lookup(c.group);
  const int replica = c.replica;
  const float w = r->weight(replica);
  float* out = a.out(0).data<float>();
  const bool flag = c.flag;
  const int num_grads = a.num_inputs - (flag ? 1 : 0);
  for (int i = 0; i < num_grads; ++i) {
    const float* g = a.in(i).data<float>();
    const int64_t m = a.in(i).numel();
    for (int64_t j = 0; j < m; ++j) out[j] = g[j] * w;
    out += m;
  }
  if (flag) *out = std::isfinite(a.in(num_grads).data<float>()[0]) ? 0.f : 1.f;
  r->start(replica, c.bucket, a.out(0).data<float>(), size_t(a.out(0).numel()));
}

void wait_kernel(const Collective& c, const KernelArgs& a) {
  GradientReducer* r = GradientReducer::lookup(c.group);
  r->wait(c.replica, c.bucket);
  const float* src = a.in(0).data<float>();
  for (int i = 0; i < a.num_outputs; ++i) {
    const size_t bytes = a.out(i).nbytes();
    std::memcpy(a.out(i).raw(), src, bytes);
    src += a.out(i).numel();
  }
}

Collective sum_of(const Node& n) {
  return {attr_i(n, "group"), int(attr_i(n, "replica")), 0, attr_b(n, "gradient")};
}

void cross_replica_sum_kernel(const Collective& c, const KernelArgs& a) {
  GradientReducer* r = GradientReducer::lookup(c.group);
  const int replica = c.replica;
  const bool grad = c.flag;
  const float w = grad ? r->weight(replica) : 1.f;
  const float* x = a.in(0).data<float>();
  float* y = a.out(0).data<float>();
  const int64_t m = a.in(0).numel();
  for (int64_t j = 0; j < m; ++j) y[j] = x[j] * w;
  r->sum_now(replica, y, size_t(m));
  if (grad) {
    const float inv = w > 0.f ? 1.f / w : 0.f;  // a replica without samples contributes nothing
    for (int64_t j = 0; j < m; ++j) y[j] *= inv;
  }
}

KernelFactory collective(Collective (*read)(const Node&),
                         void (*run)(const Collective&, const KernelArgs&)) {
  return [read, run](const Node& n, const std::vector<TensorType>&) {
    return make_kernel([c = read(n), run](const KernelArgs& a) { run(c, a); });
  };
}

using enum AttrType;
const AttrDecl kGroupAttr{"group", i64, NoDefault::required,
                          "the strategy's GradientReducer group"};
const AttrDecl kReplica{"replica", i64, NoDefault::required, "this replica's index"};
const AttrDecl kBucket{"bucket", i64, NoDefault::required, "the gradient bucket's index"};
const AttrDecl kNonfinite{"nonfinite_flag", boolean, false,
                          "the last input is the loss; count the replicas where it is not finite"};
const char* kGroup = "distribute";
const char* kXlaHostCollective =
    "the host strategies' bucketed all-reduce between replica executables (a communication "
    "thread); on xla the devices' gradient mean is one all_reduce inside the compiled step, and "
    "across workers the backend runs the step as two executables around the host all-reduce "
    "(all_reduce_wait's lowering unpacks the reduced bucket)";

}  // namespace

LOCKSTEP_REGISTER(strategy_ops) {
  OpRegistry& R = OpRegistry::get();
  R.add({.name = op::all_reduce_start,
         .signature = "(g_1, ..., g_k[, loss]) -> packed[sum numel]",
         .doc = "Packs a bucket of gradients (scaled by the replica's sample weight) and starts "
                "its reduction on the communication thread.",
         .attrs = {kGroupAttr,
                   kBucket,
                   kReplica,
                   kNonfinite,
                   {"schedule_early", boolean, false, "schedule right after the last producer"}},
         .infer = start_infer,
         .group = kGroup,
         .onnx = {.none = "a collective between replicas: not part of an exported model"},
         .xla = {.none = kXlaHostCollective}});
  R.add({.name = op::all_reduce_wait,
         .signature = "(packed) -> (g_1', ..., g_k'[, bad_replicas])",
         .doc = "Waits for the bucket's reduction and unpacks the summed gradients.",
         .attrs = {kGroupAttr,
                   kBucket,
                   kReplica,
                   kNonfinite,
                   {"ranks", i64_list, NoDefault::required, "each gradient's rank"},
                   {"shapes", i64_list, NoDefault::required, "the gradients' dims, concatenated"}},
         .infer = wait_infer,
         .group = kGroup,
         .onnx = {.none = "a collective between replicas: not part of an exported model"}});
  R.add({.name = op::cross_replica_sum,
         .signature = "(x) -> sum over replicas",
         .doc = "Sums x over every replica, blocking (synchronized BatchNormalization).",
         .attrs = {kGroupAttr,
                   kReplica,
                   {"gradient", boolean, false,
                    "this is the gradient: weight by the sample weights"}},
         .infer =
             [](const Node&, const Types& in) {
               LS_CHECK(in.size() == 1 && in[0].dtype == DType::f32,
                        "cross_replica_sum takes one float32 tensor");
               return Types{in[0]};
             },
         .grad =
             [](GradBuilder& b, const Node& n, const std::vector<Value>& dy) {
               Attrs a = n.attrs;
               a.set("gradient", true);
               return std::vector<Value>{b.add(op::cross_replica_sum, {dy[0]}, a)};
             },
         .group = kGroup,
         .onnx = {.none = "a collective between replicas: not part of an exported model"}});
  for (const std::string& backend : host_backends()) {
    R.add_kernel(op::cross_replica_sum, backend, collective(sum_of, cross_replica_sum_kernel));
    R.add_kernel(op::all_reduce_start, backend, collective(bucket_of, start_kernel));
    R.add_kernel(op::all_reduce_wait, backend, collective(bucket_of, wait_kernel));
  }
}

}  // namespace lockstep::distribute
