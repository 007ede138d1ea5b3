"""The Python half of tests/interop/keras_interop_test.cpp (real Keras 3 on JAX).

    python keras_interop.py DIR

1. Loads every DIR/lockstep_<name>.keras that Lockstep wrote with keras.saving.load_model,
   predicts on DIR/lockstep_<name>.input.f32 and compares with Lockstep's predictions
   (DIR/lockstep_<name>.pred.f32): max abs diff <= 1e-5 (or the "atol" of lockstep_<name>.json:
   lockstep_xla_trained, trained and predicted on Lockstep's xla backend, has 1e-4).
2. Builds Keras models (a small CNN with BatchNormalization, a functional model with Add and
   Concatenate and two Dense heads' worth of shared classes, a decoder of Conv2DTranspose and
   UpSampling2D), saves DIR/keras_<name>.keras,
   fixed inputs DIR/keras_<name>.input.f32 and Keras's predictions DIR/keras_<name>.pred.f32
   (raw little-endian float32; shapes in DIR/keras_<name>.json) for Lockstep to check.
3. Optimizer state both ways (include_optimizer). DIR/resume_lockstep.keras is a compiled model
   Lockstep trained for one epoch on DIR/resume.x.f32 / resume.y.i32; Keras loads it (compiled,
   its Adam state restored), checks the step count, trains one more epoch (batch 8, no
   shuffle) and must match Lockstep's predictions after its own second epoch
   (DIR/resume_lockstep.after.f32) within 1e-4. Keras does the same the other way:
   DIR/resume_keras.keras after one epoch and DIR/resume_keras.after.f32 after two, for
   Lockstep to load and continue.
4. Writes Keras's model.to_json() of an image CNN as DIR/keras_cnn.json (and its parameter
   count in DIR/keras_cnn.params) for `lockstep train --model`, and of the Fashion-MNIST
   reference CNN (examples/reference_cnn.h, after a Rescaling(1/255) for image folders' 0..255
   pixels) as DIR/reference_cnn.json.
   extra() holds GroupNormalization, PReLU, SpatialDropout2D, RandomContrast, LeakyReLU and ELU.
5. Nested models: Lockstep's lockstep_nested.keras (a Sequential and a functional model used as
   layers) is checked in 1.; Keras writes keras_nested.keras the same way for Lockstep.
6. Fashion-MNIST: DIR/fmnist_lockstep.keras is the reference CNN Lockstep trained for one
   epoch; Keras loads it (compiled) and evaluates it on the 10k test set Lockstep evaluated it
   on (DIR/fmnist_test.x.f32 / .y.i32) and writes its accuracy to DIR/fmnist_keras_accuracy.txt
   (the C++ side compares it with Lockstep's).
Exit status 0 when every comparison holds.
"""
import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import numpy as np  # noqa: E402
import keras  # noqa: E402

TOL = 1e-5


def check_lockstep_files(d):
    ok = True
    names = sorted(f[len("lockstep_"):-len(".keras")] for f in os.listdir(d)
                   if f.startswith("lockstep_") and f.endswith(".keras"))
    assert names, "no lockstep_*.keras files in " + d
    for n in names:
        meta = json.load(open(os.path.join(d, f"lockstep_{n}.json")))
        x = np.fromfile(os.path.join(d, f"lockstep_{n}.input.f32"), np.float32).reshape(meta["input"])
        want = np.fromfile(os.path.join(d, f"lockstep_{n}.pred.f32"), np.float32).reshape(meta["output"])
        model = keras.saving.load_model(os.path.join(d, f"lockstep_{n}.keras"))
        got = np.asarray(model.predict(x, verbose=0))
        diff = float(np.max(np.abs(got - want)))
        tol = meta.get("atol", TOL)  # lockstep_xla_trained: 1e-4, two XLA programs
        print(f"keras loads lockstep_{n}.keras ({len(model.layers)} layers): max abs diff {diff:.3g}"
              f" (predictions' std over the batch {float(np.std(want, axis=0).mean()):.3g};"
              f" tolerance {tol:g})")
        ok = ok and diff <= tol
    return ok


def small_cnn():
    return keras.Sequential([
        keras.Input((12, 12, 3)),
        keras.layers.RandomFlip("horizontal"),
        keras.layers.RandomRotation(0.1),
        keras.layers.CenterCrop(10, 10),
        keras.layers.Rescaling(1 / 2.0),
        keras.layers.Conv2D(6, 3, activation="relu"),
        keras.layers.BatchNormalization(),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(8, 3, padding="same", strides=2, use_bias=False),
        keras.layers.ReLU(),
        keras.layers.AveragePooling2D(pool_size=(2, 2)),
        keras.layers.Flatten(),
        keras.layers.Dropout(0.25),
        keras.layers.Dense(10, activation="softmax"),
    ], name="small_cnn")


