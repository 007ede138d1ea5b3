"""The Python half of tests/interop/keras_weights_interop_test.cpp (real Keras 3 on JAX).

    python keras_weights_interop.py DIR

A small CNN with BatchNormalization and keras.applications-style layer names (small_cnn()
here and in the C++ test).
1. Lockstep -> Keras: loads DIR/lockstep.weights.h5 (Keras 3's layout) and DIR/lockstep.h5
   (Keras 2's legacy layout; in order, Keras 3's default, and by_name=True) into Keras's build of
   the model and predicts DIR/input.f32 within 1e-4 of Lockstep (DIR/lockstep.pred.f32).
2. Keras -> Lockstep: gives the model seeded random weights (BN statistics too) and writes
   DIR/keras.weights.h5 (model.save_weights), DIR/keras_model.h5 (model.save: Keras 3's legacy
   whole-model file, weights under model_weights/), DIR/keras2_no_top.h5 (written with h5py as
   Keras 2 wrote the published keras.applications files: fixed-length names, "kernel:0", the
   backbone only), and Keras's predictions DIR/keras.pred.f32 and backbone features
   DIR/keras.features.f32 on DIR/input.f32.
Exit status 0 when every comparison holds.
"""
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import h5py  # noqa: E402
import numpy as np  # noqa: E402
import keras  # noqa: E402

TOL = 1e-4
INPUT_SHAPE = (10, 10, 3)
BATCH = 6


def small_cnn(include_top=True):
    layers = [
        keras.Input(INPUT_SHAPE),
        keras.layers.Conv2D(4, 3, name="block1_conv"),
        keras.layers.BatchNormalization(name="block1_bn"),
        keras.layers.ReLU(name="block1_relu"),
        keras.layers.Conv2D(6, 1, padding="same", name="block2_conv"),
        keras.layers.BatchNormalization(name="block2_bn"),
        keras.layers.GlobalAveragePooling2D(name="avg_pool"),
    ]
    if include_top:
        layers.append(keras.layers.Dense(3, activation="softmax", name="predictions"))
    return keras.Sequential(layers, name="small_cnn")


def read_f32(path, shape):
    return np.fromfile(path, np.float32).reshape(shape)


def compare(what, got, want):
    diff = float(np.max(np.abs(np.asarray(got) - want)))
    print(f"{what}: max abs diff {diff:.3g}")
    return diff <= TOL


def check_lockstep_files(d):
    x = read_f32(os.path.join(d, "input.f32"), (BATCH,) + INPUT_SHAPE)
    want = read_f32(os.path.join(d, "lockstep.pred.f32"), (BATCH, 3))
    ok = True
    for name, kwargs in [("lockstep.weights.h5", {}), ("lockstep.h5", {}),
                         ("lockstep.h5", {"by_name": True})]:
        model = small_cnn()
        model.load_weights(os.path.join(d, name), **kwargs)
        ok = compare(f"keras loads {name} {kwargs or ''}", model.predict(x, verbose=0), want) and ok
    return ok


def randomize(model, rng):
    for w in model.weights:
        v = rng.normal(0.0, 0.4, w.shape).astype(np.float32)
        if "variance" in w.path:
            v = rng.uniform(0.5, 1.5, w.shape).astype(np.float32)
        w.assign(v)


def write_keras2_no_top(path, model):
    """Keras 2's save_weights layout for the backbone only, as h5py wrote it for Keras 2."""
    backbone = [l for l in model.layers if l.name != "predictions"]
    with h5py.File(path, "w") as f:
        f.attrs["layer_names"] = np.array([l.name.encode() for l in backbone])
        f.attrs["backend"] = b"tensorflow"
        f.attrs["keras_version"] = b"2.15.0"
        for layer in sorted(backbone, key=lambda l: l.name):
            g = f.create_group(layer.name)
            weights = layer.trainable_weights + layer.non_trainable_weights
            names = [f"{layer.name}/{w.name}:0".encode() for w in weights]
            g.attrs["weight_names"] = np.array(names) if names else np.array([])
            for n, w in zip(names, weights):
                g.create_dataset(n.decode(), data=np.asarray(w.numpy(), np.float32))


def write_keras_files(d):
    keras.utils.set_random_seed(3)
    model = small_cnn()
    randomize(model, np.random.default_rng(3))
    x = read_f32(os.path.join(d, "input.f32"), (BATCH,) + INPUT_SHAPE)
    model.predict(x, verbose=0).astype(np.float32).tofile(os.path.join(d, "keras.pred.f32"))
    features = keras.Model(model.inputs, model.get_layer("avg_pool").output)
    features.predict(x, verbose=0).astype(np.float32).tofile(os.path.join(d, "keras.features.f32"))
    model.save_weights(os.path.join(d, "keras.weights.h5"))
    model.save(os.path.join(d, "keras_model.h5"))
    write_keras2_no_top(os.path.join(d, "keras2_no_top.h5"), model)


if __name__ == "__main__":
    d = sys.argv[1]
    print("keras", keras.__version__, "backend", keras.backend.backend())
    ok = check_lockstep_files(d)
    write_keras_files(d)
    sys.exit(0 if ok else 1)
