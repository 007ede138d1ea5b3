#!/usr/bin/env python3
"""Peer side of bench/run_peer_bench.sh: Keras 3 on TensorFlow, or PyTorch, on CPU.

One process measures one workload (model x mode x dtype) of one system, in the same shape as
build/bin/train_bench does for Lockstep:
  --model cnn      the reference CNN (examples/reference_cnn.h), Fashion-MNIST 28x28x1,
                   Adam(1e-3), sparse categorical crossentropy from logits; batch 128 (train)
                   or 1000 (inference)
  --model resnet   the small ResNet of bench/bench_resnet.h on synthetic 64x64x3 images in
                   [0, 1) with labels 0..9, SGD(0.01, momentum 0.9); batch 64 / 256
  --model mobilenet_v2 | efficientnet_b0
                   Keras: keras.applications.MobileNetV2 / EfficientNetB0(weights=None,
                   classes=10, classifier_activation=None); PyTorch: torchvision.models'
                   mobilenet_v2 / efficientnet_b0(weights=None, num_classes=10); synthetic
                   --image-size (96) square images, SGD(0.01, momentum 0.9); batch 32
  --model text_conv1d | text_bilstm
                   the text classifiers of examples/text_classification on token ids:
                   Embedding(10000, 64) -> Conv1D(128, 5, relu) -> GlobalMaxPooling1D ->
                   Dense(64, relu) -> Dense(10), or Embedding(10000, 64) ->
                   Bidirectional(LSTM(64)) -> Dense(10) (PyTorch: nn.Embedding, nn.Conv1d,
                   nn.LSTM(bidirectional=True)); synthetic ids in [1, 10000) of length 64
                   (no padding, no mask: PyTorch's nn.LSTM has none without packing),
                   Adam(1e-3); batch 64 (train) or 256 (inference)
  --trainable head the applications with everything but the classifier frozen (Keras:
                   layer.trainable = False; PyTorch: requires_grad False and the features in
                   eval mode, so BatchNorm uses its moving statistics as Keras's frozen BN does)
  --mode train     images/s over --steps training steps after --warmup steps
  --mode infer     images/s over --steps inference batches after --warmup batches
  --dtype float32|bfloat16   Keras: the float32 / mixed_bfloat16 dtype policy;
                   PyTorch: plain fp32 / torch.autocast("cpu", dtype=torch.bfloat16)
Each system runs in its best configuration among --variants, measured in the same process,
interleaved in --chunks chunks, best total rate wins:
  keras:   jit_compile off / on (XLA)                (default: off)
  pytorch: contiguous / channels_last memory format  (default: both)
Threads: --threads for TF's intra- and inter-op pools / torch.set_num_threads (the caller also
sets OMP_NUM_THREADS). Progress goes to stderr; the last stdout line is one JSON object:
  {"system", "version", "model", "mode", "dtype", "threads", "batch_size", "images_per_sec",
   "config" (the best variant), "variants" {variant: images/s}, "params" (weights and
   batch-norm statistics, as Keras's count_params), "peak_rss_mb"}
Interpreters: bench/setup_peers.sh (Keras: .venv-bench-tf, PyTorch: .venv-bench-torch).
"""
import argparse
import gzip
import json
import os
import resource
import sys
import time

import numpy as np

DEFAULT_BATCH = {("cnn", "train"): 128, ("cnn", "infer"): 1000,
                 ("resnet", "train"): 64, ("resnet", "infer"): 256,
                 ("mobilenet_v2", "train"): 32, ("mobilenet_v2", "infer"): 32,
                 ("efficientnet_b0", "train"): 32, ("efficientnet_b0", "infer"): 32,
                 ("text_conv1d", "train"): 64, ("text_conv1d", "infer"): 256,
                 ("text_bilstm", "train"): 64, ("text_bilstm", "infer"): 256}
APPLICATIONS = ("mobilenet_v2", "efficientnet_b0")
TEXT_MODELS = ("text_conv1d", "text_bilstm")
TEXT_VOCAB, TEXT_LEN, TEXT_EMBED = 10000, 64, 64  # as bench/train_bench.cpp's text models
RESNET_STAGES = [(32, 1), (64, 2), (128, 2)]  # (filters, stride) of the basic blocks


def log(*a):
    print("[peers]", *a, file=sys.stderr, flush=True)


