#!/usr/bin/env python3
"""Peer side of bench/run_transformer_bench.sh: PyTorch, or Keras 3 on JAX, on CPU.

One process measures one training workload of one system, in the shape of
build/bin/transformer_bench for Lockstep (--steps timed steps after --warmup ones; ViT: 10
after 2, GPT: 3 after 1):
  --model vit   the Vision Transformer of examples/vit_model.h without augmentation: 64x64x3
                images, patches of 8 embedded by a stride-8 conv to 128 features, a learned
                position table, 4 pre-norm blocks (4 heads, GELU MLP of 256, LayerNorm eps
                1e-6), a last LayerNorm, the mean over the 64 patches, Dense(10); batch 32,
                Adam(1e-3); images/s
  --model gpt   a decoder-only transformer of ~10.8M parameters: byte ids (256), a learned
                position table, 6 pre-norm blocks of causal attention (6 heads of 64) and a
                GELU MLP of 1536, d = 384, a last LayerNorm, Dense(256); next-token
                cross-entropy on every position; --seq-len (256), batch 8, Adam(3e-4); tokens/s
  --dtype float32|bfloat16   Keras: the float32 / mixed_bfloat16 policy; PyTorch: fp32 /
                torch.autocast("cpu", dtype=torch.bfloat16)
  PyTorch attention is F.scaled_dot_product_attention (is_causal=True for the GPT);
  --compile 1 wraps the model in torch.compile (inductor). Keras's MultiHeadAttention runs
  ops.dot_product_attention on JAX, and fit compiles the whole step with XLA (jit_compile).
Threads: --threads for torch.set_num_threads / XLA's CPU pool (the caller also sets
OMP_NUM_THREADS and XLA_FLAGS). The last stdout line is one JSON object with the keys of
transformer_bench's (system, model, dtype_policy, threads, batch_size, seq_len, params,
items_per_sec, unit, step_ms, final_loss, compile_seconds, peak_rss_mb) and version, config.
"""
import argparse
import json
import os
import resource
import sys
import time

import numpy as np

VOCAB, DIM, LAYERS, HEADS, MLP = 256, 384, 6, 6, 1536  # bench/transformer_bench.cpp's
VIT_SIZE, VIT_PATCH, VIT_DIM, VIT_DEPTH, VIT_HEADS, VIT_MLP = 64, 8, 128, 4, 4, 256


def data(args):
    rng = np.random.default_rng(1)
    n = args.batch_size * (args.warmup + args.steps)
    if args.model == "vit":
        x = rng.uniform(0, 255, (n, VIT_SIZE, VIT_SIZE, 3)).astype("float32")
        y = rng.integers(0, 10, n).astype("int32")
        return x, y
    ids = rng.integers(0, VOCAB, (n, args.seq_len + 1)).astype("int32")
    return ids[:, :-1].copy(), ids[:, 1:].copy()


def run_torch(args):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)

    class Block(nn.Module):
        def __init__(self, d, heads, mlp, eps, causal):
            super().__init__()
            self.heads, self.causal = heads, causal
            self.ln1, self.ln2 = nn.LayerNorm(d, eps=eps), nn.LayerNorm(d, eps=eps)
            self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, mlp), nn.Linear(mlp, d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(
                2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
            x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            n = (VIT_SIZE // VIT_PATCH) ** 2
            self.embed = nn.Conv2d(3, VIT_DIM, VIT_PATCH, VIT_PATCH)
            self.pos = nn.Parameter(torch.randn(1, n, VIT_DIM) * 0.02)
            self.blocks = nn.Sequential(
                *[Block(VIT_DIM, VIT_HEADS, VIT_MLP, 1e-6, False) for _ in range(VIT_DEPTH)])
            self.norm, self.head = nn.LayerNorm(VIT_DIM, eps=1e-6), nn.Linear(VIT_DIM, 10)

        def forward(self, x):  # x: NCHW pixels 0..255
            x = self.embed(x / 255.0).flatten(2).transpose(1, 2) + self.pos
            return self.head(self.norm(self.blocks(x)).mean(1))

    class GPT(nn.Module):
        def __init__(self, t):
            super().__init__()
            self.tok, self.pos = nn.Embedding(VOCAB, DIM), nn.Parameter(torch.randn(1, t, DIM) * .02)
            self.blocks = nn.Sequential(*[Block(DIM, HEADS, MLP, 1e-5, True) for _ in range(LAYERS)])
            self.norm, self.head = nn.LayerNorm(DIM, eps=1e-5), nn.Linear(DIM, VOCAB)

        def forward(self, ids):
            return self.head(self.norm(self.blocks(self.tok(ids) + self.pos)))

    vit = args.model == "vit"
    model = ViT() if vit else GPT(args.seq_len)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3 if vit else 3e-4)
    x, y = data(args)
    x = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous() if vit else torch.from_numpy(x).long()
    y = torch.from_numpy(y).long()
    fwd = torch.compile(model) if args.compile else model
    bf16 = args.dtype == "bfloat16"

    def step(xb, yb):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = fwd(xb)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), yb.reshape(-1))
        loss.backward()
        opt.step()
        return loss

    bs = args.batch_size
    t0 = time.perf_counter()
    for i in range(args.warmup):
        step(x[i * bs:(i + 1) * bs], y[i * bs:(i + 1) * bs])
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(args.warmup, args.warmup + args.steps):
        loss = step(x[i * bs:(i + 1) * bs], y[i * bs:(i + 1) * bs])
    loss = float(loss.detach())
    return params, time.perf_counter() - t0, loss, compile_s, torch.__version__, \
        "torch.compile" if args.compile else "eager"


