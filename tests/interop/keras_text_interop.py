#!/usr/bin/env python3
"""Keras side of the text preprocessing interop (tests/interop/keras_text_interop_test.cpp).

  keras_text_interop.py make DIR    Keras builds models whose input is strings
                                    (Input(dtype="string") -> TextVectorization / StringLookup /
                                    Hashing -> Dense ...), adapts them on CORPUS, saves
                                    DIR/keras_<name>.keras and writes DIR/keras_cases.json: the
                                    strings and Keras's predictions on them; plus Keras's adapt()
                                    vocabulary of CORPUS (DIR/keras_vocab.json).
  keras_text_interop.py check DIR   Keras loads the files Lockstep saved (DIR/lockstep_<name>.keras)
                                    and predicts on the strings of DIR/lockstep_cases.json:
                                    within 1e-4 of Lockstep's predictions there; and a
                                    TextVectorization from Lockstep's config and vocabulary
                                    (DIR/lockstep_tv.json) gives Lockstep's ids.
Keras's TextVectorization needs TensorFlow (tensorflow-cpu in the interop venv); the models run
on Keras's TensorFlow backend (string tensors).
"""
import json
import os
import sys

os.environ["KERAS_BACKEND"] = "tensorflow"  # string inputs: the TF backend
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402
from keras import layers  # noqa: E402

CORPUS = [
    "The cat sat on the mat.",
    "A dog! A DOG? the dog barked at the cat",
    "Computers are fast; programmers are slow.",
    "Café au lait, s'il vous plaît -- naïve résumé",
    "to be or not to be, that is the question",
    "Hello, world: hello again (and again).",
    "the the the quick brown fox",
    "Ünïcödé and ASCII and tabs\tand  double  spaces",
]
PROBE = CORPUS[:4] + ["an entirely new sentence with the cat", "", "DOG dog Dog dOg", "Ünïcödé"]


def build(name):
    keras.utils.set_random_seed(7)
    inp = keras.Input(shape=(1,), dtype="string", name="text")
    if name == "tv_int":
        tv = layers.TextVectorization(max_tokens=30, output_sequence_length=6)
        tv.adapt(CORPUS)
        out = layers.Dense(3)(tv(inp))
    elif name == "tv_multi_hot":
        tv = layers.TextVectorization(max_tokens=40, output_mode="multi_hot", ngrams=2)
        tv.adapt(CORPUS)
        h = layers.Dense(8, activation="relu")(tv(inp))
        out = layers.Dense(3, activation="softmax")(h)
    elif name == "tv_count_fixed":
        tv = layers.TextVectorization(
            standardize="lower", split="whitespace", output_mode="count",
            vocabulary=["the", "cat", "dog", "a", "café"])
        out = layers.Dense(2)(tv(inp))
    elif name == "tv_chars":
        tv = layers.TextVectorization(split="character", standardize=None,
                                      output_sequence_length=10, max_tokens=50)
        tv.adapt(CORPUS)
        out = layers.Dense(2)(tv(inp))
    elif name == "string_lookup":
        sl = layers.StringLookup(vocabulary=["The", "A", "Hello,", "to"], output_mode="one_hot")
        out = layers.Dense(2)(sl(inp))
    elif name == "hashing":
        out = layers.Dense(2)(layers.Hashing(16, output_mode="one_hot")(inp))
    else:
        raise SystemExit(f"unknown model {name}")
    return keras.Model(inp, out, name=name)


NAMES = ["tv_int", "tv_multi_hot", "tv_count_fixed", "tv_chars", "string_lookup", "hashing"]


def first_words(s):  # StringLookup / Hashing take one token per sample: the first word
    return s.split()[0] if s.split() else ""


def probe_for(name):
    return [first_words(s) for s in PROBE] if name in ("string_lookup", "hashing") else PROBE


def make(d):
    cases = {}
    for name in NAMES:
        m = build(name)
        strings = probe_for(name)
        pred = np.asarray(m.predict(tf.constant(strings)[:, None], verbose=0), dtype=np.float64)
        m.save(os.path.join(d, f"keras_{name}.keras"))
        cases[name] = {"strings": strings, "output": pred.tolist()}
    with open(os.path.join(d, "keras_cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False)
    vocab = {}
    for mode, kw in [("int", {}), ("bigrams", {"ngrams": 2}), ("chars", {"split": "character"})]:
        tv = layers.TextVectorization(**kw)
        tv.adapt(CORPUS)
        vocab[mode] = [str(t) for t in tv.get_vocabulary()]
    tv = layers.TextVectorization(output_mode="tf_idf")
    tv.adapt(CORPUS)
    vocab["tf_idf_output"] = np.asarray(tv(tf.constant(PROBE))).tolist()
    vocab["corpus"], vocab["probe"] = CORPUS, PROBE
    with open(os.path.join(d, "keras_vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    print(f"keras_text_interop: wrote {len(NAMES)} models to {d}")


def check(d):
    failures = 0
    with open(os.path.join(d, "lockstep_cases.json"), encoding="utf-8") as f:
        cases = json.load(f)
    for name, case in cases.items():
        m = keras.saving.load_model(os.path.join(d, f"lockstep_{name}.keras"))
        got = np.asarray(m.predict(tf.constant(case["strings"])[:, None], verbose=0))
        want = np.asarray(case["output"])
        err = float(np.max(np.abs(got - want))) if got.shape == want.shape else float("inf")
        ok = err <= 1e-4
        failures += not ok
        print(f"  lockstep_{name}.keras in Keras: max |diff| {err:.2e} {'ok' if ok else 'FAIL'}")
    with open(os.path.join(d, "lockstep_tv.json"), encoding="utf-8") as f:
        tvcase = json.load(f)
    tv = layers.TextVectorization.from_config(tvcase["config"])
    tv.set_vocabulary(tvcase["vocabulary"])
    got = np.asarray(tv(tf.constant(tvcase["strings"])))
    ok = got.tolist() == tvcase["ids"]
    failures += not ok
    print(f"  Lockstep's adapted TextVectorization in Keras: {'same ids' if ok else 'FAIL'}")
    if not ok:
        print("   keras:", got.tolist(), "\n   lockstep:", tvcase["ids"])
    if failures:
        raise SystemExit(f"keras_text_interop: {failures} check(s) failed")
    print("keras_text_interop: all checks passed")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("make", "check"):
        raise SystemExit(__doc__)
    {"make": make, "check": check}[sys.argv[1]](sys.argv[2])
