"""Keras 3 side of the attention-layer interop test (tests/interop/keras_attention_interop_test.cpp).

  keras_attention_interop.py make DIR   builds one small model per case below with random
                                        weights (biases included), saves DIR/<case>.keras, its
                                        inputs DIR/<case>.in<i>.f32 (shapes in DIR/<case>.inputs,
                                        one line each) and Keras's prediction DIR/<case>.out.f32
                                        (shape in DIR/<case>.shape)
  keras_attention_interop.py check DIR  loads each DIR/<case>.lockstep.keras that Lockstep
                                        saved, predicts on the same inputs and compares with
                                        Lockstep's prediction DIR/<case>.lockstep.out.f32
                                        (max abs diff <= 1e-4)

Cases: MultiHeadAttention self-attention, with a causal mask, with an attention_mask input,
cross-attention with a distinct key and lengths (value_dim and output_shape set), returning the
scores, after Embedding(mask_zero=True) (the Keras masks of query and value); GroupQueryAttention
with and without a causal mask; Attention (dot) plain, with use_scale, a key and a causal mask,
and after a masked Embedding; a small transformer classifier (Embedding, MultiHeadAttention +
residual + LayerNormalization, a Dense feed-forward block, GlobalAveragePooling1D, Dense).
Token inputs are float32 holding integer ids (Embedding casts them). Prints one line per case.
"""
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import numpy as np  # noqa: E402
import keras  # noqa: E402
from keras import layers as L  # noqa: E402

BATCH, T, S, D, VOCAB = 3, 6, 7, 8, 20


def floats(shape):
    return ("float", shape)


def tokens(shape):
    return ("tokens", shape)


def keep_mask(shape):
    return ("mask", shape)


def mha_self(i):
    return L.MultiHeadAttention(2, 4)(i[0], i[0])


def mha_causal(i):
    return L.MultiHeadAttention(2, 4)(i[0], i[0], use_causal_mask=True)


def mha_attention_mask(i):
    return L.MultiHeadAttention(3, 2, use_bias=False)(i[0], i[0], attention_mask=i[1])


def mha_cross(i):
    # dropout > 0 takes Keras's einsum path: its JAX dot_product_attention refuses value_dim != key_dim
    return L.MultiHeadAttention(3, 4, value_dim=5, output_shape=(10,), dropout=0.1)(
        i[0], i[1], key=i[2])


def mha_scores(i):
    # self-attention: Keras's symbolic shape of the scores assumes the key is as long as the query
    _, scores = L.MultiHeadAttention(2, 3)(i[0], i[0], return_attention_scores=True)
    return scores


def mha_masked(i):
    e = L.Embedding(VOCAB, D, mask_zero=True)(i[0])
    h = L.MultiHeadAttention(2, 4)(e, e, use_causal_mask=True)
    # Dense, not a pooling layer: Keras records a pooling layer's mask as a NotEqual op layer
    return L.Dense(3)(h)


def gqa(i):
    return L.GroupQueryAttention(head_dim=3, num_query_heads=4, num_key_value_heads=2)(i[0], i[1])


def gqa_causal(i):
    return L.GroupQueryAttention(head_dim=2, num_query_heads=4, num_key_value_heads=1)(
        i[0], i[0], use_causal_mask=True)


def attention_dot(i):
    return L.Attention()([i[0], i[1]])


def attention_scale_causal(i):
    a = L.Attention(use_scale=True)
    return a([i[0], i[1], i[2]], use_causal_mask=True)


def attention_masked(i):
    e = L.Embedding(VOCAB, D, mask_zero=True)(i[0])
    return L.Dense(3)(L.Attention()([e, e]))


def transformer(i):
    e = L.Embedding(VOCAB, 16, mask_zero=False)(i[0])
    a = L.MultiHeadAttention(2, 8, name="self_attention")(e, e)
    h = L.LayerNormalization(epsilon=1e-6)(L.Add()([e, a]))
    f = L.Dense(16)(L.Dense(32, activation="relu")(h))
    h = L.LayerNormalization(epsilon=1e-6)(L.Add()([h, f]))
    return L.Dense(3, name="head")(L.GlobalAveragePooling1D()(h))