def read_idx(path, magic, header):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    got = int.from_bytes(raw[:4], "big")
    if got != magic:
        raise SystemExit(f"peers.py: {path}: bad IDX magic {got:#x}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header)


def load_data(args, n):
    """n images (NHWC float32) and int64 labels; wraps around the source when n is larger."""
    if args.model == "cnn":
        split = "train" if args.mode == "train" else "t10k"
        d = args.data_dir
        try:
            x = read_idx(f"{d}/{split}-images-idx3-ubyte.gz", 0x803, 16)
            y = read_idx(f"{d}/{split}-labels-idx1-ubyte.gz", 0x801, 8)
        except FileNotFoundError as e:
            raise SystemExit(f"peers.py: {e.filename} missing; pass --data-dir "
                             "(Fashion-MNIST IDX files: apt-get install dataset-fashion-mnist)")
        x = x.reshape(-1, 28, 28, 1).astype(np.float32) / 255.0
        y = y.astype(np.int64)
    elif args.model in TEXT_MODELS:
        rng = np.random.default_rng(1)
        m = min(n, 4096)
        x = rng.integers(1, TEXT_VOCAB, size=(m, TEXT_LEN)).astype(np.int32)
        y = rng.integers(0, 10, size=m).astype(np.int64)
    else:
        rng = np.random.default_rng(1)
        m = min(n, 4096)
        size = args.image_size if args.model in APPLICATIONS else 64
        x = rng.random((m, size, size, 3), dtype=np.float32)
        y = rng.integers(0, 10, size=m).astype(np.int64)
    idx = np.arange(n) % len(x)
    return np.ascontiguousarray(x[idx]), y[idx]


# ---------------------------------------------------------------------------------- Keras

def keras_setup(threads):
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    if tf.config.threading.get_intra_op_parallelism_threads() != threads:  # once, before any op
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    import keras
    return tf, keras


def keras_model(keras, model, image_size=96, trainable="all"):
    L = keras.layers
    if model in APPLICATIONS:
        fn = (keras.applications.MobileNetV2 if model == "mobilenet_v2"
              else keras.applications.EfficientNetB0)
        m = fn(weights=None, input_shape=(image_size, image_size, 3), classes=10,
               classifier_activation=None)
        if trainable == "head":
            for layer in m.layers:
                layer.trainable = layer.name == "predictions"
        return m
    if model == "text_conv1d":
        return keras.Sequential([
            keras.Input((TEXT_LEN,), dtype="int32"), L.Embedding(TEXT_VOCAB, TEXT_EMBED),
            L.Conv1D(128, 5, activation="relu"), L.GlobalMaxPooling1D(),
            L.Dense(64, activation="relu"), L.Dense(10)])
    if model == "text_bilstm":
        return keras.Sequential([
            keras.Input((TEXT_LEN,), dtype="int32"), L.Embedding(TEXT_VOCAB, TEXT_EMBED),
            L.Bidirectional(L.LSTM(64)), L.Dense(10)])
    if model == "cnn":
        return keras.Sequential([
            keras.Input((28, 28, 1)),
            L.Conv2D(32, 3, activation="relu"), L.Conv2D(64, 3, activation="relu"),
            L.MaxPooling2D(2), L.Dropout(0.25), L.Flatten(),
            L.Dense(128, activation="relu"), L.Dropout(0.5), L.Dense(10)])

    def block(x, filters, stride):
        h = L.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False)(x)
        h = L.ReLU()(L.BatchNormalization()(h))
        h = L.BatchNormalization()(L.Conv2D(filters, 3, padding="same", use_bias=False)(h))
        s = x
        if stride != 1 or x.shape[-1] != filters:
            s = L.BatchNormalization()(L.Conv2D(filters, 1, strides=stride, use_bias=False)(x))
        return L.ReLU()(L.Add()([h, s]))

    inp = keras.Input((64, 64, 3))
    h = L.Conv2D(32, 3, strides=2, padding="same", use_bias=False)(inp)
    h = L.ReLU()(L.BatchNormalization()(h))
    for filters, stride in RESNET_STAGES:
        h = block(h, filters, stride)
    out = L.Dense(10)(L.GlobalAveragePooling2D()(h))
    return keras.Model(inp, out)


def keras_runner(args, variant, x, y):
    """Returns (timed callable(n_steps) -> images/s, parameter count) for one jit variant."""
    tf, keras = keras_setup(args.threads)
    keras.mixed_precision.set_global_policy(
        "mixed_bfloat16" if args.dtype == "bfloat16" else "float32")
    keras.utils.set_random_seed(1)
    model = keras_model(keras, args.model, args.image_size, args.trainable)
    opt = (keras.optimizers.Adam(1e-3) if args.model == "cnn" or args.model in TEXT_MODELS
           else keras.optimizers.SGD(0.01, momentum=0.9))
    model.compile(optimizer=opt,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=(variant == "jit_on"))
    bs = args.batch_size
    if args.mode == "train":
        pos = [0]

        def run(steps):
            a, b = pos[0], pos[0] + steps * bs
            pos[0] = b
            t0 = time.perf_counter()
            model.fit(x[a:b], y[a:b], batch_size=bs, epochs=1, verbose=0)
            return steps * bs / (time.perf_counter() - t0)
    else:
        batches = [tf.constant(x[i:i + bs]) for i in range(0, len(x) - bs + 1, bs)]

        def run(steps):
            t0 = time.perf_counter()
            for s in range(steps):
                model.predict_on_batch(batches[s % len(batches)])
            return steps * bs / (time.perf_counter() - t0)
    return run, model.count_params()


