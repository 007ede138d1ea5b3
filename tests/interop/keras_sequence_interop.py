"""The Python half of tests/interop/keras_sequence_interop_test.cpp (real Keras 3 on JAX):
Embedding (with and without mask_zero, under a Dense) and Masking, both ways.

    python keras_sequence_interop.py DIR

1. Loads every DIR/lockstep_<name>.keras Lockstep wrote, predicts on DIR/lockstep_<name>.input.f32
   (ids as float32; cast to the model input's dtype) and compares with Lockstep's predictions
   DIR/lockstep_<name>.pred.f32: max abs diff <= 1e-5. With mask_zero the masked steps' outputs
   are compared too (Keras computes them; the mask only reaches losses and mask-taking layers).
2. Builds Keras models with random weights, saves DIR/keras_<name>.keras, the inputs
   DIR/keras_<name>.input.f32 and Keras's predictions DIR/keras_<name>.pred.f32 (shapes and the
   input dtype in DIR/keras_<name>.json) for Lockstep to load and check.
3. The masked loss: DIR/keras_masked_loss.txt holds Keras's evaluate() mse of the
   keras_embedding_mask_dense model on its inputs and DIR/keras_embedding_mask_dense.y.f32,
   for Lockstep to match (the loss over the unmasked steps only).
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
        x = x.astype(meta.get("input_dtype", "float32"))
        got = np.asarray(model.predict(x, verbose=0))
        diff = float(np.max(np.abs(got - want)))
        print(f"keras loads lockstep_{n}.keras: max abs diff {diff:.3g}")
        ok = ok and diff <= TOL
    return ok


def randomize(model, seed):
    rng = np.random.default_rng(seed)
    model.set_weights([rng.uniform(-0.5, 0.5, w.shape).astype(np.float32)
                       for w in model.get_weights()])


def padded_ids(rng, n, t, vocab):
    x = rng.integers(1, vocab, size=(n, t)).astype(np.int32)
    for i in range(n):  # trailing padding: row i keeps t - i steps (at least one)
        x[i, max(1, t - i):] = 0
    return x


def keras_models():
    i = keras.Input((6,), dtype="int32", name="ids")
    emb = keras.Model(i, keras.layers.Embedding(20, 4, name="emb")(i), name="embedding")
    j = keras.Input((6,), dtype="int32", name="ids")
    h = keras.layers.Embedding(20, 4, mask_zero=True, name="emb")(j)
    h = keras.layers.Dense(3, activation="tanh", name="dense")(h)
    masked = keras.Model(j, keras.layers.Dense(2, name="out")(h), name="embedding_mask_dense")
    k = keras.Input((5, 3), name="x")
    mk = keras.Model(k, keras.layers.Dense(2)(keras.layers.Masking(0.0)(k)), name="masking")
    return [emb, masked, mk]


def write_keras_files(d):
    rng = np.random.default_rng(7)
    for seed, model in enumerate(keras_models()):
        randomize(model, seed + 1)
        n = model.name
        shape = [5] + list(model.inputs[0].shape[1:])
        if model.inputs[0].dtype.startswith("int"):
            x = padded_ids(rng, 5, shape[1], 20)
        else:
            x = rng.uniform(-1, 1, size=shape).astype(np.float32)
            x[1, 2, :] = 0  # a masked step
            x[3, 0, :] = 0
        y = np.asarray(model.predict(x, verbose=0))
        model.save(os.path.join(d, f"keras_{n}.keras"))
        x.astype(np.float32).tofile(os.path.join(d, f"keras_{n}.input.f32"))
        y.astype(np.float32).tofile(os.path.join(d, f"keras_{n}.pred.f32"))
        json.dump({"input": list(x.shape), "output": list(y.shape),
                   "input_dtype": str(x.dtype)}, open(os.path.join(d, f"keras_{n}.json"), "w"))
        if n == "embedding_mask_dense":
            t = rng.uniform(-1, 1, size=y.shape).astype(np.float32)
            t.tofile(os.path.join(d, f"keras_{n}.y.f32"))
            model.compile(loss="mse", optimizer="adam")
            loss = float(model.evaluate(x, t, batch_size=5, verbose=0))
            open(os.path.join(d, "keras_masked_loss.txt"), "w").write(repr(loss))
            print(f"keras masked mse {loss:.6g}")


def main():
    d = sys.argv[1]
    ok = check_lockstep_files(d)
    write_keras_files(d)
    print("OK" if ok else "MISMATCH")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