CASES = {
    "mha_self": ([floats((T, D))], mha_self),
    "mha_causal": ([floats((T, D))], mha_causal),
    "mha_attention_mask": ([floats((T, D)), keep_mask((T, T))], mha_attention_mask),
    "mha_cross": ([floats((T, D)), floats((S, 6)), floats((S, 5))], mha_cross),
    "mha_scores": ([floats((T, D))], mha_scores),
    "mha_masked": ([tokens((T,))], mha_masked),
    "gqa": ([floats((T, D)), floats((S, D))], gqa),
    "gqa_causal": ([floats((T, D))], gqa_causal),
    "attention_dot": ([floats((T, D)), floats((S, D))], attention_dot),
    "attention_scale_causal": ([floats((T, D)), floats((S, D)), floats((S, D))],
                               attention_scale_causal),
    "attention_masked": ([tokens((T,))], attention_masked),
    "transformer": ([tokens((T,))], transformer),
}


def write(path, a):
    np.ascontiguousarray(a, dtype=np.float32).tofile(path)


def sample(rng, kind, shape):
    if kind == "float":
        return rng.normal(0, 1, (BATCH,) + shape).astype(np.float32)
    if kind == "mask":
        m = (rng.random((BATCH,) + shape) > 0.3).astype(np.float32)
        for k in range(min(shape)):
            m[:, k, k] = 1
        return m
    ids = rng.integers(1, VOCAB, (BATCH,) + shape)
    ids[0, -2:] = 0  # padding at the end of two rows (masked by mask_zero)
    ids[1, -1:] = 0
    return ids.astype(np.float32)


def inputs_of(name):
    specs, _ = CASES[name]
    return [keras.Input(shape, name=f"in{k}") for k, (_, shape) in enumerate(specs)]


def make(d):
    rng = np.random.default_rng(7)
    for name, (specs, body) in CASES.items():
        keras.utils.set_random_seed(1)
        ins = inputs_of(name)
        m = keras.Model(ins, body(ins), name=name)
        m.set_weights([rng.normal(0, 0.5, w.shape).astype(np.float32) for w in m.get_weights()])
        xs = [sample(rng, kind, shape) for kind, shape in specs]
        y = np.asarray(m.predict(xs, verbose=0))
        m.save(os.path.join(d, name + ".keras"))
        for k, x in enumerate(xs):
            write(os.path.join(d, f"{name}.in{k}.f32"), x)
        with open(os.path.join(d, name + ".inputs"), "w") as f:
            for x in xs:
                f.write(" ".join(str(s) for s in x.shape) + "\n")
        write(os.path.join(d, name + ".out.f32"), y)
        with open(os.path.join(d, name + ".shape"), "w") as f:
            f.write(" ".join(str(s) for s in y.shape))
        print(f"made {name}: output {y.shape}")


def load_inputs(d, name):
    xs = []
    with open(os.path.join(d, name + ".inputs")) as f:
        for k, line in enumerate(f):
            shape = tuple(int(s) for s in line.split())
            xs.append(np.fromfile(os.path.join(d, f"{name}.in{k}.f32"), np.float32).reshape(shape))
    return xs


def check(d, names):
    bad = 0
    for name in names:
        path = os.path.join(d, name + ".lockstep.keras")
        if not os.path.exists(path):
            print(f"{name}: MISSING {path}")
            bad += 1
            continue
        m = keras.saving.load_model(path)
        y = np.asarray(m.predict(load_inputs(d, name), verbose=0))
        want = np.fromfile(os.path.join(d, name + ".lockstep.out.f32"), np.float32)
        diff = float(np.max(np.abs(y.reshape(-1) - want))) if y.size == want.size else np.inf
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
        names = sys.argv[3:] or list(CASES)
        sys.exit(1 if check(sys.argv[2], names) else 0)
