"""The Python half of tests/interop/keras_conv1d_interop_test.cpp (real Keras 3 on JAX).

    python keras_conv1d_interop.py keras DIR   # Keras -> Lockstep
    python keras_conv1d_interop.py check DIR   # Lockstep -> Keras

Models of the 1D layers (Conv1D valid / same / causal with strides, dilation and groups, the
1D pools, UpSampling1D, ZeroPadding1D, Cropping1D, SpatialDropout1D, RepeatVector, Permute,
TimeDistributed), MODELS below, built layer for layer in the C++ test too.
keras: gives each model seeded random weights and writes DIR/keras_<name>.keras, a fixed input
    DIR/<name>.input.f32 and Keras's predictions DIR/keras_<name>.pred.f32 (raw little-endian
    float32; shapes in DIR/<name>.json), for Lockstep to load and predict within 1e-4.
check: loads every DIR/lockstep_<name>.keras Lockstep wrote with keras.saving.load_model and
    predicts DIR/<name>.input.f32 within 1e-4 of Lockstep's DIR/lockstep_<name>.pred.f32.
Exit status 0 when every comparison holds.
"""
import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import numpy as np  # noqa: E402
import keras  # noqa: E402

TOL = 1e-4
BATCH = 5
L = keras.layers


def conv_stack():
    return keras.Sequential([
        keras.Input((16, 4)),
        L.Conv1D(6, 3, padding="causal", dilation_rate=2, activation="relu"),
        L.Conv1D(4, 3, strides=2, padding="same", groups=2),
        L.MaxPooling1D(2),
        L.AveragePooling1D(2, strides=1, padding="same"),
        L.Conv1D(5, 2, use_bias=False, activation="tanh"),
        L.GlobalAveragePooling1D(),
        L.Dense(3),
    ], name="conv_stack")


def sequence_stack():
    return keras.Sequential([
        keras.Input((6, 3)),
        L.Conv1D(4, 2, padding="valid"),
        L.UpSampling1D(2),
        L.ZeroPadding1D((1, 2)),
        L.Cropping1D((2, 1)),
        L.SpatialDropout1D(0.3),
        L.Permute((2, 1)),
        L.MaxPooling1D(2, padding="same"),
        L.Permute((2, 1)),
        L.TimeDistributed(L.Dense(5, activation="relu")),
        L.GlobalMaxPooling1D(keepdims=True),
        L.Flatten(),
        L.RepeatVector(3),
        L.AveragePooling1D(3, strides=2),
        L.GlobalAveragePooling1D(),
        L.Dense(2),
    ], name="sequence_stack")


MODELS = {"conv_stack": conv_stack, "sequence_stack": sequence_stack}


def write(d, name, a):
    np.ascontiguousarray(a, np.float32).tofile(os.path.join(d, name))


def keras_files(d):
    rng = np.random.default_rng(7)
    for name, make in MODELS.items():
        model = make()
        model.set_weights([rng.uniform(-0.6, 0.6, w.shape).astype(np.float32)
                           for w in model.get_weights()])
        shape = (BATCH,) + tuple(model.input_shape[1:])
        x = rng.uniform(-1, 1, shape).astype(np.float32)
        y = np.asarray(model.predict(x, verbose=0))
        model.save(os.path.join(d, f"keras_{name}.keras"))
        write(d, f"{name}.input.f32", x)
        write(d, f"keras_{name}.pred.f32", y)
        json.dump({"input": list(shape), "output": list(y.shape)},
                  open(os.path.join(d, f"{name}.json"), "w"))
        print(f"keras wrote keras_{name}.keras ({len(model.layers)} layers), output {y.shape}")
    return True


def check(d):
    ok = True
    for name in MODELS:
        meta = json.load(open(os.path.join(d, f"{name}.json")))
        x = np.fromfile(os.path.join(d, f"{name}.input.f32"), np.float32).reshape(meta["input"])
        want = np.fromfile(os.path.join(d, f"lockstep_{name}.pred.f32"),
                           np.float32).reshape(meta["output"])
        model = keras.saving.load_model(os.path.join(d, f"lockstep_{name}.keras"))
        got = np.asarray(model.predict(x, verbose=0))
        diff = float(np.max(np.abs(got - want)))
        print(f"keras loads lockstep_{name}.keras ({len(model.layers)} layers): max abs diff "
              f"{diff:.3g} (tolerance {TOL:g})")
        ok = ok and diff <= TOL
    return ok


if __name__ == "__main__":
    mode, d = sys.argv[1], sys.argv[2]
    sys.exit(0 if (keras_files(d) if mode == "keras" else check(d)) else 1)
