"""Keras side of the model-parallel interop test (tests/interop/keras_mesh_interop_test.cpp).

  keras_mesh_interop.py DIR   loads DIR/gpt_model_parallel.keras, which Lockstep saved while the
                              model trained under ModelParallel on a 2x2 mesh (each kernel split
                              over the devices, gathered into the file), with keras-hub; checks
                              the optimizer came back with DIR/meta.json's step count and every
                              Adam slot, predicts on DIR/ids.i32 and compares with Lockstep's
                              DIR/lockstep.pred.f32 (max abs diff <= 1e-4); writes its own
                              predictions to DIR/keras.pred.f32 and saves the model again as
                              DIR/keras_resaved.keras, for Lockstep to load under another mesh.
Exits 1 with the reason on a mismatch.
"""
import json
import os
import sys
import warnings

os.environ.setdefault("KERAS_BACKEND", "jax")
import numpy as np  # noqa: E402
import keras  # noqa: E402
import keras_hub  # noqa: E402,F401 (registers TransformerDecoder, TokenAndPositionEmbedding)

warnings.filterwarnings("ignore", category=UserWarning)


def main(d):
    meta = json.load(open(os.path.join(d, "meta.json")))
    batch, seq = meta["batch"], meta["seq_len"]
    ids = np.fromfile(os.path.join(d, "ids.i32"), np.int32).reshape(batch, seq)
    want = np.fromfile(os.path.join(d, "lockstep.pred.f32"), np.float32).reshape(batch, seq, -1)
    m = keras.saving.load_model(os.path.join(d, "gpt_model_parallel.keras"))
    bad = 0
    steps = int(np.asarray(m.optimizer.iterations))
    slots = [v for v in m.optimizer.variables if "momentum" in v.path or "velocity" in v.path]
    print(f"keras loads the ModelParallel file: {len(m.weights)} weights, optimizer "
          f"{type(m.optimizer).__name__} at step {steps} with {len(slots)} slots")
    if steps != meta["steps"]:
        print(f"FAIL: the optimizer is at step {steps}, Lockstep trained {meta['steps']}")
        bad += 1
    if len(slots) != 2 * len(m.trainable_weights):
        print(f"FAIL: {len(slots)} Adam slots for {len(m.trainable_weights)} trainable weights")
        bad += 1
    moved = max(float(np.max(np.abs(np.asarray(s)))) for s in slots)
    if moved == 0.0:
        print("FAIL: every Adam slot is zero (the trained state did not come back)")
        bad += 1
    got = np.asarray(m.predict(ids, verbose=0), np.float32)
    diff = float(np.max(np.abs(got - want)))
    print(f"keras predicts like lockstep under ModelParallel: max abs diff {diff:.3g} "
          f"over logits {got.shape}")
    if diff > 1e-4:
        bad += 1
    got.tofile(os.path.join(d, "keras.pred.f32"))
    m.save(os.path.join(d, "keras_resaved.keras"))
    return bad


if __name__ == "__main__":
    sys.exit(1 if main(sys.argv[1]) else 0)
