"""KerasHub side of the KerasHub interop test (tests/interop/keras_hub_interop_test.cpp).

  keras_hub_interop.py make DIR    builds one small model per case below with random weights,
                                   saves DIR/<case>.keras, its inputs DIR/<case>.in<i>.bin
                                   (int32 or float32), KerasHub's outputs DIR/<case>.out<i>.f32
                                   and DIR/<case>.json: {"inputs": [{name, dtype, shape}],
                                   "outputs": [{name, shape}]}
  keras_hub_interop.py check DIR   loads each DIR/<case>.lockstep.keras that Lockstep saved,
                                   predicts on the same inputs and compares with Lockstep's
                                   outputs DIR/<case>.lockstep.out<i>.f32 (max abs diff <= 1e-4)

Cases: KerasHub's PositionEmbedding (with start_index), TokenAndPositionEmbedding (tied and
untied, mask_zero), ReversibleEmbedding (tied and untied, reverse=True logits, logit_soft_cap),
SinePositionEncoding, RotaryEmbedding (rank 3 and 4, other axes, scaling, dynamic). Prints one
line per case.
"""
import json
import os
import sys
import warnings

os.environ.setdefault("KERAS_BACKEND", "jax")
import numpy as np  # noqa: E402
import keras  # noqa: E402
import keras_hub  # noqa: E402
import keras_hub.src.utils.keras_utils  # noqa: E402
from keras import layers as L  # noqa: E402

warnings.filterwarnings("ignore", category=UserWarning)
H = keras_hub.layers
B, T, V, D = 3, 8, 20, 6


def ids_input():
    return keras.Input((T,), dtype="int32", name="token_ids")


def float_input(shape=(T, D)):
    return keras.Input(shape, name="x")


def reversible(tie, cap=None, cls=H.ReversibleEmbedding):
    ids = ids_input()
    emb = cls(V, D, tie_weights=tie, logit_soft_cap=cap, name="rev")
    h = L.Dense(D, activation="tanh", name="mix")(emb(ids))
    return keras.Model(ids, emb(h, reverse=True))


def position(start):
    x = float_input()
    return keras.Model(x, L.Add()([x, H.PositionEmbedding(12, name="pos")(x, start_index=start)]))


def rotary(shape, **kw):
    x = float_input(shape)
    return keras.Model(x, H.RotaryEmbedding(name="rope", **kw)(x))


E = 8  # the transformer cases' features (2 heads of 4)


def seq_input(name="x", steps=T):
    return keras.Input((steps, E), name=name)


def mask_input(name, shape=(T,)):
    return keras.Input(shape, dtype="int32", name=name)


def encoder(**kw):
    x, m = seq_input(), mask_input("padding_mask")
    return keras.Model([x, m], H.TransformerEncoder(16, 2, name="enc", **kw)(x, padding_mask=m))


def encoder_attention_mask():
    x, a = seq_input(), mask_input("attention_mask", (T, T))
    enc = H.TransformerEncoder(16, 2, normalize_first=True, activation="gelu", name="enc")
    return keras.Model([x, a], enc(x, attention_mask=a))


def encoder_keras_mask(dropout):
    ids = ids_input()
    h = H.TokenAndPositionEmbedding(V, T, E, mask_zero=True, name="tpe")(ids)
    return keras.Model(ids, H.TransformerEncoder(16, 2, dropout=dropout, name="enc")(h))


def decoder(**kw):
    x, m = seq_input(), mask_input("padding_mask")
    dec = H.TransformerDecoder(16, 2, name="dec", **kw)
    return keras.Model([x, m], dec(x, decoder_padding_mask=m))


def decoder_no_causal():
    x = seq_input()
    return keras.Model(x, H.TransformerDecoder(16, 2, name="dec")(x, use_causal_mask=False))


def decoder_cross():
    x, enc, m = seq_input(), seq_input("encoder_sequence", 5), mask_input("encoder_mask", (5,))
    dec = H.TransformerDecoder(16, 2, dropout=0.1, name="dec")
    return keras.Model([x, enc, m], dec(x, enc, encoder_padding_mask=m))


