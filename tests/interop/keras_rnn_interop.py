"""Keras 3 side of the recurrent-layer interop test (tests/interop/keras_rnn_interop_test.cpp).

  keras_rnn_interop.py make DIR    builds one small model per case below with random weights
                                   (biases included), saves DIR/<case>.keras, the input batch
                                   DIR/<case>.in.f32 and Keras's prediction DIR/<case>.out.f32
  keras_rnn_interop.py check DIR   loads each DIR/<case>.lockstep.keras that Lockstep saved,
                                   predicts on DIR/<case>.in.f32 and compares with Lockstep's
                                   prediction DIR/<case>.lockstep.out.f32 (max abs diff <= 1e-4)

Cases: LSTM, GRU (reset_after True and False), SimpleRNN (tanh, relu) with return_sequences,
return_state and go_backwards; Bidirectional with every merge mode (None's two outputs and
return_state's states concatenated); a stack of them. Prints one line per case.
"""
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import numpy as np  # noqa: E402
import keras  # noqa: E402
from keras import layers as L  # noqa: E402

T, F, BATCH = 6, 3, 4


def model(name, body):
    x = keras.Input((T, F), name="x")
    y = body(x)
    if isinstance(y, (list, tuple)):
        y = L.Concatenate(name="merge_outputs")(list(y))
    return keras.Model(x, y, name=name)


CASES = {
    "lstm_seq": lambda x: L.LSTM(4, return_sequences=True)(x),
    "lstm_state": lambda x: L.LSTM(4, return_state=True)(x),
    "lstm_backwards": lambda x: L.LSTM(4, go_backwards=True, return_sequences=True)(x),
    "lstm_no_bias": lambda x: L.LSTM(3, use_bias=False, unit_forget_bias=False)(x),
    "gru": lambda x: L.GRU(5)(x),
    "gru_reset_before": lambda x: L.GRU(
        5, reset_after=False, return_sequences=True, go_backwards=True)(x),
    "gru_state": lambda x: L.GRU(3, return_state=True, return_sequences=True)(x)[0],
    "gru_state_h": lambda x: L.GRU(3, return_state=True)(x),
    "simple_rnn": lambda x: L.SimpleRNN(4, return_sequences=True)(x),
    "simple_rnn_relu": lambda x: L.SimpleRNN(4, activation="relu", go_backwards=True)(x),
    "bidi_concat": lambda x: L.Bidirectional(L.LSTM(3, return_sequences=True))(x),
    "bidi_sum": lambda x: L.Bidirectional(L.GRU(3), merge_mode="sum")(x),
    "bidi_mul": lambda x: L.Bidirectional(L.GRU(3, return_sequences=True), merge_mode="mul")(x),
    "bidi_ave": lambda x: L.Bidirectional(L.SimpleRNN(3), merge_mode="ave")(x),
    "bidi_none": lambda x: L.Bidirectional(L.LSTM(3), merge_mode=None)(x),
    "bidi_state": lambda x: L.Bidirectional(L.LSTM(3, return_state=True))(x),
    "bidi_gru_reset_before": lambda x: L.Bidirectional(
        L.GRU(2, reset_after=False, return_sequences=True))(x),
    "stacked": lambda x: L.Dense(2, name="head")(
        L.GRU(3)(L.LSTM(4, return_sequences=True)(x))),
}


def write(path, a):
    np.ascontiguousarray(a, dtype=np.float32).tofile(path)


def make(d):
    rng = np.random.default_rng(7)
    for name, body in CASES.items():
        keras.utils.set_random_seed(1)
        m = model(name, body)
        m.set_weights([rng.normal(0, 0.5, w.shape).astype(np.float32) for w in m.get_weights()])
        x = rng.normal(0, 1, (BATCH, T, F)).astype(np.float32)
        y = np.asarray(m.predict(x, verbose=0))
        m.save(os.path.join(d, name + ".keras"))
        write(os.path.join(d, name + ".in.f32"), x)
        write(os.path.join(d, name + ".out.f32"), y)
        with open(os.path.join(d, name + ".shape"), "w") as f:
            f.write(" ".join(str(s) for s in y.shape))
        print(f"made {name}: output {y.shape}")


def check(d):
    bad = 0
    for name in CASES:
        path = os.path.join(d, name + ".lockstep.keras")
        if not os.path.exists(path):
            print(f"{name}: MISSING {path}")
            bad += 1
            continue
        m = keras.saving.load_model(path)
        x = np.fromfile(os.path.join(d, name + ".in.f32"), np.float32).reshape(BATCH, T, F)
        y = np.asarray(m.predict(x, verbose=0))
        want = np.fromfile(os.path.join(d, name + ".lockstep.out.f32"), np.float32)
        diff = float(np.max(np.abs(y.reshape(-1) - want))) if y.size == want.size else np.inf
        ok = diff <= 1e-4
        bad += not ok
        print(f"{name}: keras loads lockstep's file, max abs diff {diff:.3g} {'ok' if ok else 'FAIL'}")
    return bad


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("make", "check"):
        sys.exit(__doc__)
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        sys.exit(1 if check(sys.argv[2]) else 0)
