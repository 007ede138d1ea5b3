#!/usr/bin/env python3
"""PyTorch side of the Lockstep-vs-PyTorch CPU benchmark on Fashion-MNIST.

Trains the reference CNN (the Keras MNIST example net) with PyTorch on the CPU in
its best eager configuration: a fixed thread count, and for training and for
inference separately, whichever memory format (channels_last or contiguous NCHW)
a short interleaved trial finds faster (--memory-format forces one). Data is preloaded
as float32 tensors in [0, 1]; batches are slices of a shuffled index permutation,
as on the Lockstep side, so loading is not the bottleneck.

Default mode times --train-steps training steps (after --warmup steps) and
--infer-batches inference batches. With --epochs E > 0 it instead trains E full
epochs and also reports test accuracy.

Progress goes to stderr; the last stdout line is one JSON object:
  {"system":"pytorch","torch_version":...,"threads":...,"train_images_per_sec":...,
   "infer_images_per_sec":...,"peak_rss_mb":...,"memory_format":...,
   "infer_memory_format":...}            (+ "test_accuracy" with --epochs)
memory_format is the training one. peak_rss_mb is ru_maxrss of the whole process,
~0.5 GB of it from `import torch` alone (the PyPI wheel also maps its CUDA libs).
Set up the interpreter with bench/setup_venv.sh.
"""
import argparse
import copy
import gzip
import json
import resource
import sys
import time

import numpy as np
import torch
from torch import nn

FORMATS = {"contiguous": torch.contiguous_format, "channels_last": torch.channels_last}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def read_idx(path, magic, header):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    got = int.from_bytes(raw[:4], "big")
    if got != magic:
        raise ValueError(f"{path}: bad IDX magic {got:#x}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header)


def load_split(data_dir, prefix):
    x = read_idx(f"{data_dir}/{prefix}-images-idx3-ubyte.gz", 0x803, 16)
    y = read_idx(f"{data_dir}/{prefix}-labels-idx1-ubyte.gz", 0x801, 8)
    x = torch.from_numpy(x.copy()).float().div_(255.0).reshape(-1, 1, 28, 28)
    return x, torch.from_numpy(y.astype(np.int64))


def make_model(fmt):
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(),
        nn.Conv2d(32, 64, 3), nn.ReLU(),
        nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten(),
        nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5),
        nn.Linear(128, 10),
    ).to(memory_format=FORMATS[fmt])
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


def batches(n, bs, gen, drop_last=True):
    """Endless stream of index batches; a new shuffled permutation each epoch."""
    while True:
        perm = torch.randperm(n, generator=gen)
        stop = n - n % bs if drop_last else n
        for i in range(0, stop, bs):
            yield perm[i:i + bs]


def train(model, opt, x, y, idx_iter, steps, fmt):
    """Runs `steps` training steps; returns the number of images seen."""
    model.train()
    loss_fn, mf, seen = nn.CrossEntropyLoss(), FORMATS[fmt], 0
    for _ in range(steps):
        idx = next(idx_iter)
        xb, yb = x[idx].contiguous(memory_format=mf), y[idx]
        opt.zero_grad(set_to_none=True)
        loss_fn(model(xb), yb).backward()
        opt.step()
        seen += len(idx)
    return seen


def timed_train(model, opt, x, y, idx_iter, steps, fmt):
    t0, c0 = time.perf_counter(), time.process_time()
    seen = train(model, opt, x, y, idx_iter, steps, fmt)
    wall = time.perf_counter() - t0
    # CPU time / wall well below --threads means other processes took the cores.
    log(f"train {fmt}: {seen / wall:.1f} images/s, cpu/wall {(time.process_time() - c0) / wall:.2f}")
    return seen / wall


