// The lowering of dropout: the reference kernel's masks, bit for bit. Element i keeps its
// value (times 1 / (1 - rate)) when word i % 4 of Philox4x32-10(key, counter = (step, i / 4)),
// as a unit float, is >= rate. The key (node id, attr seed, replica, model seed) is known when
// lowering; the step is the program's step argument. Only the default keying (by replica):
// the row-keyed form of op determinism (StepInfo::first_row) is not lowered. In a program of
// several replicas (one per device), counter word 1 is the replica's id instead of 0, so each
// replica draws its own masks (which then match no reference kernel's).
#include "backends/xla/lowering.h"
#include "lockstep/graph/op_registry.h"
#include "ops/internal/kernel_math.h"

namespace lockstep::xla {

namespace {

using Values = std::vector<HloValue>;

HloValue u32(LoweringContext& cx, const HloType& like, uint64_t v) {
  return cx.full({ElemType::u32, like.dims}, double(uint32_t(v)));
}

// (lo, hi) 32-bit words of a u64 value.
std::pair<HloValue, HloValue> split64(LoweringContext& cx, const HloValue& v) {
  HloValue shift = cx.full_like(v, 32.0);
  return {cx.b.convert(v, ElemType::u32),
          cx.b.convert(cx.b.shift_right_logical(v, shift), ElemType::u32)};
}

// (high, low) 32-bit halves of m * x for a u32 vector x and a 32-bit constant m.
std::pair<HloValue, HloValue> mul_hi_lo(LoweringContext& cx, const HloValue& x, uint32_t m) {
  HloValue wide = cx.b.convert(x, ElemType::u64);
  HloValue p = cx.b.multiply(wide, cx.full_like(wide, double(m)));
  auto [lo, hi] = split64(cx, p);
  return {hi, lo};
}

// Philox4x32-10 on counters (c0, c1, c2, c3), u32 vectors of one shape; key a constant.
std::array<HloValue, 4> philox(LoweringContext& cx, std::array<HloValue, 4> c, uint64_t key) {
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  const HloType& t = c[0].type;
  for (int round = 0; round < 10; ++round) {
    auto [hi0, lo0] = mul_hi_lo(cx, c[0], 0xD2511F53u);
    auto [hi1, lo1] = mul_hi_lo(cx, c[2], 0xCD9E8D57u);
    HloValue n0 = cx.b.bitwise_xor(cx.b.bitwise_xor(hi1, c[1]), u32(cx, t, k0));
    HloValue n2 = cx.b.bitwise_xor(cx.b.bitwise_xor(hi0, c[3]), u32(cx, t, k1));
    c = {n0, lo1, n2, lo0};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

// The unit floats of the reference's uint_to_unit_float for n elements (block i / 4, word
// i % 4), as f32 [n].
HloValue unit_floats(LoweringContext& cx, int64_t n, uint64_t key, const HloValue& step) {
  const int64_t blocks = (n + 3) / 4;
  const HloType t{ElemType::u32, {blocks}};
  HloValue step64 = cx.b.convert(cx.b.broadcast_in_dim(step, {blocks}, {}), ElemType::u64);
  auto [s_lo, s_hi] = split64(cx, step64);
  HloValue blk = cx.b.iota(t, 0);
  // Counter word 1: 0, or with replicas the replica's id (each replica of one program, on its
  // own rows, draws its own masks).
  HloValue word1 = u32(cx, t, 0);
  if (cx.num_replicas > 1)
    word1 = cx.b.broadcast_in_dim(
        cx.b.op("stablehlo.replica_id", {}, {HloType{ElemType::u32, {}}})[0], {blocks}, {});
  std::array<HloValue, 4> w = philox(cx, {blk, word1, s_lo, s_hi}, key);
  Values columns;
  for (const HloValue& word : w) columns.push_back(cx.b.reshape(word, {blocks, 1}));
  HloValue all = cx.b.reshape(cx.b.concatenate(columns, 1), {4 * blocks});
  if (4 * blocks != n) all = cx.b.slice(all, {0}, {n});
  HloValue top24 = cx.b.shift_right_logical(all, cx.full_like(all, 8.0));
  HloValue f = cx.b.convert(top24, ElemType::f32);
  return cx.b.multiply(f, cx.full_like(f, 1.0 / 16777216.0));
}

// (x) -> (y, mask): mask = scale where kept, else 0; y = x * mask.
Values dropout(LoweringContext& cx, const Node& n) {
  LS_CHECK(!cx.step.name.empty(), "dropout needs the program's step argument");
  HloValue x = cx.in(n, 0);
  const float rate = float(attr_f(n, "rate")), scale = float(1.0 / (1.0 - attr_f(n, "rate")));
  StepInfo info;
  info.replica = cx.replica;
  info.seed = cx.seed;
  const uint64_t key = ew::dropout_key(ew::node_key(n), &info);
  HloValue u = unit_floats(cx, x.type.numel(), key, cx.step);
  HloValue keep = cx.b.compare(u, cx.full_like(u, double(rate)), Compare::GE);
  HloValue mask = cx.b.select(keep, cx.full_like(u, double(scale)), cx.full_like(u, 0.0));
  mask = cx.b.reshape(mask, x.type.dims);
  return {cx.b.multiply(x, mask), mask};
}

}  // namespace

// The attention lowering's dropout draws (lowering_attention.cpp), the same as dropout's.
HloValue philox_unit_floats(LoweringContext& cx, int64_t n, uint64_t key, const HloValue& step) {
  return unit_floats(cx, n, key, step);
}

LOCKSTEP_REGISTER(xla_random_lowerings) { register_lowering(op::dropout, dropout); }

}  // namespace lockstep::xla
