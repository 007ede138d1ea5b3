"""The Keras half of tests/flowers_transfer_example.sh (real Keras 3 on JAX).

    python flowers_transfer_keras.py make DIR SIZE
        keras.applications.MobileNetV2(include_top=False, weights=None, pooling="avg",
        input_shape=(SIZE, SIZE, 3)), seeded, with BatchNormalization statistics away from
        (1, 0, 0, 1); writes DIR/backbone.weights.h5 (Keras 3) and DIR/backbone.h5 (the legacy
        whole-model HDF5 file, weights read by layer name) and DIR/backbone.keras.
    python flowers_transfer_keras.py check DIR PHASE_FILE[@FINE_TUNE_AT] ...
        loads each PHASE_FILE (the example's --save-backbone output) into Keras's build of the
        same backbone and compares it with DIR/backbone.keras layer by layer: without
        @FINE_TUNE_AT (the head phase) every weight must be equal bit for bit; with it (after
        fine-tuning) the layers before it and every BatchNormalization must be equal and at
        least one of the layers from it on must have changed.
Exit status 0 when the comparison holds.
"""
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import numpy as np  # noqa: E402
import keras  # noqa: E402


def build(size):
    keras.backend.clear_session()
    return keras.applications.MobileNetV2(include_top=False, weights=None, pooling="avg",
                                          input_shape=(size, size, 3))


def make(d, size):
    keras.utils.set_random_seed(5)
    model = build(size)
    rng = np.random.default_rng(6)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            c = layer.gamma.shape[0]
            layer.set_weights([rng.uniform(0.7, 1.3, c).astype(np.float32),
                               rng.normal(0, 0.1, c).astype(np.float32),
                               rng.normal(0, 0.1, c).astype(np.float32),
                               rng.uniform(0.5, 1.5, c).astype(np.float32)])
    model.save_weights(os.path.join(d, "backbone.weights.h5"))
    model.save(os.path.join(d, "backbone.h5"))
    model.save(os.path.join(d, "backbone.keras"))
    print(f"keras: MobileNetV2 {size}x{size} include_top=False, {len(model.layers)} layers, "
          f"{model.count_params()} parameters -> backbone.weights.h5, backbone.h5")


def check(d, phase_file, fine_tune_at):
    want = keras.saving.load_model(os.path.join(d, "backbone.keras"))
    got = build(want.input_shape[1])
    got.load_weights(phase_file)
    names = [layer.name for layer in want.layers]
    at = names.index(fine_tune_at) if fine_tune_at else len(names)
    ok, changed_after = True, []
    for i, (a, b) in enumerate(zip(want.layers, got.layers)):
        same = all(np.array_equal(x, y) for x, y in zip(a.get_weights(), b.get_weights()))
        frozen = i < at or isinstance(a, keras.layers.BatchNormalization)
        if not a.get_weights():
            continue
        if frozen and not same:
            print(f"  {a.name} (layer {i}) is frozen but its weights changed")
            ok = False
        if not frozen and not same:
            changed_after.append(a.name)
    trainable = [l.name for i, l in enumerate(want.layers) if i >= at and l.get_weights()
                 and not isinstance(l, keras.layers.BatchNormalization)]
    print(f"{os.path.basename(phase_file)}: frozen layers equal bit for bit: {ok}; "
          f"{len(changed_after)} of {len(trainable)} unfrozen layers changed")
    if fine_tune_at and not changed_after:
        print("  fine-tuning changed none of the unfrozen layers")
        ok = False
    return ok


if __name__ == "__main__":
    mode, d = sys.argv[1], sys.argv[2]
    if mode == "make":
        make(d, int(sys.argv[3]))
        sys.exit(0)
    results = []
    for arg in sys.argv[3:]:
        path, _, at = arg.partition("@")
        results.append(check(d, path, at or None))
    sys.exit(0 if results and all(results) else 1)