@torch.inference_mode()
def infer(model, x, bs, nbatches, fmt, y=None):
    """Returns (images/s, accuracy or None) over nbatches consecutive batches of x."""
    model.eval()
    mf, seen, correct = FORMATS[fmt], 0, 0
    t0, c0 = time.perf_counter(), time.process_time()
    for b in range(nbatches):
        i = (b * bs) % len(x)
        xb = x[i:i + bs].contiguous(memory_format=mf)
        pred = model(xb).argmax(1)
        if y is not None:
            correct += (pred == y[i:i + bs]).sum().item()
        seen += len(xb)
    wall = time.perf_counter() - t0
    log(f"infer {fmt}: {seen / wall:.1f} images/s, cpu/wall {(time.process_time() - c0) / wall:.2f}")
    return seen / wall, (correct / seen if y is not None else None)


def fastest(what, runners):
    """Interleaved trial: runners maps format -> callable returning images/s.
    Best of 3 rounds per format (resists load from other processes)."""
    best = {fmt: 0.0 for fmt in runners}
    for _ in range(3):
        for fmt, run in runners.items():
            best[fmt] = max(best[fmt], run())
    log(f"{what} memory-format trial, best images/s:", {k: round(v, 1) for k, v in best.items()})
    return max(best, key=best.get)


def pick_train_format(x, y, args):
    if args.memory_format != "auto":
        return args.memory_format
    runners = {}
    for fmt in FORMATS:
        model, opt = make_model(fmt)
        it = batches(len(x), args.batch_size, torch.Generator().manual_seed(1))
        train(model, opt, x, y, it, 5, fmt)
        steps = max(1, args.trial_steps // 3)
        runners[fmt] = lambda a=(model, opt, x, y, it, steps, fmt): timed_train(*a)
    return fastest("train", runners)


def pick_infer_format(model, x, args):
    if args.memory_format != "auto":
        return args.memory_format
    runners = {}
    for fmt in FORMATS:
        m = copy.deepcopy(model).to(memory_format=FORMATS[fmt])
        infer(m, x, args.batch_size, 3, fmt)
        runners[fmt] = lambda a=(m, x, args.batch_size, 10, fmt): infer(*a)[0]
    return fastest("infer", runners)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--train-steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--infer-batches", type=int, default=50)
    p.add_argument("--epochs", type=int, default=0)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--memory-format", choices=["auto", *FORMATS], default="auto")
    p.add_argument("--trial-steps", type=int, default=30,
                   help="timed steps per memory format in the auto trial")
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    x_train, y_train = load_split(args.data_dir, "train")
    x_test, y_test = load_split(args.data_dir, "t10k")
    log(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"train {tuple(x_train.shape)}, test {tuple(x_test.shape)}")

    fmt = pick_train_format(x_train, y_train, args)
    model, opt = make_model(fmt)
    gen = torch.Generator().manual_seed(42)
    bs = args.batch_size
    result = {"system": "pytorch", "torch_version": torch.__version__,
              "threads": torch.get_num_threads()}

    if args.epochs > 0:
        # Full epochs, including the last partial batch (as Keras' fit does).
        steps = args.epochs * -(-len(x_train) // bs)
        it = batches(len(x_train), bs, gen, drop_last=False)
        train_rate = timed_train(model, opt, x_train, y_train, it, steps, fmt)
        _, acc = infer(model, x_test, bs, -(-len(x_test) // bs), fmt, y_test)
        result["test_accuracy"] = round(acc, 4)
    else:
        it = batches(len(x_train), bs, gen)
        train(model, opt, x_train, y_train, it, args.warmup, fmt)
        train_rate = timed_train(model, opt, x_train, y_train, it, args.train_steps, fmt)

    del opt  # inference needs only the trained model, in its own best format
    infer_fmt = pick_infer_format(model, x_test, args)
    model = model.to(memory_format=FORMATS[infer_fmt])
    infer(model, x_test, bs, 5, infer_fmt)  # warm-up
    infer_rate, _ = infer(model, x_test, bs, args.infer_batches, infer_fmt)

    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    result.update(train_images_per_sec=round(train_rate, 1),
                  infer_images_per_sec=round(infer_rate, 1),
                  peak_rss_mb=round(peak_rss_mb, 1),
                  memory_format=fmt, infer_memory_format=infer_fmt)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
