#!/usr/bin/env python3
"""Writes known_values.json: expected outputs of every forward op for small fixed inputs.

The values are computed here in double precision by formulas written from the op definitions
(docs/ops.md, the Keras / TensorFlow documentation of the matching layer or function), not from
Lockstep's kernels, so a wrong kernel formula shared by both backends (they share the elementwise
math) cannot hide: tests/ops/known_values_test.cpp runs every case on the "reference" and the
"cpu" backend and compares with these numbers.

Standard library only. Run from anywhere; it rewrites the JSON next to this script:
    python3 tests/ops/known_values/make_known_values.py
Inputs are multiples of 1/64 (exact in float32), so both sides start from the same numbers.

JSON layout: {"cases": [{"name", "op", "attrs", "inputs": [tensor], "outputs": [tensor],
"tol", "why"}]} with tensor = {"dtype", "shape", "values"} (values flat, row-major). Attr values
keep their JSON type: int -> int64, float -> double (always written with a '.'), bool, string,
list of ints -> int list, list of floats -> double list. A case passes when every output element
satisfies |got - want| <= tol * (1 + |want|).
"""
import json
import math
import os
import random

CASES = []
DEFAULT_TOL = 1e-5


# ---------------------------------------------------------------- tensors and helpers

class T:
    """A dense row-major tensor: shape + flat list of Python numbers."""

    def __init__(self, shape, values, dtype="float32"):
        self.shape = list(shape)
        self.values = list(values)
        self.dtype = dtype
        assert len(self.values) == numel(self.shape), (shape, len(self.values))

    def at(self, *idx):
        return self.values[flat(self.shape, idx)]

    def json(self):
        if self.dtype == "float32":
            vals = [float(v) for v in self.values]
        else:
            vals = [int(v) for v in self.values]
        return {"dtype": self.dtype, "shape": self.shape, "values": vals}


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def flat(shape, idx):
    k = 0
    for d, i in zip(shape, idx):
        k = k * d + i
    return k


def indices(shape):
    """All index tuples of `shape` in row-major order."""
    if not shape:
        yield ()
        return
    for i in range(shape[0]):
        for rest in indices(shape[1:]):
            yield (i,) + rest


def grid(rng, n, lo, hi, step=1.0 / 64):
    """n values on the 1/64 grid in [lo, hi] (exact in float32); distinct where possible."""
    k_lo, k_hi = int(math.ceil(lo / step)), int(math.floor(hi / step))
    pool = list(range(k_lo, k_hi + 1))
    if len(pool) >= n:
        ks = rng.sample(pool, n)
    else:
        ks = [rng.choice(pool) for _ in range(n)]
    return [k * step for k in ks]


def rand(seed, shape, lo=-2.0, hi=2.0):
    return T(shape, grid(random.Random(seed), numel(shape), lo, hi))


def ints(shape, values, dtype="int32"):
    return T(shape, values, dtype)


def case(name, op, inputs, outputs, attrs=None, tol=DEFAULT_TOL, why=""):
    assert all(c["name"] != name for c in CASES), name
    CASES.append({"name": name, "op": op, "attrs": attrs or {}, "inputs": [t.json() for t in inputs],
                  "outputs": [t.json() for t in outputs], "tol": tol, "why": why})


def map1(fn, x):
    return T(x.shape, [fn(v) for v in x.values])


def bshape(a, b):
    r = max(len(a), len(b))
    a = [1] * (r - len(a)) + a
    b = [1] * (r - len(b)) + b
    out = []
    for x, y in zip(a, b):
        assert x == y or x == 1 or y == 1
        out.append(max(x, y))
    return out


def bget(t, out_idx):
    """Element of t broadcast to an index of the (larger) broadcast shape (numpy rules)."""
    idx = out_idx[len(out_idx) - len(t.shape):]
    return t.at(*[0 if d == 1 else i for d, i in zip(t.shape, idx)])


def map2(fn, a, b):
    s = bshape(a.shape, b.shape)
    return T(s, [fn(bget(a, i), bget(b, i)) for i in indices(s)])


def sigmoid(v):
    return 1.0 / (1.0 + math.exp(-v)) if v >= 0 else math.exp(v) / (1.0 + math.exp(v))


def softplus(v):  # log(1 + e^v), stable
    return max(v, 0.0) + math.log1p(math.exp(-abs(v)))


def logsumexp(vs):
    m = max(vs)
    return m + math.log(sum(math.exp(v - m) for v in vs))


def axis_lines(shape, axis):
    """Index lists of every 1-D line along `axis`."""
    other = [d for i, d in enumerate(shape) if i != axis]
    for o in indices(other):
        line = []
        for k in range(shape[axis]):
            idx = list(o)
            idx.insert(axis, k)
            line.append(flat(shape, idx))
        yield line


# ---------------------------------------------------------------- elementwise

def elementwise():
    a23, b23 = rand(1, [2, 3]), rand(2, [2, 3])
    b3 = rand(3, [3])
    a214, b43 = rand(4, [2, 1, 4]), rand(5, [3, 1])  # -> [2, 3, 4]
    binaries = {
        "add": lambda x, y: x + y,
        "sub": lambda x, y: x - y,
        "mul": lambda x, y: x * y,
        "maximum": max,
        "minimum": min,
    }
    for op, fn in binaries.items():
        case(op + "_same", op, [a23, b23], [map2(fn, a23, b23)])
        case(op + "_row", op, [a23, b3], [map2(fn, a23, b3)])
        case(op + "_outer", op, [a214, b43], [map2(fn, a214, b43)])
    # div: keep |b| away from zero; broadcast both ways.
    den = T([2, 3], [0.5, -1.25, 2.0, 3.5, -0.75, 1.5])
    den3 = T([3], [1.75, -0.5, 4.0])
    case("div_same", "div", [a23, den], [map2(lambda x, y: x / y, a23, den)])
    case("div_row", "div", [a23, den3], [map2(lambda x, y: x / y, a23, den3)])
    case("div_scalar_numerator", "div", [T([1], [3.0]), den],
         [map2(lambda x, y: x / y, T([1], [3.0]), den)])
    # maximum/minimum with ties (either side is the same value).
    ta, tb = T([4], [1.0, -2.0, 0.5, 3.0]), T([4], [1.0, -3.0, 0.5, 4.0])
    case("maximum_ties", "maximum", [ta, tb], [map2(max, ta, tb)])
    case("minimum_ties", "minimum", [ta, tb], [map2(min, ta, tb)])

    x = rand(6, [2, 5], -3.0, 3.0)
    pos = rand(7, [2, 5], 0.0625, 9.0)
    case("neg", "neg", [x], [map1(lambda v: -v, x)])
    case("exp", "exp", [x], [map1(math.exp, x)])
    case("log", "log", [pos], [map1(math.log, pos)])
    case("sqrt", "sqrt", [pos], [map1(math.sqrt, pos)])
    case("square", "square", [x], [map1(lambda v: v * v, x)])
    case("abs", "abs", [x], [map1(abs, x)])
    case("scale_shift", "scale_shift", [x], [map1(lambda v: v * 2.5 - 0.75, x)],
         {"scale": 2.5, "shift": -0.75})
    case("scale_shift_rescaling", "scale_shift", [pos], [map1(lambda v: v / 255.0, pos)],
         {"scale": 1.0 / 255.0, "shift": 0.0}, why="Rescaling(1/255)")

    # Activations (Keras definitions). Inputs span both signs, beyond 6 for relu6, and
    # large magnitudes where a naive softplus/sigmoid would overflow.
    act = T([3, 6], [-7.5, -3.0, -1.25, -0.5, -0.015625, 0.0,
                     0.015625, 0.25, 0.75, 1.5, 2.875, 5.75,
                     6.0, 6.5, 9.0, -30.0, 30.0, -0.875])
    gelu = lambda v: 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0)))
    gelu_tanh = lambda v: 0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))
    acts = [
        ("relu", {}, lambda v: max(v, 0.0)),
        ("relu6", {}, lambda v: min(max(v, 0.0), 6.0)),
        ("sigmoid", {}, sigmoid),
        ("tanh", {}, math.tanh),
        ("gelu", {}, gelu),
        ("gelu", {"approximate": False}, gelu),
        ("gelu", {"approximate": True}, gelu_tanh),
        ("swish", {}, lambda v: v * sigmoid(v)),
        ("leaky_relu", {}, lambda v: v if v >= 0 else 0.2 * v),
        ("leaky_relu", {"alpha": 0.05}, lambda v: v if v >= 0 else 0.05 * v),
        ("elu", {}, lambda v: v if v > 0 else math.expm1(v)),
        ("elu", {"alpha": 0.5}, lambda v: v if v > 0 else 0.5 * math.expm1(v)),
        ("softplus", {}, softplus),
    ]
    for op, attrs, fn in acts:
        tag = "".join("_%s_%s" % (k, str(v).lower()) for k, v in attrs.items())
        case(op + tag, op, [act], [map1(fn, act)], attrs)


