"""Keras 3 side of the EinsumDense / normalisation / attention interop test
(tests/interop/keras_einsum_interop_test.cpp).

  keras_einsum_interop.py make DIR    builds one small model per case below with random weights,
                                      saves DIR/<case>.keras, the input batch DIR/<case>.in.f32
                                      (shape BATCH x T x F, some steps zero: the Masking cases'
                                      masked steps) and Keras's prediction DIR/<case>.out.f32
  keras_einsum_interop.py check DIR   loads each DIR/<case>.lockstep.keras that Lockstep saved,
                                      predicts on DIR/<case>.in.f32 and compares with Lockstep's
                                      DIR/<case>.lockstep.out.f32 (max abs diff <= 1e-4)

Cases: EinsumDense (plain, per-head "btd,dhk->bthk", left ellipsis, an output projection from
heads, a relu one), RMSNormalization, UnitNormalization (one and two axes), Softmax (one and two
axes), AdditiveAttention (two and three inputs, with and
without scale, with the query and value masks of a Masking layer). Prints one line per case.
"""
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import numpy as np  # noqa: E402
import keras  # noqa: E402
from keras import layers as L  # noqa: E402

T, F, BATCH = 5, 6, 3


def model(name, body):
    x = keras.Input((T, F), name="x")
    return keras.Model(x, body(x), name=name)


def attention(x, **kw):
    q = L.Dense(4, name="q")(x)
    v = L.Dense(4, name="v")(x)
    return L.AdditiveAttention(**kw)([q, v])


def attention_key(x):
    q, v, k = L.Dense(4, name="q")(x), L.Dense(3, name="v")(x), L.Dense(4, name="k")(x)
    return L.AdditiveAttention(use_scale=False)([q, v, k])


CASES = {
    "einsum_dense": lambda x: L.EinsumDense("abc,cd->abd", (None, 4), bias_axes="d")(x),
    "einsum_dense_heads": lambda x: L.EinsumDense(
        "btd,dhk->bthk", (None, 2, 3), bias_axes="hk")(x),
    "einsum_dense_ellipsis": lambda x: L.EinsumDense(
        "...b,bc->...c", 4, bias_axes="c", activation="relu")(x),
    "einsum_dense_no_bias": lambda x: L.EinsumDense("abc,cd->abd", (T, 3))(x),
    "einsum_dense_out_proj": lambda x: L.EinsumDense("bthk,hkd->btd", (None, 4), bias_axes="d")(
        L.Reshape((T, 2, 3))(x)),
    "rms_norm": lambda x: L.RMSNormalization()(x),
    "rms_norm_eps": lambda x: L.RMSNormalization(epsilon=1e-3)(L.Dense(4)(x)),
    "unit_norm": lambda x: L.UnitNormalization()(x),
    "unit_norm_axes": lambda x: L.UnitNormalization(axis=[1, 2])(x),
    "softmax": lambda x: L.Softmax()(x),
    "softmax_axes": lambda x: L.Softmax(axis=[1, 2])(x),
    "additive_attention": lambda x: attention(x),
    "additive_attention_dropout": lambda x: attention(x, dropout=0.3, use_scale=True),
    "additive_attention_key": attention_key,
    "additive_attention_masked": lambda x: attention(L.Masking(0.0)(x)),
}


def write(path, a):
    np.ascontiguousarray(a, dtype=np.float32).tofile(path)


def batch(rng):
    x = rng.normal(0, 1, (BATCH, T, F)).astype(np.float32)
    x[0, 3:, :] = 0  # masked steps for the Masking cases
    x[1, 1, :] = 0
    return x


def make(d):
    rng = np.random.default_rng(7)
    for name, body in CASES.items():
        keras.utils.set_random_seed(1)
        m = model(name, body)
        m.set_weights([rng.normal(0, 0.5, w.shape).astype(np.float32) for w in m.get_weights()])
        x = batch(rng)
        y = np.asarray(m.predict(x, verbose=0))
        m.save(os.path.join(d, name + ".keras"))
        write(os.path.join(d, name + ".in.f32"), x)
        write(os.path.join(d, name + ".out.f32"), y)
        with open(os.path.join(d, name + ".shape"), "w") as f:
            f.write(" ".join(str(s) for s in y.shape))
        print(f"made {name}: output {y.shape}")


def check_one(d, name):
    m = keras.saving.load_model(os.path.join(d, name + ".lockstep.keras"))
    x = np.fromfile(os.path.join(d, name + ".in.f32"), np.float32).reshape(BATCH, T, F)
    y = np.asarray(m.predict(x, verbose=0))
    want = np.fromfile(os.path.join(d, name + ".lockstep.out.f32"), np.float32)
    return float(np.max(np.abs(y.reshape(-1) - want))) if y.size == want.size else np.inf


def check(d, names):
    bad = 0
    for name in names:
        if not os.path.exists(os.path.join(d, name + ".lockstep.keras")):
            print(f"{name}: MISSING {name}.lockstep.keras")
            bad += 1
            continue
        diff = check_one(d, name)
        ok = diff <= 1e-4
        bad += not ok
        print(f"{name}: keras loads lockstep's file, max abs diff {diff:.3g} {'ok' if ok else 'FAIL'}")
    return bad


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("make", "check"):
        sys.exit(__doc__)
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        sys.exit(1 if check(sys.argv[2], sys.argv[3:] or list(CASES)) else 0)