def keras_version():
    import keras
    import tensorflow as tf
    return f"keras {keras.__version__}, tensorflow {tf.__version__}"


# -------------------------------------------------------------------------------- PyTorch

def torch_model(torch, model, trainable="all"):
    nn = torch.nn
    if model in APPLICATIONS:
        import torchvision
        fn = (torchvision.models.mobilenet_v2 if model == "mobilenet_v2"
              else torchvision.models.efficientnet_b0)
        m = fn(weights=None, num_classes=10)
        if trainable == "head":
            for p in m.features.parameters():
                p.requires_grad = False
        return m
    if model == "text_conv1d":
        class TextConv(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(TEXT_VOCAB, TEXT_EMBED)
                self.conv = nn.Conv1d(TEXT_EMBED, 128, 5)
                self.head = nn.Sequential(nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))

            def forward(self, ids):  # (N, T) -> embeddings (N, T, C) -> NCW for nn.Conv1d
                h = torch.relu(self.conv(self.emb(ids).transpose(1, 2)))
                return self.head(h.amax(dim=2))
        return TextConv()
    if model == "text_bilstm":
        class TextBiLSTM(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(TEXT_VOCAB, TEXT_EMBED)
                self.lstm = nn.LSTM(TEXT_EMBED, 64, batch_first=True, bidirectional=True)
                self.out = nn.Linear(128, 10)

            def forward(self, ids):  # Keras's Bidirectional(LSTM) output: both last states
                _, (h, _) = self.lstm(self.emb(ids))
                return self.out(torch.cat([h[0], h[1]], dim=1))
        return TextBiLSTM()
    if model == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(),
            nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten(),
            nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 10))

    def bn(c):  # Keras's defaults: momentum 0.99 (torch: 1 - 0.99), epsilon 1e-3
        return nn.BatchNorm2d(c, eps=1e-3, momentum=0.01)

    class Block(nn.Module):
        def __init__(self, cin, filters, stride):
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(cin, filters, 3, stride, 1, bias=False), bn(filters), nn.ReLU(),
                nn.Conv2d(filters, filters, 3, 1, 1, bias=False), bn(filters))
            self.proj = (nn.Sequential(nn.Conv2d(cin, filters, 1, stride, bias=False), bn(filters))
                         if stride != 1 or cin != filters else nn.Identity())

        def forward(self, x):
            return torch.relu(self.body(x) + self.proj(x))

    layers = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), bn(32), nn.ReLU()]
    cin = 32
    for filters, stride in RESNET_STAGES:
        layers.append(Block(cin, filters, stride))
        cin = filters
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10)]
    return nn.Sequential(*layers)