def branchy():
    i = keras.Input((10, 10, 4), name="pixels")
    a = keras.layers.Conv2D(5, 3, padding="same", activation="relu")(i)
    b = keras.layers.DepthwiseConv2D(3, padding="same")(i)
    b = keras.layers.Conv2D(5, 1)(b)
    s = keras.layers.Add()([a, b])
    s = keras.layers.BatchNormalization()(s)
    c = keras.layers.Concatenate()([s, a, i])
    c = keras.layers.SeparableConv2D(6, 3, activation="tanh")(c)
    g = keras.layers.GlobalAveragePooling2D()(c)
    m = keras.layers.GlobalMaxPooling2D()(c)
    h = keras.layers.Multiply()([keras.layers.Dense(7, activation="gelu")(g),
                                 keras.layers.Dense(7, activation="sigmoid")(m)])
    h = keras.layers.LayerNormalization()(h)
    o = keras.layers.Dense(3)(keras.layers.Activation("swish")(h))
    return keras.Model(i, o, name="branchy")


def nested():
    """A Sequential and a functional model used as layers of a functional model."""
    inner = keras.Sequential([keras.Input((6,)), keras.layers.Dense(5, activation="relu"),
                              keras.layers.BatchNormalization(), keras.layers.Dense(4)],
                             name="inner_seq")
    fi = keras.Input((4,))
    fo = keras.layers.Dense(3, activation="tanh")(keras.layers.Dense(4)(fi))
    inner_fn = keras.Model(fi, fo, name="inner_fn")
    i = keras.Input((6,), name="x")
    h = inner_fn(inner(i))
    o = keras.layers.Dense(2)(keras.layers.Concatenate()([h, i]))
    return keras.Model(i, o, name="nested")


def layers():
    """Augmentation layers written by Keras (the identity at inference), Resizing with nearest
    interpolation and Reshape. (Not RandomCrop: Keras 3.15 returns its input uncropped at
    inference, against its documentation and its own output shape.)"""
    return keras.Sequential([
        keras.Input((8, 8, 3)),
        keras.layers.RandomZoom(0.1),
        keras.layers.RandomTranslation(0.1, 0.2),
        keras.layers.RandomBrightness(0.2),
        keras.layers.Resizing(11, 10, interpolation="nearest"),
        keras.layers.Conv2D(3, 3),
        keras.layers.Reshape((9, 24)),
        keras.layers.Dense(2),
    ], name="layers")


def extra():
    """GroupNormalization, PReLU (per channel and per position), SpatialDropout2D and
    RandomContrast (the identity at inference), LeakyReLU, ELU and the "elu" activation."""
    i = keras.Input((6, 6, 4), name="img")
    h = keras.layers.Conv2D(8, 3, padding="same")(keras.layers.RandomContrast(0.2)(i))
    h = keras.layers.PReLU(shared_axes=[1, 2])(keras.layers.GroupNormalization(groups=4)(h))
    h = keras.layers.LeakyReLU()(keras.layers.Conv2D(6, 3)(keras.layers.SpatialDropout2D(0.3)(h)))
    h = keras.layers.GroupNormalization(groups=3, epsilon=1e-2, center=False)(
        keras.layers.ELU(alpha=0.7)(h))
    g = keras.layers.PReLU()(keras.layers.GlobalAveragePooling2D()(h))
    return keras.Model(i, keras.layers.Dense(3, activation="elu")(g), name="extra")


def decoder():
    """Conv2DTranspose (same / valid with output_padding / dilated) and UpSampling2D."""
    return keras.Sequential([
        keras.Input((4, 5, 2)),
        keras.layers.Conv2DTranspose(3, 3, strides=2, padding="same", activation="relu"),
        keras.layers.UpSampling2D((1, 2), interpolation="bilinear"),
        keras.layers.Conv2DTranspose(2, (3, 2), strides=(3, 2), output_padding=(2, 1)),
        keras.layers.Conv2DTranspose(2, 2, dilation_rate=2, padding="same", use_bias=False),
        keras.layers.UpSampling2D(2),
        keras.layers.Flatten(),
        keras.layers.Dense(2),
    ], name="decoder")


def randomize(model, rng):
    """Non-trivial weights (moving variances positive), so that weight order matters."""
    for layer in model.layers:
        if layer.weights:
            layer.set_weights([
                rng.uniform(0.5, 1.5, v.shape).astype(np.float32) if "variance" in v.path
                else (rng.standard_normal(v.shape) * 0.3).astype(np.float32)
                for v in layer.weights])


