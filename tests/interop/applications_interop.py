"""The Python half of tests/interop/applications_interop_test.cpp (real Keras 3 on JAX).

    python applications_interop.py keras DIR   # Keras -> Lockstep
    python applications_interop.py check DIR   # Lockstep -> Keras

keras: builds each backbone of BACKBONES with keras.applications (weights=None, seeded), gives
its BatchNormalization layers non-trivial gamma, beta and moving statistics, and writes
DIR/keras_<name>.keras, a fixed input batch DIR/keras_<name>.input.f32, Keras's predictions
DIR/keras_<name>.pred.f32 (raw little-endian float32) and DIR/keras_<name>.json: the shapes and
every layer's name, class and weight shapes in model.layers order, and model.weights' paths in
order (Lockstep's own build must match both position by position). Also each model's
keras.applications.<module>.preprocess_input of a fixed 0..255 batch:
DIR/preprocess_<name>.{input,output}.f32 and .json (shapes).

check: loads every DIR/lockstep_<name>.keras (Lockstep's own build of the backbone, with its
random weights), predicts on DIR/lockstep_<name>.input.f32 and compares with Lockstep's
predictions (max abs diff <= TOL), and compares each layer's class, name and config with a fresh
keras.applications build of the same arguments.
Exit status 0 when every comparison holds.
"""
import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import numpy as np  # noqa: E402
import keras  # noqa: E402

TOL = 1e-4

# name -> (constructor, keyword arguments, input range). Small inputs keep each under seconds.
BACKBONES = {
    "mobilenet_v2": (keras.applications.MobileNetV2,
                     dict(input_shape=(32, 32, 3), classes=10, classifier_activation=None), 1.0),
    "mobilenet_v2_alpha": (keras.applications.MobileNetV2,
                           dict(input_shape=(40, 48, 3), alpha=0.5, include_top=False,
                                pooling="max"), 1.0),
    "resnet50": (keras.applications.ResNet50,
                 dict(input_shape=(32, 32, 3), include_top=False, pooling="avg"), 1.0),
    "efficientnet_b0": (keras.applications.EfficientNetB0,
                        dict(input_shape=(32, 32, 3), classes=7, classifier_activation=None),
                        255.0),
}


def build(name):
    fn, kwargs, _ = BACKBONES[name]
    keras.backend.clear_session()
    return fn(weights=None, **kwargs)


def randomize_batch_norm(model, seed):
    """Also gives EfficientNet's Normalization adapted-looking statistics."""
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if isinstance(layer, keras.layers.Normalization):
            layer.set_weights([np.array([120.0, 110.0, 100.0], np.float32) / 255.0,
                               np.array([0.05, 0.06, 0.07], np.float32), np.array(1000)])
            layer.finalize_state()
        if isinstance(layer, keras.layers.BatchNormalization):
            c = layer.gamma.shape[0]
            layer.set_weights([rng.uniform(0.7, 1.3, c).astype(np.float32),
                               rng.normal(0, 0.1, c).astype(np.float32),
                               rng.normal(0, 0.1, c).astype(np.float32),
                               rng.uniform(0.5, 1.5, c).astype(np.float32)])


def inputs(name, n=3):
    shape = (n,) + BACKBONES[name][1]["input_shape"]
    rng = np.random.default_rng(7)
    scale = BACKBONES[name][2]
    lo = 0.0 if scale > 1 else -1.0  # pixels 0..255 for EfficientNet's Rescaling(1/255)
    return rng.uniform(lo, 1, shape).astype(np.float32) * scale


def layer_list(model):
    return [{"name": l.name, "class": l.__class__.__name__,
             "weights": [list(w.shape) for w in l.weights]} for l in model.layers]


def write_keras(d):
    for i, name in enumerate(BACKBONES):
        keras.utils.set_random_seed(10 + i)
        model = build(name)
        randomize_batch_norm(model, 20 + i)
        x = inputs(name)
        y = np.asarray(model.predict(x, verbose=0), np.float32)
        model.save(os.path.join(d, f"keras_{name}.keras"))
        x.tofile(os.path.join(d, f"keras_{name}.input.f32"))
        y.tofile(os.path.join(d, f"keras_{name}.pred.f32"))
        meta = {"input": list(x.shape), "output": list(y.shape), "model_name": model.name,
                "layers": layer_list(model), "weight_paths": [w.path for w in model.weights]}
        json.dump(meta, open(os.path.join(d, f"keras_{name}.json"), "w"))
        print(f"keras wrote keras_{name}.keras ({len(model.layers)} layers, output {y.shape}, "
              f"std {float(np.std(y)):.3g})")


# applications::preprocess_input's models -> Keras's preprocess_input (caffe / tf / identity).
PREPROCESS = {
    "resnet50": keras.applications.resnet50.preprocess_input,
    "mobilenet_v2": keras.applications.mobilenet_v2.preprocess_input,
    "efficientnet_b0": keras.applications.efficientnet.preprocess_input,
}


def write_preprocess(d):
    x = np.random.default_rng(11).uniform(0, 255, (2, 5, 4, 3)).astype(np.float32)
    for name, fn in PREPROCESS.items():
        y = np.asarray(fn(x.copy()), np.float32)
        x.tofile(os.path.join(d, f"preprocess_{name}.input.f32"))
        y.tofile(os.path.join(d, f"preprocess_{name}.output.f32"))
        json.dump({"input": list(x.shape), "output": list(y.shape)},
                  open(os.path.join(d, f"preprocess_{name}.json"), "w"))


def without_dtype(config):
    return {k: v for k, v in config.items() if k not in ("dtype",)}


def check_lockstep(d):
    ok = True
    for name in BACKBONES:
        path = os.path.join(d, f"lockstep_{name}.keras")
        if not os.path.exists(path):
            print(f"missing {path}")
            ok = False
            continue
        meta = json.load(open(os.path.join(d, f"lockstep_{name}.json")))
        x = np.fromfile(os.path.join(d, f"lockstep_{name}.input.f32"), np.float32).reshape(meta["input"])
        want = np.fromfile(os.path.join(d, f"lockstep_{name}.pred.f32"), np.float32).reshape(meta["output"])
        model = keras.saving.load_model(path)
        got = np.asarray(model.predict(x, verbose=0))
        diff = float(np.max(np.abs(got - want)))
        print(f"keras loads lockstep_{name}.keras ({len(model.layers)} layers): max abs diff "
              f"{diff:.3g} (predictions' std {float(np.std(want)):.3g})")
        ok = ok and diff <= TOL
        ref = build(name)
        ours = [(l.__class__.__name__, l.name, without_dtype(l.get_config())) for l in model.layers]
        theirs = [(l.__class__.__name__, l.name, without_dtype(l.get_config())) for l in ref.layers]
        if len(ours) != len(theirs):
            print(f"  {name}: {len(ours)} layers, keras.applications builds {len(theirs)}")
            ok = False
        mismatches = [(a, b) for a, b in zip(ours, theirs) if a != b]
        for a, b in mismatches[:5]:
            print(f"  {name}: lockstep {a}\n       keras    {b}")
        ok = ok and not mismatches
        if model.name != ref.name:
            print(f"  {name}: model name {model.name!r}, keras {ref.name!r}")
            ok = False
    return ok


if __name__ == "__main__":
    mode, d = sys.argv[1], sys.argv[2]
    if mode == "keras":
        write_keras(d)
        write_preprocess(d)
        sys.exit(0)
    sys.exit(0 if check_lockstep(d) else 1)