CASES = {
    "position_embedding": lambda: position(0),
    "position_embedding_start": lambda: position(3),
    "token_and_position": lambda: keras.Model(
        *(lambda i: (i, H.TokenAndPositionEmbedding(V, 10, D, name="tpe")(i)))(ids_input())),
    "token_and_position_untied_mask": lambda: keras.Model(
        *(lambda i: (i, L.Dense(4, name="head")(H.TokenAndPositionEmbedding(
            V, T, D, tie_weights=False, mask_zero=True, name="tpe")(i))))(ids_input())),
    "reversible_tied": lambda: reversible(True),
    "reversible_untied_cap": lambda: reversible(False, cap=2.0),
    "keras_reversible": lambda: reversible(False, cls=L.ReversibleEmbedding),
    "sine": lambda: keras.Model(
        *(lambda x: (x, L.Add()([x, H.SinePositionEncoding(name="sine")(x)])))(float_input())),
    "sine_wavelength": lambda: keras.Model(
        *(lambda x: (x, H.SinePositionEncoding(max_wavelength=100)(x)))(float_input((T, 5)))),
    "rotary": lambda: rotary((T, D)),
    "rotary_heads": lambda: rotary((T, 2, 4), max_wavelength=500, scaling_factor=2.0),
    "rotary_axes": lambda: rotary((2, T, 4), sequence_axis=2, feature_axis=-1),
    "rotary_dynamic": lambda: rotary((T, D), rope_type="dynamic", scaling_factor=3.0),
    "encoder": lambda: encoder(),
    "encoder_prenorm_relu": lambda: encoder(normalize_first=True, layer_norm_epsilon=1e-3),
    "encoder_attention_mask": encoder_attention_mask,
    "encoder_keras_mask": lambda: encoder_keras_mask(0.1),
    "encoder_keras_mask_no_dropout": lambda: encoder_keras_mask(0.0),
    "decoder_causal": lambda: decoder(normalize_first=True, activation="gelu"),
    "decoder_gelu_approximate": lambda: decoder(
        activation=keras_hub.src.utils.keras_utils.gelu_approximate),
    "decoder_no_causal": decoder_no_causal,
    "decoder_cross": decoder_cross,
}


def write(path, a, dtype=np.float32):
    np.ascontiguousarray(a, dtype=dtype).tofile(path)


