#!/usr/bin/env python3
"""Keras's side of the text job: examples/text_classification's recipe in Keras 3 on TensorFlow,
on exactly the same training and validation files (the split.json the example writes).

  .venv-bench-tf/bin/python bench/text_classification_keras.py OUT_DIR/split.json \
      [--model conv1d|bilstm] [--epochs 5] [--threads 2]

Recipe, as the example's: TextVectorization(max_tokens=10000, output_sequence_length=64) adapted
on the training texts, in the input pipeline (map, cache, prefetch), batches of 32, shuffled once
(seed 42); Embedding(vocab, 64[, mask_zero for bilstm]) -> Conv1D(128, 5, relu) ->
GlobalMaxPooling1D -> Dropout(0.5) -> Dense(64, relu) -> Dense(classes), or -> Bidirectional(
LSTM(64)) -> Dropout(0.5) -> Dense(classes); Adam(1e-3), sparse categorical cross-entropy from
logits. Prints one JSON line: validation accuracy and loss, training seconds and texts/s.
"""
import argparse
import json
import os
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("split")
    p.add_argument("--model", choices=["conv1d", "bilstm"], default="conv1d")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=42)
    a = p.parse_args()
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    import keras
    L = keras.layers
    keras.utils.set_random_seed(a.seed)
    split = json.load(open(a.split))
    classes = split["classes"]

    def texts(rows):
        out = []
        for path, _ in rows:
            with open(path, "rb") as f:
                out.append(f.read().decode("utf-8", errors="replace"))
        return out, [label for _, label in rows]

    xt, yt = texts(split["train"])
    xv, yv = texts(split["validation"])
    vectorize = L.TextVectorization(max_tokens=10000, output_sequence_length=64)
    vectorize.adapt(tf.data.Dataset.from_tensor_slices(xt).batch(256))

    def pipeline(x, y, shuffle):
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        if shuffle:
            ds = ds.shuffle(len(x), seed=a.seed, reshuffle_each_iteration=False)
        ds = ds.batch(32).map(lambda s, l: (vectorize(s), l), num_parallel_calls=tf.data.AUTOTUNE)
        return ds.cache().prefetch(tf.data.AUTOTUNE)

    train, val = pipeline(xt, yt, True), pipeline(xv, yv, False)
    vocab = vectorize.vocabulary_size()
    inp = keras.Input((64,), dtype="int64")
    x = L.Embedding(vocab, 64, mask_zero=a.model == "bilstm")(inp)
    if a.model == "conv1d":
        x = L.Conv1D(128, 5, activation="relu")(x)
        x = L.GlobalMaxPooling1D()(x)
        x = L.Dropout(0.5)(x)
        x = L.Dense(64, activation="relu")(x)
    else:
        x = L.Bidirectional(L.LSTM(64))(x)
        x = L.Dropout(0.5)(x)
    model = keras.Model(inp, L.Dense(len(classes))(x))
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    t0 = time.perf_counter()
    model.fit(train, epochs=a.epochs, validation_data=val, verbose=2)
    seconds = time.perf_counter() - t0
    loss, acc = model.evaluate(val, verbose=0)
    print(json.dumps({"system": "keras", "version": f"keras {keras.__version__}, tensorflow "
                      f"{tf.__version__}", "model": a.model, "validation_accuracy": round(acc, 4),
                      "validation_loss": round(loss, 4), "epochs": a.epochs,
                      "classes": len(classes), "vocabulary": vocab,
                      "train_seconds": round(seconds, 1),
                      "train_texts_per_sec": round(a.epochs * len(xt) / seconds, 1)}), flush=True)


if __name__ == "__main__":
    main()