def write_keras_files(d):
    rng = np.random.default_rng(42)
    for model in (small_cnn(), branchy(), nested(), layers(), extra(), decoder()):
        randomize(model, rng)
        n = model.name
        shape = (4,) + tuple(model.inputs[0].shape[1:])
        x = rng.uniform(-1, 1, shape).astype(np.float32)
        y = np.asarray(model.predict(x, verbose=0)).astype(np.float32)
        model.save(os.path.join(d, f"keras_{n}.keras"))
        x.tofile(os.path.join(d, f"keras_{n}.input.f32"))
        y.tofile(os.path.join(d, f"keras_{n}.pred.f32"))
        json.dump({"input": list(x.shape), "output": list(y.shape)},
                  open(os.path.join(d, f"keras_{n}.json"), "w"))
        print(f"keras wrote keras_{n}.keras ({len(model.layers)} layers)")


RESUME_TOL = 1e-4


def resume_data(d):
    x = np.fromfile(os.path.join(d, "resume.x.f32"), np.float32).reshape(-1, 6)
    y = np.fromfile(os.path.join(d, "resume.y.i32"), np.int32)
    return x, y


def check_lockstep_resume(d):
    x, y = resume_data(d)
    model = keras.saving.load_model(os.path.join(d, "resume_lockstep.keras"))
    steps = int(model.optimizer.iterations.numpy())
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    got = np.asarray(model.predict(x, verbose=0))
    want = np.fromfile(os.path.join(d, "resume_lockstep.after.f32"), np.float32).reshape(got.shape)
    diff = float(np.max(np.abs(got - want)))
    # Control: the same weights with a fresh Adam land elsewhere (so the state was used).
    fresh = keras.saving.load_model(os.path.join(d, "resume_lockstep.keras"), compile=False)
    fresh.compile(optimizer=keras.optimizers.Adam(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    fresh.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    control = float(np.max(np.abs(np.asarray(fresh.predict(x, verbose=0)) - want)))
    print(f"keras resumes resume_lockstep.keras ({type(model.optimizer).__name__}, "
          f"{steps} steps done, {len(model.optimizer.variables)} optimizer variables): "
          f"max abs diff after one more epoch {diff:.3g} (with a fresh Adam: {control:.3g})")
    return steps == len(x) // 8 and diff <= RESUME_TOL and control > 10 * RESUME_TOL


def write_keras_resume(d):
    x, y = resume_data(d)
    keras.utils.set_random_seed(7)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(10, activation="relu"),
                              keras.layers.Dense(4)], name="resume_keras")
    model.compile(optimizer=keras.optimizers.Adam(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    model.save(os.path.join(d, "resume_keras.keras"))
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    np.asarray(model.predict(x, verbose=0)).astype(np.float32).tofile(
        os.path.join(d, "resume_keras.after.f32"))
    print("keras wrote resume_keras.keras (compiled, Adam state after one epoch)")


def write_keras_json(d):
    model = keras.Sequential([
        keras.Input((12, 12, 3)),
        keras.layers.RandomFlip("horizontal"),
        keras.layers.Rescaling(1 / 255.0),
        keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(2),
    ], name="keras_cnn")
    with open(os.path.join(d, "keras_cnn.json"), "w") as f:
        f.write(model.to_json())
    with open(os.path.join(d, "keras_cnn.params"), "w") as f:
        f.write(str(model.count_params()))
    print(f"keras wrote keras_cnn.json ({model.count_params()} parameters)")
    reference = keras.Sequential([
        keras.Input((28, 28, 1)),
        keras.layers.Rescaling(1 / 255.0),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.Conv2D(64, 3, activation="relu"),
        keras.layers.MaxPooling2D((2, 2)),
        keras.layers.Dropout(0.25),
        keras.layers.Flatten(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dropout(0.5),
        keras.layers.Dense(10),
    ], name="reference_cnn")
    with open(os.path.join(d, "reference_cnn.json"), "w") as f:
        f.write(reference.to_json())
    print(f"keras wrote reference_cnn.json ({reference.count_params()} parameters)")


def evaluate_fashion_mnist(d):
    path = os.path.join(d, "fmnist_lockstep.keras")
    if not os.path.exists(path):
        return True
    x = np.fromfile(os.path.join(d, "fmnist_test.x.f32"), np.float32).reshape(-1, 28, 28, 1)
    y = np.fromfile(os.path.join(d, "fmnist_test.y.i32"), np.int32)
    model = keras.saving.load_model(path)
    logs = model.evaluate(x, y, batch_size=500, verbose=0, return_dict=True)
    with open(os.path.join(d, "fmnist_keras_accuracy.txt"), "w") as f:
        f.write(repr(float(logs["accuracy"])))
    print(f"keras evaluates fmnist_lockstep.keras on {len(y)} test images: "
          f"accuracy {logs['accuracy']:.4f}, loss {logs['loss']:.4f}")
    return True


if __name__ == "__main__":
    d = sys.argv[1]
    print("keras", keras.__version__, "backend", keras.backend.backend())
    ok = check_lockstep_files(d)
    ok = check_lockstep_resume(d) and ok
    ok = evaluate_fashion_mnist(d) and ok
    write_keras_files(d)
    write_keras_resume(d)
    write_keras_json(d)
    sys.exit(0 if ok else 1)