def run_keras(args):
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import jax
    import keras
    from keras import layers
    keras.utils.set_random_seed(1)
    if args.dtype == "bfloat16":
        keras.mixed_precision.set_global_policy("mixed_bfloat16")

    def block(x, heads, mlp, eps, causal):
        d = x.shape[-1]
        h = layers.LayerNormalization(epsilon=eps)(x)
        h = layers.MultiHeadAttention(heads, d // heads)(h, h, use_causal_mask=causal)
        x = layers.Add()([x, h])
        h = layers.LayerNormalization(epsilon=eps)(x)
        h = layers.Dense(d)(layers.Dense(mlp, activation="gelu")(h))
        return layers.Add()([x, h])

    class Positions(layers.Layer):
        def build(self, shape):
            self.table = self.add_weight(shape=shape[1:], initializer="glorot_uniform")

        def call(self, x):
            return x + keras.ops.cast(self.table, x.dtype)

    vit = args.model == "vit"
    if vit:
        inp = keras.Input((VIT_SIZE, VIT_SIZE, 3))
        x = layers.Rescaling(1.0 / 255)(inp)
        x = layers.Conv2D(VIT_DIM, VIT_PATCH, strides=VIT_PATCH)(x)
        x = Positions()(layers.Reshape(((VIT_SIZE // VIT_PATCH) ** 2, VIT_DIM))(x))
        for _ in range(VIT_DEPTH):
            x = block(x, VIT_HEADS, VIT_MLP, 1e-6, False)
        x = layers.GlobalAveragePooling1D()(layers.LayerNormalization(epsilon=1e-6)(x))
        out = layers.Dense(10, dtype="float32")(x)
    else:
        inp = keras.Input((args.seq_len,), dtype="int32")
        x = Positions()(layers.Embedding(VOCAB, DIM)(inp))
        for _ in range(LAYERS):
            x = block(x, HEADS, MLP, 1e-5, True)
        out = layers.Dense(VOCAB, dtype="float32")(layers.LayerNormalization(epsilon=1e-5)(x))
    model = keras.Model(inp, out)
    model.compile(optimizer=keras.optimizers.Adam(1e-3 if vit else 3e-4),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = data(args)
    w = args.batch_size * args.warmup
    t0 = time.perf_counter()
    model.fit(x[:w], y[:w], batch_size=args.batch_size, epochs=1, verbose=0, shuffle=False)
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    h = model.fit(x[w:], y[w:], batch_size=args.batch_size, epochs=1, verbose=0, shuffle=False)
    seconds = time.perf_counter() - t0
    return model.count_params(), seconds, h.history["loss"][-1], compile_s, \
        f"keras {keras.__version__}, jax {jax.__version__}", "jit_compile"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--system", choices=["pytorch", "keras"], required=True)
    p.add_argument("--model", choices=["vit", "gpt"], default="vit")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=0)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--compile", type=int, default=0)
    args = p.parse_args()
    vit = args.model == "vit"
    args.batch_size = args.batch_size or (32 if vit else 8)
    args.steps = args.steps or (10 if vit else 3)
    args.warmup = args.warmup or (2 if vit else 1)
    params, seconds, loss, compile_s, version, config = (
        run_torch if args.system == "pytorch" else run_keras)(args)
    items = args.batch_size * args.steps * (1 if vit else args.seq_len)
    print(json.dumps({
        "system": args.system, "version": version, "config": config, "model": args.model,
        "dtype_policy": "float32" if args.dtype == "float32" else "mixed_bfloat16",
        "threads": args.threads, "batch_size": args.batch_size,
        "seq_len": (VIT_SIZE // VIT_PATCH) ** 2 if vit else args.seq_len, "params": int(params),
        "items_per_sec": round(items / seconds, 1), "unit": "images" if vit else "tokens",
        "step_ms": round(1000 * seconds / args.steps, 2), "final_loss": round(float(loss), 4),
        "compile_seconds": round(compile_s, 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))


if __name__ == "__main__":
    sys.exit(main())