# ---------------------------------------------------------------- reductions, softmax, arrays

def reduce(x, axes, keepdims, fn):
    r = len(x.shape)
    axes = sorted(a % r for a in (axes if axes else range(r)))
    out_shape = []
    for i, d in enumerate(x.shape):
        if i in axes:
            if keepdims:
                out_shape.append(1)
        else:
            out_shape.append(d)
    groups = {}
    for idx in indices(x.shape):
        key = tuple(0 if i in axes else v for i, v in enumerate(idx))
        groups.setdefault(key, []).append(x.at(*idx))
    vals = [fn(groups[k]) for k in sorted(groups)]
    return T(out_shape, vals)


def reductions():
    fns = {"reduce_sum": sum, "reduce_mean": lambda v: sum(v) / len(v), "reduce_max": max}
    x = rand(10, [2, 3, 4])
    for op, fn in fns.items():
        for tag, axes, keep in [("axis0", [0], False), ("axis1_keep", [1], True),
                                ("last_neg", [-1], False), ("outer_two", [0, 2], False),
                                ("all_keep", [0, 1, 2], True)]:
            case(op + "_" + tag, op, [x], [reduce(x, axes, keep, fn)],
                 {"axes": axes, "keepdims": keep})
        case(op + "_default_all", op, [x], [reduce(x, None, False, fn)],
             why="no axes attr: reduce every axis to a scalar")
        case(op + "_empty_axes", op, [x], [reduce(x, None, False, fn)], {"axes": []},
             why="empty axes: reduce every axis")
    neg = rand(11, [3, 4], -5.0, -0.5)
    case("reduce_max_all_negative", "reduce_max", [neg], [reduce(neg, [1], False, max)],
         {"axes": [1], "keepdims": False}, why="the max must not start from 0")

    b = rand(12, [2, 1])
    out = T([2, 2, 3], [bget(b, i) for i in indices([2, 2, 3])])
    case("broadcast_to", "broadcast_to", [b], [out], {"shape": [2, 2, 3]})
    r = rand(13, [3])
    case("broadcast_to_row", "broadcast_to", [r], [T([4, 3], [bget(r, i) for i in indices([4, 3])])],
         {"shape": [4, 3]})

    xb, bb = rand(14, [2, 2, 3]), rand(15, [3])
    case("bias_add", "bias_add", [xb, bb], [map2(lambda u, v: u + v, xb, bb)])
    x1, b1 = rand(16, [4]), rand(17, [4])
    case("bias_add_rank1", "bias_add", [x1, b1], [map2(lambda u, v: u + v, x1, b1)])

    def softmax(x, axis, log):
        out = [0.0] * len(x.values)
        for line in axis_lines(x.shape, axis % len(x.shape)):
            vs = [x.values[k] for k in line]
            lse = logsumexp(vs)
            for k in line:
                out[k] = x.values[k] - lse if log else math.exp(x.values[k] - lse)
        return T(x.shape, out)

    xs = rand(18, [2, 3, 4], -4.0, 4.0)
    big = T([2, 3], [1000.0, 999.0, 998.5, -1000.0, -1001.0, -999.25])
    for op, log in [("softmax", False), ("log_softmax", True)]:
        case(op + "_default_last", op, [xs], [softmax(xs, -1, log)])
        case(op + "_axis1", op, [xs], [softmax(xs, 1, log)], {"axis": 1})
        case(op + "_axis0", op, [xs], [softmax(xs, 0, log)], {"axis": 0})
        case(op + "_large_logits", op, [big], [softmax(big, -1, log)],
             tol=1e-4 if log else DEFAULT_TOL,
             why="needs the max subtracted (exp(1000) overflows); float32 carries |x| ~ 1000 "
                 "to 6e-5, hence the wider tolerance of log_softmax")


def arrays():
    x = T([2, 4], [-2.75, -1.5, -0.25, 0.0, 0.5, 1.75, 2.25, 3.984375])
    case("cast_f32_to_i32", "cast", [x], [T(x.shape, [int(v) for v in x.values], "int32")],
         {"dtype": "int32"}, why="float -> int truncates toward zero (tf.cast)")
    xi = ints([5], [-3, 0, 7, 100, -41])
    case("cast_i32_to_f32", "cast", [xi], [T([5], [float(v) for v in xi.values])], {"dtype": "float32"})
    xu = ints([4], [0, 7, 128, 255], "uint8")
    case("cast_u8_to_f32", "cast", [xu], [T([4], [0.0, 7.0, 128.0, 255.0])], {"dtype": "float32"})
    case("cast_f32_to_f32", "cast", [x], [x], {"dtype": "float32"})

    a, b, c = rand(20, [2, 1, 3]), rand(21, [2, 2, 3]), rand(22, [2, 3, 3])
    def concat(ts, axis):
        axis %= len(ts[0].shape)
        shape = list(ts[0].shape)
        shape[axis] = sum(t.shape[axis] for t in ts)
        vals = []
        for idx in indices(shape):
            k = idx[axis]
            for t in ts:
                if k < t.shape[axis]:
                    vals.append(t.at(*(idx[:axis] + (k,) + idx[axis + 1:])))
                    break
                k -= t.shape[axis]
        return T(shape, vals)
    case("concat_axis1_three", "concat", [a, b, c], [concat([a, b, c], 1)], {"axis": 1})
    p, q = rand(23, [1, 2, 3]), rand(24, [2, 2, 3])
    case("concat_axis0", "concat", [p, q], [concat([p, q], 0)], {"axis": 0})
    u, v = rand(25, [2, 2, 1]), rand(26, [2, 2, 2])
    case("concat_default_last", "concat", [u, v], [concat([u, v], -1)], why="axis defaults to -1")

    s = rand(27, [3, 4, 5])
    def slice_(t, begin, size):
        size = [t.shape[i] - begin[i] if n < 0 else n for i, n in enumerate(size)]
        return T(size, [t.at(*[i + b for i, b in zip(idx, begin)]) for idx in indices(size)])
    case("slice_3d", "slice", [s], [slice_(s, [1, 0, 2], [2, 3, 2])],
         {"begin": [1, 0, 2], "size": [2, 3, 2]})
    case("slice_to_end", "slice", [s], [slice_(s, [0, 2, 1], [-1, 1, -1])],
         {"begin": [0, 2, 1], "size": [-1, 1, -1]}, why="size -1 runs to the end")

    def pad(t, before, after):
        shape = [n + b + a for n, b, a in zip(t.shape, before, after)]
        vals = []
        for idx in indices(shape):
            src = [i - b for i, b in zip(idx, before)]
            inside = all(0 <= i < n for i, n in zip(src, t.shape))
            vals.append(t.at(*src) if inside else 0.0)
        return T(shape, vals)
    g = rand(30, [1, 3, 2, 2])
    case("pad_zero_padding2d", "pad", [g], [pad(g, [0, 0, 1, 0], [0, 1, 2, 0])],
         {"before": [0, 0, 1, 0], "after": [0, 1, 2, 0]},
         why="keras.layers.ZeroPadding2D(((0, 1), (1, 2))) on NHWC")

    r = rand(28, [2, 6])
    case("reshape", "reshape", [r], [T([3, 4], r.values)], {"shape": [3, 4]})
    case("reshape_infer", "reshape", [r], [T([4, 3], r.values)], {"shape": [-1, 3]})
    case("identity", "identity", [r], [r])
    case("stop_gradient", "stop_gradient", [r], [r])
    case("ones_like", "ones_like", [r], [T(r.shape, [1.0] * 12)])
    case("zeros_like", "zeros_like", [r], [T(r.shape, [0.0] * 12)])
    case("constant", "constant", [], [T([2, 3], [-1.25] * 6)], {"value": -1.25, "shape": [2, 3]})
    case("constant_scalar", "constant", [], [T([], [3.5])], {"value": 3.5})

    d = rand(29, [3, 5])
    case("dropout_rate0", "dropout", [d], [d, T(d.shape, [1.0] * 15)], {"rate": 0.0, "seed": 3},
         why="rate 0 keeps every unit with scale 1 (randomness disabled); rate > 0 is checked "
             "by KnownValues.RandomOpsKeepTheirDefinitions")