def padding(rng, shape):
    m = np.ones(shape, np.int32)  # right padding: each row keeps at least half its steps
    for row in m:
        row[rng.integers(shape[1] // 2, shape[1] + 1):] = 0
    return m


def inputs_for(m, rng):
    xs = []
    for t in m.inputs:
        shape = (B,) + tuple(t.shape[1:])
        if "mask" in t.name and len(shape) == 2:
            xs.append(padding(rng, shape))
        elif "mask" in t.name:
            xs.append(np.maximum(rng.integers(0, 2, shape), np.eye(shape[1], dtype=np.int64))
                      .astype(np.int32))
        elif "int" in str(t.dtype):
            xs.append(rng.integers(0, V, shape).astype(np.int32))
        else:
            xs.append(rng.normal(0, 1, shape).astype(np.float32))
    return xs


def save_case(d, name, m, xs, ys, out_names):
    m.save(os.path.join(d, name + ".keras"))
    spec = {"inputs": [], "outputs": []}
    for i, (t, x) in enumerate(zip(m.inputs, xs)):
        write(os.path.join(d, f"{name}.in{i}.bin"), x, x.dtype)
        spec["inputs"].append({"name": t.name, "dtype": str(x.dtype), "shape": list(x.shape)})
    for i, (n, y) in enumerate(zip(out_names, ys)):
        write(os.path.join(d, f"{name}.out{i}.f32"), y)
        spec["outputs"].append({"name": n, "shape": list(y.shape)})
    with open(os.path.join(d, name + ".json"), "w") as f:
        json.dump(spec, f)


def make(d):
    rng = np.random.default_rng(7)
    for name, build in CASES.items():
        keras.utils.set_random_seed(1)
        m = build()
        m.set_weights([rng.normal(0, 0.5, w.shape).astype(np.float32) for w in m.get_weights()])
        xs = inputs_for(m, rng)
        if "mask" in name and name.startswith("token") or name.startswith("encoder_keras_mask"):
            xs[0][:, -2:] = 0  # padding ids
        y = np.asarray(m.predict(xs[0] if len(xs) == 1 else xs, verbose=0))
        save_case(d, name, m, xs, [y], ["output"])
        print(f"made {name}: output {y.shape}")


BACKBONE = dict(vocabulary_size=100, num_layers=2, num_heads=2, hidden_dim=32,
                intermediate_dim=64, max_sequence_length=32)
BACKBONES = ["bert_backbone", "gpt2_backbone"]


def backbone_inputs(rng, segments):
    n, t = 4, BACKBONE["max_sequence_length"]
    mask = padding(rng, (n, t))
    xs = {"token_ids": rng.integers(1, BACKBONE["vocabulary_size"], (n, t)).astype(np.int32)
          * mask, "padding_mask": mask}
    if segments:
        seg = np.zeros((n, t), np.int32)
        seg[:, t // 2:] = 1
        xs["segment_ids"] = seg * mask
    return xs


def make_backbones(d):
    """keras-hub's BertBackbone and GPT2Backbone, tiny, random weights (normal, 0.2)."""
    rng = np.random.default_rng(11)
    for name in BACKBONES:
        keras.utils.set_random_seed(2)
        bert = name.startswith("bert")
        cls = keras_hub.models.BertBackbone if bert else keras_hub.models.GPT2Backbone
        m = cls(**BACKBONE)
        m.set_weights([rng.normal(0, 0.2, w.shape).astype(np.float32) for w in m.get_weights()])
        xs = backbone_inputs(rng, bert)
        y = m.predict(xs, verbose=0)
        outs = ["sequence_output", "pooled_output"] if bert else ["sequence_output"]
        ys = [np.asarray(y[o]) for o in outs] if bert else [np.asarray(y)]
        m.save(os.path.join(d, name + ".keras"))
        spec = {"inputs": [], "outputs": []}
        for i, (k, x) in enumerate(xs.items()):
            write(os.path.join(d, f"{name}.in{i}.bin"), x, np.int32)
            spec["inputs"].append({"name": k, "dtype": "int32", "shape": list(x.shape)})
        for i, (o, v) in enumerate(zip(outs, ys)):
            write(os.path.join(d, f"{name}.out{i}.f32"), v)
            spec["outputs"].append({"name": o, "shape": list(v.shape)})
        with open(os.path.join(d, name + ".json"), "w") as f:
            json.dump(spec, f)
        print(f"made {name}: outputs {[v.shape for v in ys]}")


def load_inputs(d, name):
    with open(os.path.join(d, name + ".json")) as f:
        spec = json.load(f)
    xs = {}
    for i, s in enumerate(spec["inputs"]):
        xs[s["name"]] = np.fromfile(os.path.join(d, f"{name}.in{i}.bin"),
                                    np.dtype(s["dtype"])).reshape(s["shape"])
    return spec, xs


def check_case(d, name):
    spec, xs = load_inputs(d, name)
    m = keras.saving.load_model(os.path.join(d, name + ".lockstep.keras"))
    got = m.predict(xs if len(xs) > 1 else list(xs.values())[0], verbose=0)
    if isinstance(got, dict):
        got = [got[o["name"]] for o in spec["outputs"]]
    elif not isinstance(got, (list, tuple)):
        got = [got]
    worst = 0.0
    for i, (o, g) in enumerate(zip(spec["outputs"], got)):
        want = np.fromfile(os.path.join(d, f"{name}.lockstep.out{i}.f32"), np.float32)
        worst = max(worst, float(np.max(np.abs(np.asarray(g).reshape(-1) - want))))
    return worst


def check(d, names):
    bad = 0
    for name in names:
        try:
            e = check_case(d, name)
        except Exception as ex:  # noqa: BLE001: report every case
            print(f"FAIL {name}: keras-hub cannot load lockstep's file: {ex}")
            bad += 1
            continue
        ok = e <= 1e-4
        bad += 0 if ok else 1
        print(f"{'ok' if ok else 'FAIL'} {name}: keras-hub loads lockstep's file, "
              f"max abs diff {e:.3g}")
    return bad


if __name__ == "__main__":
    cmd, d = sys.argv[1], sys.argv[2]
    if cmd == "make":
        make(d)
    elif cmd == "make_backbones":
        make_backbones(d)
    else:
        names = sys.argv[3:] or list(CASES)
        sys.exit(1 if check(d, names) else 0)
