#!/usr/bin/env python3
"""Peer of bench/text_vectorization_bench.cpp: Keras's TextVectorization in a tf.data pipeline
over the same fortunes corpus, the same modes and thread count:
  from_tensor_slices(quotes).repeat(R).batch(32).map(vectorize, num_parallel_calls=N).prefetch
with tf.data's private thread pool and TensorFlow's op pools at N threads. One JSON line per mode.

  python bench/text_vectorization_peer.py [--threads 2] [--repeat 10] [--fortunes-dir DIR]
(the interop venv has Keras and TensorFlow: .venv-interop/bin/python)
"""
import argparse
import json
import os
import time

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

CATEGORIES = ["computers", "definitions", "people", "politics", "science", "songs-poems"]


def corpus(d):
    out = []
    for c in CATEGORIES:
        with open(os.path.join(d, c), "rb") as f:
            text = f.read().decode("utf-8", "replace")
        cur = []
        for line in text.split("\n"):
            if line.rstrip("\r") == "%":
                q = "\n".join(cur).strip(" \t\r\n")
                if q:
                    out.append(q)
                cur = []
            else:
                cur.append(line.rstrip("\r"))
        q = "\n".join(cur).strip(" \t\r\n")
        if q:
            out.append(q)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--fortunes-dir", default="/usr/share/games/fortunes")
    a = ap.parse_args()
    import tensorflow as tf
    tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    import keras
    texts = corpus(a.fortunes_dir)
    modes = [("int", dict(max_tokens=10000, output_sequence_length=100)),
             ("multi_hot", dict(max_tokens=10000, output_mode="multi_hot")),
             ("int_bigrams", dict(max_tokens=20000, ngrams=2, output_sequence_length=200))]
    for name, kw in modes:
        tv = keras.layers.TextVectorization(**kw)
        t0 = time.perf_counter()
        tv.adapt(tf.data.Dataset.from_tensor_slices(texts).batch(256))
        adapt_s = time.perf_counter() - t0
        opts = tf.data.Options()
        opts.threading.private_threadpool_size = a.threads

        def pipeline(repeat):
            return (tf.data.Dataset.from_tensor_slices(texts).repeat(repeat).batch(32)
                    .map(tv, num_parallel_calls=a.threads).prefetch(tf.data.AUTOTUNE)
                    .with_options(opts))
        for _ in pipeline(1):  # warm-up (traces the map function)
            pass
        rows = 0
        t0 = time.perf_counter()
        for b in pipeline(a.repeat):
            rows += int(b.shape[0])
        sps = rows / (time.perf_counter() - t0)
        print(json.dumps({"framework": "keras-tf.data", "mode": name, "threads": a.threads,
                          "strings": rows, "adapt_s": round(adapt_s, 3),
                          "strings_per_s": round(sps)}), flush=True)


if __name__ == "__main__":
    main()