# ---------------------------------------------------------------- losses and metrics

def losses():
    logits = T([4, 3], [2.0, -1.0, 0.5, 0.25, 0.25, 3.0, -2.5, 1.5, 0.75, 4.0, 3.875, -1.0])
    labels = [0, 2, 1, 1]

    def xent(row, target):
        lse = logsumexp(row)
        return -sum(t * (z - lse) for z, t in zip(row, target))

    def rows(t):
        c = t.shape[-1]
        return [t.values[i:i + c] for i in range(0, len(t.values), c)]

    def sparse_loss(lg, lab, ls=0.0):
        c = lg.shape[-1]
        return [xent(r, [(1.0 - ls) * (1.0 if j == l else 0.0) + ls / c for j in range(c)])
                for r, l in zip(rows(lg), lab)]

    for ls in [0.0, 0.1]:
        attrs = {} if ls == 0.0 else {"label_smoothing": ls}
        tag = "" if ls == 0.0 else "_smoothing"
        case("sparse_softmax_cross_entropy" + tag, "sparse_softmax_cross_entropy",
             [logits, ints([4], labels)], [T([4], sparse_loss(logits, labels, ls))], attrs)
    case("sparse_softmax_cross_entropy_f32_labels", "sparse_softmax_cross_entropy",
         [logits, T([4], [float(l) for l in labels])], [T([4], sparse_loss(logits, labels))],
         why="labels may be float32 holding integers")
    case("sparse_softmax_cross_entropy_column_labels", "sparse_softmax_cross_entropy",
         [logits, ints([4, 1], labels)], [T([4], sparse_loss(logits, labels))],
         why="labels [N, 1] accepted")
    lg3 = T([2, 2, 3], logits.values)
    case("sparse_softmax_cross_entropy_rank3", "sparse_softmax_cross_entropy",
         [lg3, ints([2, 2], labels)], [T([2, 2], sparse_loss(logits, labels))],
         why="class axis is the last one")
    huge = T([2, 3], [100.0, -100.0, 0.0, -50.0, 60.0, 59.0])
    case("sparse_softmax_cross_entropy_large_logits", "sparse_softmax_cross_entropy",
         [huge, ints([2], [1, 2])], [T([2], sparse_loss(huge, [1, 2]))],
         why="log-sum-exp must be stable (loss 200 for the wrong class)")

    targets = T([4, 3], [0.7, 0.2, 0.1, 0.0, 0.0, 1.0, 0.25, 0.25, 0.5, 0.0, 1.0, 0.0])
    def dense_loss(lg, tg, ls=0.0):
        c = lg.shape[-1]
        return [xent(r, [(1.0 - ls) * t + ls / c for t in tr]) for r, tr in zip(rows(lg), rows(tg))]
    # targets are not multiples of 1/64: written as float32-rounded values so both sides agree.
    targets = T(targets.shape, [f32(v) for v in targets.values])
    for ls in [0.0, 0.2]:
        attrs = {} if ls == 0.0 else {"label_smoothing": ls}
        tag = "" if ls == 0.0 else "_smoothing"
        case("softmax_cross_entropy" + tag, "softmax_cross_entropy", [logits, targets],
             [T([4], dense_loss(logits, targets, ls))], attrs)

    z = T([2, 4], [-3.0, -0.5, 0.0, 0.75, 2.5, -20.0, 20.0, 1.25])
    t = T([2, 4], [0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.25])
    bce = lambda zz, tt: max(zz, 0.0) - zz * tt + math.log1p(math.exp(-abs(zz)))
    case("sigmoid_cross_entropy", "sigmoid_cross_entropy", [z, t], [map2(bce, z, t)],
         why="-t log sigmoid(z) - (1-t) log(1-sigmoid(z)), elementwise, stable at |z| = 20")

    probs = T([4, 3], [0.1, 0.7, 0.2, 0.5, 0.25, 0.25 + 1.0 / 64, 0.3, 0.3 + 1.0 / 64, 0.4,
                       0.05, 0.05, 0.9])
    probs = T(probs.shape, [f32(v) for v in probs.values])
    plabels = [1, 0, 0, 2]
    argmax = lambda r: max(range(len(r)), key=lambda j: (r[j], -j))
    sca = [1.0 if argmax(r) == l else 0.0 for r, l in zip(rows(probs), plabels)]
    case("sparse_categorical_accuracy", "sparse_categorical_accuracy", [probs, ints([4], plabels)],
         [T([4], sca)])
    case("sparse_categorical_accuracy_f32_labels", "sparse_categorical_accuracy",
         [probs, T([4], [float(l) for l in plabels])], [T([4], sca)])
    onehot = T([4, 3], [1.0 if j == l else 0.0 for l in [1, 2, 1, 2] for j in range(3)])
    ca = [1.0 if argmax(r) == argmax(o) else 0.0 for r, o in zip(rows(probs), rows(onehot))]
    case("categorical_accuracy", "categorical_accuracy", [probs, onehot], [T([4], ca)])
    # in_top_k: rank of the label's score among the row (no ties in these rows at the label).
    scores = T([3, 4], [0.5, 2.0, -1.0, 1.0, 3.0, 2.5, 2.75, -4.0, 0.0, 0.25, -0.5, 0.125])
    tlab = [3, 1, 2]
    for k in [1, 2, 3]:
        hit = []
        for r, l in zip(rows(scores), tlab):
            greater = sum(1 for v in r if v > r[l])
            hit.append(1.0 if greater < k else 0.0)
        case("in_top_k_k%d" % k, "in_top_k", [scores, ints([3], tlab)], [T([3], hit)], {"k": k})
    pred = T([2, 3], [0.25, 0.5, 0.75, 0.875, 0.125, 0.5 + 1.0 / 64])
    tgt = T([2, 3], [0.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    for thr, attrs in [(0.5, {}), (0.8, {"threshold": 0.8})]:
        acc = map2(lambda p, y: 1.0 if (1.0 if p > thr else 0.0) == y else 0.0, pred, tgt)
        tag = "" if not attrs else "_threshold"
        case("binary_accuracy" + tag, "binary_accuracy", [pred, tgt], [acc], attrs,
             why="Keras: y_pred > threshold (strict), compared with y_true")


def f32(v):
    import struct
    return struct.unpack("f", struct.pack("f", v))[0]


# ---------------------------------------------------------------- nn: matmul, conv, pool, norms

def nn():
    a, b = rand(30, [2, 3]), rand(31, [3, 4])
    def mm(A, B, ta=False, tb=False):
        M = A.shape[1] if ta else A.shape[0]
        K = A.shape[0] if ta else A.shape[1]
        N = B.shape[0] if tb else B.shape[1]
        ga = (lambda i, k: A.at(k, i)) if ta else (lambda i, k: A.at(i, k))
        gb = (lambda k, j: B.at(j, k)) if tb else (lambda k, j: B.at(k, j))
        return T([M, N], [sum(ga(i, k) * gb(k, j) for k in range(K)) for i in range(M) for j in range(N)])
    case("matmul", "matmul", [a, b], [mm(a, b)])
    at, bt = rand(32, [3, 2]), rand(33, [4, 3])
    case("matmul_transpose_a", "matmul", [at, b], [mm(at, b, ta=True)], {"transpose_a": True})
    case("matmul_transpose_b", "matmul", [a, bt], [mm(a, bt, tb=True)], {"transpose_b": True})
    case("matmul_transpose_both", "matmul", [at, bt], [mm(at, bt, True, True)],
         {"transpose_a": True, "transpose_b": True})

    def axis_geom(n, k, s, d, padding):
        eff = (k - 1) * d + 1
        if padding == "same":
            out = -(-n // s)
            total = max((out - 1) * s + eff - n, 0)
            return out, total // 2
        return (n - eff) // s + 1, 0

    def conv(x, w, bias=None, strides=(1, 1), padding="valid", dil=(1, 1), groups=1, relu=False,
             pads=None):
        N, H, W, C = x.shape
        KH, KW, Cg, O = w.shape
        if pads:
            OH = (H + pads[0] + pads[1] - ((KH - 1) * dil[0] + 1)) // strides[0] + 1
            OW = (W + pads[2] + pads[3] - ((KW - 1) * dil[1] + 1)) // strides[1] + 1
            PT, PL = pads[0], pads[2]
        else:
            OH, PT = axis_geom(H, KH, strides[0], dil[0], padding)
            OW, PL = axis_geom(W, KW, strides[1], dil[1], padding)
        Og = O // groups
        vals = []
        for n, oh, ow, o in indices([N, OH, OW, O]):
            g = o // Og
            acc = bias.values[o] if bias else 0.0
            for kh in range(KH):
                ih = oh * strides[0] - PT + kh * dil[0]
                if not 0 <= ih < H:
                    continue
                for kw in range(KW):
                    iw = ow * strides[1] - PL + kw * dil[1]
                    if not 0 <= iw < W:
                        continue
                    for ci in range(Cg):
                        acc += x.at(n, ih, iw, g * Cg + ci) * w.at(kh, kw, ci, o)
            vals.append(max(acc, 0.0) if relu else acc)
        return T([N, OH, OW, O], vals)

    x = rand(34, [2, 5, 6, 2])
    w = rand(35, [3, 3, 2, 3])
    case("conv2d_valid", "conv2d", [x, w], [conv(x, w)])
    case("conv2d_same", "conv2d", [x, w], [conv(x, w, padding="same")], {"padding": "same"})
    case("conv2d_same_stride2", "conv2d", [x, w], [conv(x, w, strides=(2, 2), padding="same")],
         {"padding": "same", "strides": [2, 2]},
         why="odd total padding: Keras puts the extra row/column at the bottom/right")
    case("conv2d_valid_strides_2_1", "conv2d", [x, w], [conv(x, w, strides=(2, 1))],
         {"strides": [2, 1]})
    case("conv2d_dilated_same", "conv2d", [x, w], [conv(x, w, padding="same", dil=(2, 2))],
         {"padding": "same", "dilations": [2, 2]})
    w2 = rand(36, [2, 3, 2, 4])
    case("conv2d_explicit_pads", "conv2d", [x, w2], [conv(x, w2, pads=[1, 0, 2, 1])],
         {"pads": [1, 0, 2, 1]})
    xg, wg = rand(37, [1, 4, 4, 4]), rand(38, [3, 3, 2, 6])
    case("conv2d_groups", "conv2d", [xg, wg], [conv(xg, wg, padding="same", groups=2)],
         {"padding": "same", "groups": 2})
    bias = rand(39, [3])
    case("conv2d_fused_bias_relu", "conv2d", [x, w, bias],
         [conv(x, w, bias=bias, padding="same", relu=True)],
         {"padding": "same", "fused_bias": True, "activation": "relu"})
    case("conv2d_fused_bias_linear", "conv2d", [x, w, bias], [conv(x, w, bias=bias)],
         {"fused_bias": True})

    # conv2d_pointwise_depthwise (the cpu backend's fused pair): a 1x1 conv with bias and
    # activation, then a depthwise 3x3 conv with bias and dw_activation, as two conv2d.
    def act(t, name):
        f = {"linear": lambda v: v, "relu": lambda v: max(v, 0.0),
             "relu6": lambda v: min(max(v, 0.0), 6.0), "swish": lambda v: v * sigmoid(v)}[name]
        return T(t.shape, [f(v) for v in t.values])

    for tag, xs, strides, pads, a1, a2 in [("s2", [1, 6, 4, 2], [2, 2], [0, 1, 0, 1], "relu6",
                                            "swish"),
                                           ("same", [2, 3, 3, 2], [1, 1], [1, 1, 1, 1], "swish",
                                            "relu")]:
        xp = rand(90, xs)
        w1, b1 = rand(91, [1, 1, 2, 4]), rand(92, [4])
        wd, bd = rand(93, [3, 3, 1, 4]), rand(94, [4])
        mid = act(conv(xp, w1, bias=b1), a1)
        y = act(conv(mid, wd, bias=bd, strides=tuple(strides), pads=pads, groups=4), a2)
        case("conv2d_pointwise_depthwise_" + tag, "conv2d_pointwise_depthwise",
             [xp, w1, b1, wd, bd], [y],
             {"activation": a1, "dw_activation": a2, "dw_strides": strides, "dw_pads": pads},
             why="the 1x1 conv (bias, activation), then the depthwise conv (groups = channels) "
                 "with its own bias, pads and activation")

    def pool(x, kind, size=(2, 2), strides=None, padding="valid"):
        strides = strides or size
        N, H, W, C = x.shape
        OH, PT = axis_geom(H, size[0], strides[0], 1, padding)
        OW, PL = axis_geom(W, size[1], strides[1], 1, padding)
        vals = []
        for n, oh, ow, c in indices([N, OH, OW, C]):
            win = [x.at(n, ih, iw, c)
                   for ih in range(oh * strides[0] - PT, oh * strides[0] - PT + size[0]) if 0 <= ih < H
                   for iw in range(ow * strides[1] - PL, ow * strides[1] - PL + size[1]) if 0 <= iw < W]
            vals.append(max(win) if kind == "max" else sum(win) / len(win))
        return T([N, OH, OW, C], vals)

    xp = rand(40, [2, 5, 5, 2], -3.0, -0.25)  # all negative: padding must not win a max
    xq = rand(41, [1, 4, 6, 3])
    for kind in ["max", "avg"]:
        op = kind + "_pool2d"
        case(op + "_default", op, [xq], [pool(xq, kind)], why="pool_size 2, strides = pool_size")
        case(op + "_valid_3_s2", op, [xp], [pool(xp, kind, (3, 3), (2, 2))],
             {"pool_size": [3, 3], "strides": [2, 2], "padding": "valid"})
        case(op + "_same_2", op, [xp], [pool(xp, kind, (2, 2), None, "same")],
             {"pool_size": [2, 2], "padding": "same"},
             why="5 -> 3 with padding at the bottom/right; avg excludes padding (Keras)")
        case(op + "_same_3_s1", op, [xp], [pool(xp, kind, (3, 3), (1, 1), "same")],
             {"pool_size": [3, 3], "strides": [1, 1], "padding": "same"})
        case(op + "_rect", op, [xq], [pool(xq, kind, (2, 3), (1, 2))],
             {"pool_size": [2, 3], "strides": [1, 2]})

    def norm_stats(vals):
        m = sum(vals) / len(vals)
        return m, sum((v - m) ** 2 for v in vals) / len(vals)

    xb = rand(42, [2, 3, 2, 3], -2.0, 3.0)
    gamma, beta = T([3], [1.5, -0.5, 0.75]), T([3], [0.25, 1.0, -2.0])
    C = 3
    for eps, attrs in [(1e-3, {}), (0.1, {"epsilon": 0.1})]:
        means, vars_ = [], []
        for c in range(C):
            m, v = norm_stats(xb.values[c::C])
            means.append(m)
            vars_.append(v)
        y = [gamma.values[i % C] * (xv - means[i % C]) / math.sqrt(vars_[i % C] + eps) + beta.values[i % C]
             for i, xv in enumerate(xb.values)]
        tag = "" if not attrs else "_epsilon"
        case("batch_norm_train" + tag, "batch_norm_train", [xb, gamma, beta],
             [T(xb.shape, y), T([C], means), T([C], vars_)], attrs,
             why="statistics over every axis but the last; biased variance; epsilon defaults to 1e-3")
    mm_, mv = T([3], [0.5, -0.25, 1.0]), T([3], [2.0, 0.5, 0.0625])
    for eps, attrs in [(1e-3, {}), (0.01, {"epsilon": 0.01})]:
        y = [gamma.values[i % C] * (xv - mm_.values[i % C]) / math.sqrt(mv.values[i % C] + eps)
             + beta.values[i % C] for i, xv in enumerate(xb.values)]
        tag = "" if not attrs else "_epsilon"
        case("batch_norm_infer" + tag, "batch_norm_infer", [xb, gamma, beta, mm_, mv],
             [T(xb.shape, y)], attrs)
    # batch_norm_fold: a conv's weights [.., C] and bias with the statistics folded in.
    wf = rand(44, [2, 2, 2, 3], -1.0, 1.0)
    bf = T([3], [0.5, -1.0, 2.0])
    s = [gamma.values[c] / math.sqrt(mv.values[c] + 1e-3) for c in range(C)]
    w_out = [v * s[i % C] for i, v in enumerate(wf.values)]
    b_plain = [beta.values[c] - mm_.values[c] * s[c] for c in range(C)]
    case("batch_norm_fold", "batch_norm_fold", [wf, gamma, beta, mm_, mv],
         [T(wf.shape, w_out), T([C], b_plain)], {},
         why="s = gamma / sqrt(var + eps) scales the last axis; bias beta - mean * s")
    case("batch_norm_fold_bias", "batch_norm_fold", [wf, gamma, beta, mm_, mv, bf],
         [T(wf.shape, w_out), T([C], [b_plain[c] + bf.values[c] * s[c] for c in range(C)])], {},
         why="with the conv's own bias b: + b * s")

    xl = rand(43, [2, 3, 4], -2.0, 2.0)
    gl, bl = T([4], [1.0, 0.5, -1.5, 2.0]), T([4], [0.0, 0.25, -0.5, 1.0])
    for eps, attrs in [(1e-3, {}), (1e-5, {"epsilon": 1e-5})]:
        y, means, rstds = [], [], []
        for r in range(6):
            row = xl.values[4 * r:4 * r + 4]
            m, v = norm_stats(row)
            rs = 1.0 / math.sqrt(v + eps)
            means.append(m)
            rstds.append(rs)
            y += [gl.values[j] * (row[j] - m) * rs + bl.values[j] for j in range(4)]
        tag = "" if not attrs else "_epsilon"
        case("layer_norm" + tag, "layer_norm", [xl, gl, bl],
             [T(xl.shape, y), T([2, 3], means), T([2, 3], rstds)], attrs,
             why="over the last axis; outputs (y, mean, 1/sqrt(var + eps)); epsilon defaults to 1e-3")


# ---------------------------------------------------------------- upsampling

def upsampling():
    # keras.layers.UpSampling2D: nearest repeats each pixel (ops.repeat); bilinear is
    # jax.image.resize's "linear": output j samples c = (j + 0.5) / s - 0.5 with the triangle
    # kernel max(0, 1 - |c - i|) over the input pixels i, normalised by its sum (written that way
    # here, not as the kernels' clamped two-tap form).
    def axis_weights(n, s, bilinear):
        rows = []
        for j in range(n * s):
            if not bilinear:
                rows.append([1.0 if i == j // s else 0.0 for i in range(n)])
                continue
            c = (j + 0.5) / s - 0.5
            w = [max(0.0, 1.0 - abs(c - i)) for i in range(n)]
            rows.append([v / sum(w) for v in w])
        return rows

    def up(t, sh, sw, bilinear):
        N, H, W, C = t.shape
        ah, aw = axis_weights(H, sh, bilinear), axis_weights(W, sw, bilinear)
        vals = []
        for b, oh, ow, ch in indices([N, H * sh, W * sw, C]):
            vals.append(sum(ah[oh][h] * aw[ow][w] * t.at(b, h, w, ch)
                            for h in range(H) for w in range(W)))
        return T([N, H * sh, W * sw, C], vals)

    x = rand(61, [2, 2, 3, 2])
    case("upsample2d_nearest", "upsample2d", [x], [up(x, 2, 3, False)],
         {"size": [2, 3], "interpolation": "nearest"}, why="each pixel repeated 2 x 3 times")
    case("upsample2d_default", "upsample2d", [x], [up(x, 2, 2, False)], {},
         why="size defaults to [2, 2], interpolation to nearest")
    x = rand(62, [1, 3, 4, 2])
    case("upsample2d_bilinear", "upsample2d", [x], [up(x, 2, 3, True)],
         {"size": [2, 3], "interpolation": "bilinear"},
         why="half-pixel centres, triangle kernel renormalised at the edges (jax.image.resize)")


# ---------------------------------------------------------------- learning-rate schedules

def schedules():
    def sched(name, attrs, steps, fn):
        for s in steps:
            case("lr_schedule_%s_step%d" % (name, s), "lr_schedule", [T([], [float(s)])],
                 [T([], [fn(s)])], attrs)

    sched("constant", {"kind": "constant", "value": 0.0125}, [0, 7], lambda s: 0.0125)
    sched("exponential", {"kind": "exponential_decay", "initial_learning_rate": 0.1,
                          "decay_steps": 10, "decay_rate": 0.5, "staircase": False},
          [0, 7, 25], lambda s: 0.1 * 0.5 ** (s / 10.0))
    sched("exponential_staircase", {"kind": "exponential_decay", "initial_learning_rate": 0.1,
                                    "decay_steps": 10, "decay_rate": 0.5, "staircase": True},
          [7, 25], lambda s: 0.1 * 0.5 ** math.floor(s / 10.0))

    def cosine(initial, decay_steps, alpha, warmup_target, warmup_steps):
        def fn(s):
            if warmup_target is None:
                frac = min(s, decay_steps) / decay_steps
                return initial * ((1 - alpha) * 0.5 * (1 + math.cos(math.pi * frac)) + alpha)
            s = min(s, decay_steps + warmup_steps)
            if s < warmup_steps:
                return initial + (warmup_target - initial) * s / warmup_steps
            frac = (s - warmup_steps) / decay_steps
            return warmup_target * ((1 - alpha) * 0.5 * (1 + math.cos(math.pi * frac)) + alpha)
        return fn
    sched("cosine", {"kind": "cosine_decay", "initial_learning_rate": 0.2, "decay_steps": 100,
                     "alpha": 0.1, "warmup_target": -1.0, "warmup_steps": 0},
          [0, 30, 100, 150], cosine(0.2, 100, 0.1, None, 0))
    sched("cosine_warmup", {"kind": "cosine_decay", "initial_learning_rate": 0.0, "decay_steps": 40,
                            "alpha": 0.0, "warmup_target": 0.5, "warmup_steps": 10},
          [4, 10, 30, 60], cosine(0.0, 40, 0.0, 0.5, 10))

    bounds, values = [10, 20], [0.3, 0.2, 0.1]
    def piecewise(s):
        for b, v in zip(bounds, values):
            if s <= b:
                return v
        return values[-1]
    sched("piecewise", {"kind": "piecewise_constant_decay", "boundaries": bounds, "values": values},
          [0, 10, 11, 20, 21], piecewise)

    def polynomial(initial, decay_steps, end, power, cycle):
        def fn(s):
            if cycle:  # the period: the first multiple of decay_steps at or past s (one at 0)
                period = decay_steps
                while period < s:
                    period += decay_steps
                return (initial - end) * (1 - s / period) ** power + end
            return (initial - end) * (1 - min(s, decay_steps) / decay_steps) ** power + end
        return fn
    sched("polynomial", {"kind": "polynomial_decay", "initial_learning_rate": 0.1, "decay_steps": 10,
                         "end_learning_rate": 0.01, "power": 2.0, "cycle": False},
          [0, 4, 10, 15], polynomial(0.1, 10, 0.01, 2.0, False))
    sched("polynomial_cycle", {"kind": "polynomial_decay", "initial_learning_rate": 0.1,
                               "decay_steps": 10, "end_learning_rate": 0.01, "power": 1.0,
                               "cycle": True},
          [0, 4, 15, 20], polynomial(0.1, 10, 0.01, 1.0, True))
    sched("inverse_time", {"kind": "inverse_time_decay", "initial_learning_rate": 0.1,
                           "decay_steps": 5, "decay_rate": 0.5, "staircase": False},
          [0, 3, 12], lambda s: 0.1 / (1 + 0.5 * s / 5))
    sched("inverse_time_staircase", {"kind": "inverse_time_decay", "initial_learning_rate": 0.1,
                                     "decay_steps": 5, "decay_rate": 0.5, "staircase": True},
          [3, 12], lambda s: 0.1 / (1 + 0.5 * (s // 5)))

    def restarts(initial, first, t_mul, m_mul, alpha):
        def fn(s):  # walk the periods: first, first * t_mul, ...; the peak shrinks by m_mul
            start, period, peak = 0.0, float(first), 1.0
            while s >= start + period:
                start, period, peak = start + period, period * t_mul, peak * m_mul
            frac = (s - start) / period
            return initial * ((1 - alpha) * peak * 0.5 * (1 + math.cos(math.pi * frac)) + alpha)
        return fn
    sched("cosine_restarts", {"kind": "cosine_decay_restarts", "initial_learning_rate": 0.1,
                              "first_decay_steps": 10, "t_mul": 2.0, "m_mul": 0.5, "alpha": 0.1},
          [0, 5, 10, 20, 35], restarts(0.1, 10, 2.0, 0.5, 0.1))
    sched("cosine_restarts_fixed_period", {"kind": "cosine_decay_restarts",
                                           "initial_learning_rate": 0.1, "first_decay_steps": 10,
                                           "t_mul": 1.0, "m_mul": 1.0, "alpha": 0.0},
          [5, 10, 25], restarts(0.1, 10, 1.0, 1.0, 0.0))


# ---------------------------------------------------------------- images (NHWC)

def reflect_index(i, n):  # ... 2 1 0 | 0 1 2 ... n-1 | n-1 n-2 ... (half-sample symmetric)
    if n == 1:
        return 0
    period = 2 * n
    i %= period
    return i if i < n else period - 1 - i


def sample_fill(img, n, y, x, c, mode, fill):
    """Pixel (y, x) (integers, maybe outside) of image n under a fill mode."""
    H, W = img.shape[1], img.shape[2]
    if mode == "constant":
        if 0 <= y < H and 0 <= x < W:
            return img.at(n, y, x, c)
        return fill
    if mode == "nearest":
        y, x = min(max(y, 0), H - 1), min(max(x, 0), W - 1)
    elif mode == "reflect":
        y, x = reflect_index(y, H), reflect_index(x, W)
    elif mode == "wrap":
        y, x = y % H, x % W
    return img.at(n, y, x, c)


def round_half_away(v):
    return math.floor(v + 0.5) if v >= 0 else -math.floor(-v + 0.5)


def affine(img, transforms, mode="reflect", interp="bilinear", fill=0.0):
    """tf.raw_ops.ImageProjectiveTransformV3: output (x, y) samples the input at
    ((a0 x + a1 y + a2) / k, (b0 x + b1 y + b2) / k), k = c0 x + c1 y + 1."""
    N, H, W, C = img.shape
    vals = []
    for n, oy, ox, c in indices([N, H, W, C]):
        a0, a1, a2, b0, b1, b2, c0, c1 = transforms.values[8 * n:8 * n + 8]
        k = c0 * ox + c1 * oy + 1.0
        if k == 0:
            vals.append(fill)
            continue
        sx, sy = (a0 * ox + a1 * oy + a2) / k, (b0 * ox + b1 * oy + b2) / k
        if interp == "nearest":
            for v in (sx, sy):  # float32 kernels must round the same way
                assert abs(abs(v - math.floor(v)) - 0.5) > 1e-3, "sample point near a rounding tie"
            vals.append(sample_fill(img, n, int(round_half_away(sy)), int(round_half_away(sx)), c, mode, fill))
            continue
        y0, x0 = math.floor(sy), math.floor(sx)
        fy, fx = sy - y0, sx - x0
        v = 0.0
        for dy, wy in [(0, 1 - fy), (1, fy)]:
            for dx, wx in [(0, 1 - fx), (1, fx)]:
                if wy * wx != 0.0:
                    v += wy * wx * sample_fill(img, n, y0 + dy, x0 + dx, c, mode, fill)
        vals.append(v)
    return T(img.shape, vals)


def images():
    x = rand(50, [2, 4, 5, 2], 0.0, 4.0)
    flags = T([2, 2], [1.0, 0.0, 1.0, 1.0])
    def flip(img, fl):
        N, H, W, C = img.shape
        vals = []
        for n, i, j, c in indices(img.shape):
            h, v = fl.values[2 * n], fl.values[2 * n + 1]
            vals.append(img.at(n, H - 1 - i if v else i, W - 1 - j if h else j, c))
        return T(img.shape, vals, img.dtype)
    case("image_flip", "image_flip", [x, flags], [flip(x, flags)],
         why="flags (horizontal = reverse width, vertical = reverse height)")
    xu = T([1, 2, 3, 1], [0, 17, 255, 3, 128, 64], "uint8")
    fu = T([1, 2], [0.0, 1.0])
    case("image_flip_u8_vertical", "image_flip", [xu, fu], [flip(xu, fu)])

    # Affine transforms: per image, rotation about the centre with zoom and shift (some samples
    # fall outside the image, so the fill modes matter), plus one projective (c0, c1) transform.
    ximg = rand(51, [2, 5, 6, 1], -1.0, 1.0)
    def rot(deg, z, tx, ty, h, w):
        a = math.radians(deg)
        cs, sn = math.cos(a) * z, math.sin(a) * z
        cx, cy = (w - 1) / 2.0, (h - 1) / 2.0
        return [cs, -sn, cx - cs * cx + sn * cy + tx, sn, cs, cy - sn * cx - cs * cy + ty, 0.0, 0.0]
    tr = rot(23.0, 1.15, 0.6, -0.35, 5, 6) + [0.91, 0.13, -0.71, -0.07, 1.09, 0.43, 0.031, -0.023]
    tr = T([2, 8], [f32(v) for v in tr])
    for mode in ["reflect", "wrap", "constant", "nearest"]:
        for interp in ["bilinear", "nearest"]:
            attrs = {"fill_mode": mode, "interpolation": interp, "fill_value": 0.5}
            case("image_affine_transform_%s_%s" % (mode, interp), "image_affine_transform",
                 [ximg, tr], [affine(ximg, tr, mode, interp, 0.5)], attrs,
                 why="ImageProjectiveTransformV3 sampling; wrap is periodic (neighbours wrap too)")
    shift = T([2, 8], [1.0, 0.0, -1.0, 0.0, 1.0, 2.0, 0.0, 0.0] * 2)
    case("image_affine_transform_default_attrs", "image_affine_transform", [ximg, shift],
         [affine(ximg, shift, "reflect", "bilinear")],
         why="defaults: fill_mode reflect, bilinear; integer shift = exact pixel copies")

    # Random affine with degenerate ranges [v, v]: the drawn transform is known (Keras 3
    # RandomRotation / RandomZoom / RandomTranslation matrices).
    xa = rand(52, [2, 5, 7, 1], -1.0, 1.0)
    H, W = 5, 7
    f = 0.1  # fraction of 2*pi
    ang = f * 2.0 * math.pi
    cs, sn = math.cos(ang), math.sin(ang)
    xoff = ((W - 1) - (cs * (W - 1) - sn * (H - 1))) / 2.0
    yoff = ((H - 1) - (sn * (W - 1) + cs * (H - 1))) / 2.0
    m_rot = [cs, -sn, xoff, sn, cs, yoff, 0.0, 0.0]
    # Zoom: height factor 0.25 -> zoom 1.25 (zooms out); width_factor absent -> same zoom.
    zh = zw = 1.25
    m_zoom = [zw, 0.0, (W - 1) / 2.0 * (1 - zw), 0.0, zh, (H - 1) / 2.0 * (1 - zh), 0.0, 0.0]
    zw2 = 0.75
    m_zoom2 = [zw2, 0.0, (W - 1) / 2.0 * (1 - zw2), 0.0, zh, (H - 1) / 2.0 * (1 - zh), 0.0, 0.0]
    # Translation: +0.2 of the height down, -3/7 of the width (left): output (x, y) samples
    # input (x - dx, y - dy).
    dy, dx = 0.2 * H, -3.0 / 7.0 * W
    m_tr = [1.0, 0.0, -dx, 0.0, 1.0, -dy, 0.0, 0.0]
    base = {"fill_mode": "constant", "interpolation": "bilinear", "fill_value": -0.5, "seed": 11}
    for tag, extra, m in [("rotation", {"rotation": [f, f]}, m_rot),
                          ("zoom", {"zoom_height": [0.25, 0.25]}, m_zoom),
                          ("zoom_width", {"zoom_height": [0.25, 0.25], "zoom_width": [-0.25, -0.25]},
                           m_zoom2),
                          ("translation", {"translation_height": [0.2, 0.2],
                                           "translation_width": [-3.0 / 7.0, -3.0 / 7.0]}, m_tr),
                          ("identity", {}, [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])]:
        attrs = dict(base)
        attrs.update(extra)
        mt = T([2, 8], m * 2)
        case("image_random_affine_" + tag, "image_random_affine", [xa],
             [affine(xa, mt, "constant", "bilinear", -0.5), mt], attrs, tol=2e-5,
             why="a range [v, v] draws v: Keras's matrix for the one transformation")

    xc = rand(53, [2, 3, 4, 2], -1.0, 1.0)
    def contrast(img, factors, lo, hi):
        N, Hh, Ww, C = img.shape
        means = {}
        for n in range(N):
            for c in range(C):
                vs = [img.at(n, i, j, c) for i in range(Hh) for j in range(Ww)]
                means[(n, c)] = sum(vs) / len(vs)
        return T(img.shape, [min(max((img.at(n, i, j, c) - means[(n, c)]) * factors[n] + means[(n, c)], lo), hi)
                             for n, i, j, c in indices(img.shape)])
    fac = [0.5, 1.75]
    case("image_adjust_contrast", "image_adjust_contrast", [xc, T([2], fac)],
         [contrast(xc, fac, -5.0, 5.0)], {"value_range": [-5.0, 5.0]})
    case("image_adjust_contrast_clipped", "image_adjust_contrast", [xc, T([2], fac)],
         [contrast(xc, fac, -0.5, 0.75)], {"value_range": [-0.5, 0.75]},
         why="mean per image and channel of the input; result clipped to value_range")
    case("image_random_contrast_factor1", "image_random_contrast", [xc],
         [contrast(xc, [1.0, 1.0], -0.5, 0.75), T([2], [1.0, 1.0])],
         {"lower": 0.0, "upper": 0.0, "value_range": [-0.5, 0.75], "seed": 5},
         why="lower = upper = 0: factor 1 (randomness disabled), only the clip remains")

    def bright(img, deltas, lo, hi):
        N = img.shape[0]
        per = numel(img.shape) // N
        return T(img.shape, [min(max(v + deltas[k // per], lo), hi) for k, v in enumerate(img.values)])
    dl = [0.25, -0.5]
    case("image_adjust_brightness", "image_adjust_brightness", [xc, T([2], dl)],
         [bright(xc, dl, -1.0, 1.0)], {"value_range": [-1.0, 1.0]})
    xb = rand(54, [2, 2, 3, 1], 0.0, 255.0)
    case("image_random_brightness_fixed", "image_random_brightness", [xb],
         [bright(xb, [0.3 * 255.0] * 2, 0.0, 255.0), T([2], [0.3 * 255.0] * 2)],
         {"lower": 0.3, "upper": 0.3, "value_range": [0.0, 255.0], "seed": 1}, tol=2e-5,
         why="lower = upper: delta = 0.3 * (255 - 0) for every image, clipped at 255")
    xbu = T([1, 2, 3, 1], [0, 10, 100, 200, 250, 255], "uint8")
    case("image_adjust_brightness_u8", "image_adjust_brightness", [xbu, T([1], [20.375])],
         [T([1, 2, 3, 1], [20, 30, 120, 220, 255, 255], "uint8")], {"value_range": [0.0, 255.0]},
         why="uint8: rounded to nearest (x + 20.375), saturated at 255")

    xk = rand(55, [2, 4, 5, 2], -2.0, 2.0)
    offs = T([2, 2], [1.0, 2.0, 0.0, 0.0])
    def crop(img, offsets, h, w):
        N, C = img.shape[0], img.shape[3]
        return T([N, h, w, C], [img.at(n, i + int(offsets.values[2 * n]), j + int(offsets.values[2 * n + 1]), c)
                                for n, i, j, c in indices([N, h, w, C])], img.dtype)
    case("image_crop", "image_crop", [xk, offs], [crop(xk, offs, 3, 3)], {"height": 3, "width": 3},
         why="offsets (top, left) per image")
    case("image_random_crop_full", "image_random_crop", [xk], [xk, T([2, 2], [0.0] * 4)],
         {"height": 4, "width": 5, "seed": 2},
         why="crop size = image size: the only offset is (0, 0); smaller crops are checked by "
             "KnownValues.RandomOpsKeepTheirDefinitions")

    # tf.image.resize (half-pixel centres, no antialias).
    def resize(img, h, w, method):
        N, H, W, C = img.shape
        sh, sw = H / h, W / w
        vals = []
        for n, i, j, c in indices([N, h, w, C]):
            if method == "nearest":
                yi = min(int(math.floor((i + 0.5) * sh)), H - 1)
                xi = min(int(math.floor((j + 0.5) * sw)), W - 1)
                vals.append(img.at(n, yi, xi, c))
            elif method == "bilinear":
                yy, xx = (i + 0.5) * sh - 0.5, (j + 0.5) * sw - 0.5
                y0, x0 = math.floor(yy), math.floor(xx)
                fy, fx = yy - y0, xx - x0
                cl = lambda v, n_: min(max(v, 0), n_ - 1)
                v = 0.0
                for ddy, wy in [(0, 1 - fy), (1, fy)]:
                    for ddx, wx in [(0, 1 - fx), (1, fx)]:
                        v += wy * wx * img.at(n, cl(y0 + ddy, H), cl(x0 + ddx, W), c)
                vals.append(v)
            else:  # area: average over the output pixel's footprint [i*sh, (i+1)*sh) x [...]
                acc = 0.0
                for yi in range(H):
                    oy = max(0.0, min((i + 1) * sh, yi + 1) - max(i * sh, yi))
                    if oy <= 0:
                        continue
                    for xi in range(W):
                        ox = max(0.0, min((j + 1) * sw, xi + 1) - max(j * sw, xi))
                        if ox > 0:
                            acc += oy * ox * img.at(n, yi, xi, c)
                vals.append(acc / (sh * sw))
        return T([N, h, w, C], vals)
    xr = rand(56, [1, 4, 6, 2], -2.0, 2.0)
    for method in ["bilinear", "nearest", "area"]:
        case("image_resize_up_" + method, "image_resize", [xr], [resize(xr, 7, 9, method)],
             {"height": 7, "width": 9, "interpolation": method})
        case("image_resize_down_" + method, "image_resize", [xr], [resize(xr, 3, 4, method)],
             {"height": 3, "width": 4, "interpolation": method})
    case("image_resize_default_bilinear", "image_resize", [xr], [resize(xr, 2, 5, "bilinear")],
         {"height": 2, "width": 5}, why="interpolation defaults to bilinear")
    # uint8 pixels chosen (first seed that works) so no exact result lies near a .5 tie.
    rng = random.Random(57)
    while True:
        xru = T([1, 2, 3, 1], [0, 255] + [rng.randrange(256) for _ in range(4)], "uint8")
        up = resize(T(xru.shape, [float(v) for v in xru.values]), 3, 4, "bilinear")
        exact = up.values
        if all(abs(v - math.floor(v) - 0.5) > 0.02 for v in exact):
            break
    case("image_resize_u8_bilinear", "image_resize", [xru],
         [T(up.shape, [min(max(int(math.floor(v + 0.5)), 0), 255) for v in exact], "uint8")],
         {"height": 3, "width": 4, "interpolation": "bilinear"}, tol=0.0,
         why="uint8 output: rounded to nearest")


# ---------------------------------------------------------------- layouts

def layouts():
    def transpose(t, perm):
        shape = [t.shape[p] for p in perm]
        vals = []
        for idx in indices(shape):
            src = [0] * len(perm)
            for i, p in enumerate(perm):
                src[p] = idx[i]
            vals.append(t.at(*src))
        return T(shape, vals)
    m = rand(40, [3, 4])
    case("transpose_2d", "transpose", [m], [transpose(m, [1, 0])], {"perm": [1, 0]},
         why="numpy.transpose(x)")
    x = rand(41, [2, 3, 4, 2])
    case("transpose_attention_heads", "transpose", [x], [transpose(x, [0, 2, 1, 3])],
         {"perm": [0, 2, 1, 3]}, why="(batch, time, heads, dim) -> (batch, heads, time, dim)")
    case("transpose_cycle", "transpose", [x], [transpose(x, [3, 0, 2, 1])],
         {"perm": [3, 0, 2, 1]})
# ---------------------------------------------------------------- sequences (issue 35)

def u8(t):
    return T(t.shape, [1 if v else 0 for v in t.values], "uint8")


def sequences():
    """gather (tf.gather: table rows by id, along an axis) and its scatter-add gradient (repeated
    ids add up), one_hot (tf.one_hot: ids outside [0, depth) give zeros), the comparisons and
    logical ops (uint8 0/1), where (tf.where), reverse (tf.reverse) and cumsum
    (tf.math.cumsum with exclusive / reverse)."""
    table = rand(901, [4, 3])
    ids = ints([2, 3], [3, 0, 3, 1, 2, 0])
    out = [table.at(i, k) for i in ids.values for k in range(3)]
    case("gather_rows", "gather", [table, ids], [T([2, 3, 3], out)])
    t3 = rand(902, [2, 4, 2])
    ids1 = ints([3], [3, 0, 3], "int64")
    out = [t3.at(a, i, c) for a in range(2) for i in ids1.values for c in range(2)]
    case("gather_axis1_int64", "gather", [t3, ids1], [T([2, 3, 2], out)], {"axis": 1})
    dy = rand(903, [2, 3, 3])
    grad = [0.0] * 12
    for n, i in enumerate(ids.values):
        for k in range(3):
            grad[i * 3 + k] += dy.values[n * 3 + k]
    case("gather_grad_repeated_ids", "gather_grad", [dy, ids], [T([4, 3], grad)],
         {"axis": 0, "size": 4})
    oh = ints([2, 3], [0, 3, -1, 4, 1, 1])
    case("one_hot", "one_hot", [oh],
         [T([2, 3, 4], [1.0 if v == c else 0.0 for v in oh.values for c in range(4)])],
         {"depth": 4})
    a = T([2, 3], [0.5, -1.0, 2.0, 0.25, 1.5, -2.0])
    b = T([3], [0.5, 1.0, -2.0])
    cmps = {"equal": lambda x, y: x == y, "not_equal": lambda x, y: x != y,
            "less": lambda x, y: x < y, "less_equal": lambda x, y: x <= y,
            "greater": lambda x, y: x > y, "greater_equal": lambda x, y: x >= y}
    for op, f in cmps.items():
        case(op + "_broadcast", op, [a, b], [u8(map2(f, a, b))])
    p = ints([4], [0, 1, 0, 2], "uint8")
    q = ints([4], [0, 0, 3, 1], "uint8")
    case("logical_and", "logical_and", [p, q], [u8(map2(lambda x, y: x and y, p, q))])
    case("logical_or", "logical_or", [p, q], [u8(map2(lambda x, y: x or y, p, q))])
    case("logical_not", "logical_not", [p], [u8(map1(lambda x: not x, p))])
    cond = ints([2, 1], [1, 0], "uint8")
    x, y = rand(904, [2, 3]), rand(905, [3])
    w = [bget(x, i) if bget(cond, i) else bget(y, i) for i in indices([2, 3])]
    case("where_broadcast", "where", [cond, x, y], [T([2, 3], w)])
    r = rand(906, [2, 3, 2])
    rev = [r.at(i, 2 - j, 1 - k) for i in range(2) for j in range(3) for k in range(2)]
    case("reverse_axes_1_2", "reverse", [r], [T([2, 3, 2], rev)], {"axes": [1, -1]})
    c = rand(907, [2, 4])
    for excl in (False, True):
        for back in (False, True):
            vals = []
            for row in range(2):
                line = [c.at(row, j) for j in range(4)]
                order = list(range(4))[::-1] if back else list(range(4))
                res, acc = [0.0] * 4, 0.0
                for j in order:
                    if excl:
                        res[j] = acc
                        acc += line[j]
                    else:
                        acc += line[j]
                        res[j] = acc
                vals += res
            name = "cumsum" + ("_exclusive" if excl else "") + ("_reverse" if back else "")
            case(name, "cumsum", [c], [T([2, 4], vals)],
                 {"axis": 1, "exclusive": excl, "reverse": back})


def main():
    elementwise()
    reductions()
    arrays()
    losses()
    nn()
    schedules()
    images()
    upsampling()
    layouts()
    sequences()
    here = os.path.dirname(os.path.abspath(__file__))
    out = {"generator": "tests/ops/known_values/make_known_values.py",
           "comparison": "|got - want| <= tol * (1 + |want|) per element",
           "cases": CASES}
    # One case per line: readable diffs when a case changes.
    with open(os.path.join(here, "known_values.json"), "w") as f:
        f.write("{\"generator\": %s,\n \"comparison\": %s,\n \"cases\": [\n" %
                (json.dumps(out["generator"]), json.dumps(out["comparison"])))
        f.write(",\n".join("  " + json.dumps(c, separators=(", ", ": ")) for c in CASES))
        f.write("\n]}\n")
    json.load(open(os.path.join(here, "known_values.json")))  # still valid JSON
    ops = sorted({c["op"] for c in CASES})
    print("wrote %d cases for %d ops" % (len(CASES), len(ops)))


if __name__ == "__main__":
    main()