def torch_runner(args, variant, x, y):
    import contextlib
    import torch
    torch.set_num_threads(args.threads)
    fmt = {"contiguous": torch.contiguous_format, "channels_last": torch.channels_last}[variant]
    torch.manual_seed(1)
    model = torch_model(torch, args.model, args.trainable)
    text = args.model in TEXT_MODELS
    if not text:
        model = model.to(memory_format=fmt)
    bf16 = args.dtype == "bfloat16"
    autocast = ((lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16
                else contextlib.nullcontext)
    # NHWC storage seen as NCHW; token ids as they are (int64, nn.Embedding's index type)
    xt = torch.from_numpy(x).long() if text else torch.from_numpy(x).permute(0, 3, 1, 2)
    yt = torch.from_numpy(y)
    bs = args.batch_size
    nb = len(xt) // bs
    xb = [xt[i * bs:(i + 1) * bs].contiguous() if text else
          xt[i * bs:(i + 1) * bs].contiguous(memory_format=fmt) for i in range(nb)]
    yb = [yt[i * bs:(i + 1) * bs] for i in range(nb)]
    if args.mode == "train":
        model.train()
        if args.trainable == "head":
            model.features.eval()  # frozen BatchNorm: moving statistics, as Keras's
        trained = [p for p in model.parameters() if p.requires_grad]
        opt = (torch.optim.Adam(trained, lr=1e-3) if args.model == "cnn" or text
               else torch.optim.SGD(trained, lr=0.01, momentum=0.9))
        loss_fn = torch.nn.CrossEntropyLoss()
        pos = [0]

        def run(steps):
            t0 = time.perf_counter()
            for _ in range(steps):
                i = pos[0] % nb
                pos[0] += 1
                opt.zero_grad(set_to_none=True)
                with autocast():
                    loss = loss_fn(model(xb[i]), yb[i])
                loss.backward()
                opt.step()
            return steps * bs / (time.perf_counter() - t0)
    else:
        model.eval()

        def run(steps):
            t0 = time.perf_counter()
            with torch.inference_mode(), autocast():
                for s in range(steps):
                    model(xb[s % nb])
            return steps * bs / (time.perf_counter() - t0)
    params = sum(p.numel() for p in model.parameters()) + sum(
        b.numel() for n, b in model.named_buffers() if not n.endswith("num_batches_tracked"))
    return run, params


def torch_version():
    import torch
    return f"torch {torch.__version__}"


# ----------------------------------------------------------------------------------- main

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--system", choices=["keras", "pytorch"], required=True)
    p.add_argument("--model", choices=["cnn", "resnet", *APPLICATIONS, *TEXT_MODELS],
                   default="cnn")
    p.add_argument("--image-size", type=int, default=96, help="the applications' input size")
    p.add_argument("--trainable", choices=["all", "head"], default="all",
                   help="head: the applications' backbone frozen")
    p.add_argument("--mode", choices=["train", "infer"], default="train")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=0, help="0: 128/1000 cnn, 64/256 resnet")
    p.add_argument("--steps", type=int, default=0, help="timed steps (0: as train_bench)")
    p.add_argument("--warmup", type=int, default=-1)
    p.add_argument("--chunks", type=int, default=2, help="interleaved timed chunks per variant")
    p.add_argument("--variants", default="",
                   help="comma list; keras: jit_off,jit_on; pytorch: contiguous,channels_last")
    p.add_argument("--data-dir", default=os.environ.get("LOCKSTEP_FASHION_MNIST_DIR",
                                                        "/usr/share/datasets/fashion-mnist"))
    args = p.parse_args()
    train = args.mode == "train"
    args.batch_size = args.batch_size or DEFAULT_BATCH[(args.model, args.mode)]
    if args.steps <= 0:
        args.steps = {("cnn", "train"): 200, ("resnet", "train"): 30,
                      ("text_conv1d", "train"): 100, ("text_bilstm", "train"): 30}.get(
            (args.model, args.mode), 20 if args.model in APPLICATIONS else 10)
    if args.warmup < 0:
        args.warmup = ((20 if args.model == "cnn" else 3 if args.model in APPLICATIONS else 5)
                       if train else 2)
    if args.trainable == "head" and args.model not in APPLICATIONS:
        raise SystemExit("peers.py: --trainable head needs an application model")
    if args.threads < 1 or args.chunks < 1 or args.batch_size < 1:
        raise SystemExit("peers.py: --threads, --chunks and --batch-size must be >= 1")
    allowed = {"keras": ["jit_off", "jit_on"], "pytorch": ["contiguous", "channels_last"]}
    variants = [v for v in (args.variants or
                            ("jit_off" if args.system == "keras"
                             else "contiguous" if args.model in TEXT_MODELS
                             else "contiguous,channels_last")).split(",") if v]
    bad = [v for v in variants if v not in allowed[args.system]]
    if bad:
        raise SystemExit(f"peers.py: --variants {','.join(bad)} is not one of "
                         f"{','.join(allowed[args.system])} for {args.system}")

    per_chunk = max(1, args.steps // args.chunks)
    # Training consumes fresh batches: warm-up + all chunks; inference cycles over a few.
    n = args.batch_size * ((args.warmup + per_chunk * args.chunks) if train else
                           min(args.steps + args.warmup, 8))
    x, y = load_data(args, n)
    make = keras_runner if args.system == "keras" else torch_runner
    runners = {}
    for v in variants:
        runners[v], params = make(args, v, x, y)
        if args.warmup:
            runners[v](args.warmup)
    seen = {v: 0.0 for v in variants}
    secs = {v: 0.0 for v in variants}
    for c in range(args.chunks):
        for v in (variants if c % 2 == 0 else variants[::-1]):
            rate = runners[v](per_chunk)
            imgs = per_chunk * args.batch_size
            seen[v] += imgs
            secs[v] += imgs / rate
            log(f"{args.system} {args.model} {args.mode} {args.dtype} {v} chunk {c}: "
                f"{rate:.1f} images/s")
    rates = {v: round(seen[v] / secs[v], 1) for v in variants}
    best = max(rates, key=rates.get)
    version = keras_version() if args.system == "keras" else torch_version()
    print(json.dumps({
        "system": args.system, "version": version, "model": args.model, "mode": args.mode,
        "dtype": args.dtype, "threads": args.threads, "batch_size": args.batch_size,
        "images_per_sec": rates[best], "config": best, "variants": rates, "params": params,
        "trainable": args.trainable,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}),
        flush=True)


if __name__ == "__main__":
    main()
