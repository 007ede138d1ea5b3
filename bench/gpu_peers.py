#!/usr/bin/env python3
"""Peers of bench/device_check.sh on an accelerator: the small ResNet of bench/bench_resnet.h
(64x64x3 synthetic images, 10 classes, SGD(0.01, momentum 0.9), cross-entropy from logits)
trained in PyTorch and in JAX/Flax, fp32 and bf16, images/s.

  --system pytorch   cuDNN (cudnn.benchmark), channels_last or contiguous (the faster wins),
                     bf16 = torch.autocast(device, dtype=torch.bfloat16); TF32 as PyTorch's
                     defaults leave it for convolutions
  --system jax       Flax linen, the step jax.jit-compiled with donated state; bf16 = the
                     model computing in bfloat16 (dtype=bfloat16, params float32)
  --device cuda|cpu  cpu: the tiny sizes bench/device_check.sh uses to check itself here

The network is built from bench/peers.py's PyTorch definition (the same as bench_resnet.h) and
written once more in Flax. The last stdout line is one JSON object: {"system", "dtype",
"device", "batch_size", "images_per_sec", "config", "variants", "compile_seconds"}.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
RESNET_STAGES = [(32, 1), (64, 2), (128, 2)]


def log(*a):
    print("[gpu_peers]", *a, file=sys.stderr, flush=True)


def data(n, size):
    rng = np.random.default_rng(1)
    x = rng.random((n, size, size, 3), dtype=np.float32)
    y = rng.integers(0, 10, size=n).astype(np.int32)
    return x, y


# ------------------------------------------------------------------------------- PyTorch

def torch_rate(args, variant):
    import contextlib
    import torch
    from peers import torch_model
    dev = torch.device(args.device)
    torch.backends.cudnn.benchmark = True
    fmt = {"contiguous": torch.contiguous_format, "channels_last": torch.channels_last}[variant]
    torch.manual_seed(1)
    model = torch_model(torch, "resnet").to(dev, memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    x, y = data(args.batch_size * 4, args.image_size)
    xb = [torch.from_numpy(x[i::4]).permute(0, 3, 1, 2).to(dev).contiguous(memory_format=fmt)
          for i in range(4)]
    yb = [torch.from_numpy(y[i::4]).long().to(dev) for i in range(4)]
    autocast = ((lambda: torch.autocast(dev.type, dtype=torch.bfloat16))
                if args.dtype == "bfloat16" else contextlib.nullcontext)

    def step(i):
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = loss_fn(model(xb[i % 4]), yb[i % 4])
        loss.backward()
        opt.step()

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    for i in range(args.warmup):
        step(i)
    sync()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(args.steps):
        step(i)
    sync()
    return args.steps * args.batch_size / (time.perf_counter() - t0), compile_s


# ---------------------------------------------------------------------------------- JAX

def jax_rate(args, variant):
    import jax
    import jax.numpy as jnp
    import flax.linen as nn
    import optax
    dt = jnp.bfloat16 if args.dtype == "bfloat16" else jnp.float32

    class Block(nn.Module):
        filters: int
        stride: int

        @nn.compact
        def __call__(self, x, train):
            bn = lambda: nn.BatchNorm(use_running_average=not train, momentum=0.99,
                                      epsilon=1e-3, dtype=dt)
            conv = lambda f, k, s: nn.Conv(f, (k, k), (s, s), padding="SAME", use_bias=False,
                                           dtype=dt)
            h = nn.relu(bn()(conv(self.filters, 3, self.stride)(x)))
            h = bn()(conv(self.filters, 3, 1)(h))
            s = x
            if self.stride != 1 or x.shape[-1] != self.filters:
                s = bn()(conv(self.filters, 1, self.stride)(x))
            return nn.relu(h + s)

    class ResNet(nn.Module):
        @nn.compact
        def __call__(self, x, train=True):
            x = nn.Conv(32, (3, 3), (2, 2), padding="SAME", use_bias=False, dtype=dt)(x)
            x = nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.99,
                                     epsilon=1e-3, dtype=dt)(x))
            for f, s in RESNET_STAGES:
                x = Block(f, s)(x, train)
            return nn.Dense(10, dtype=dt)(jnp.mean(x, axis=(1, 2))).astype(jnp.float32)

    model = ResNet()
    x, y = data(args.batch_size * 4, args.image_size)
    dev = jax.devices("gpu" if args.device == "cuda" else "cpu")[0]
    xb = [jax.device_put(x[i::4], dev) for i in range(4)]
    yb = [jax.device_put(y[i::4], dev) for i in range(4)]
    v = model.init(jax.random.PRNGKey(1), xb[0][:2], train=False)
    tx = optax.sgd(0.01, momentum=0.9)
    state = (v["params"], v["batch_stats"], tx.init(v["params"]))

    def step_fn(state, xi, yi):
        params, stats, opt = state

        def loss_fn(p):
            logits, upd = model.apply({"params": p, "batch_stats": stats}, xi, train=True,
                                      mutable=["batch_stats"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, yi).mean(), upd

        (loss, upd), g = jax.value_and_grad(loss_fn, has_aux=True)(params)
        u, opt = tx.update(g, opt, params)
        return (optax.apply_updates(params, u), upd["batch_stats"], opt), loss

    step = jax.jit(step_fn, donate_argnums=0)
    t0 = time.perf_counter()
    for i in range(max(args.warmup, 1)):
        state, loss = step(state, xb[i % 4], yb[i % 4])
    loss.block_until_ready()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(args.steps):
        state, loss = step(state, xb[i % 4], yb[i % 4])
    loss.block_until_ready()
    return args.steps * args.batch_size / (time.perf_counter() - t0), compile_s


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--system", choices=["pytorch", "jax"], required=True)
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    args = p.parse_args()
    variants = ["channels_last", "contiguous"] if args.system == "pytorch" else ["jit"]
    rates, compiles = {}, {}
    for v in variants:
        fn = torch_rate if args.system == "pytorch" else jax_rate
        rates[v], compiles[v] = fn(args, v)
        log(f"{args.system} {args.dtype} {v}: {rates[v]:.0f} images/s "
            f"(warm-up incl. compile {compiles[v]:.1f} s)")
    best = max(rates, key=rates.get)
    print(json.dumps({"system": args.system, "dtype": args.dtype, "device": args.device,
                      "batch_size": args.batch_size, "images_per_sec": rates[best],
                      "config": best, "variants": rates, "compile_seconds": compiles[best]}))


if __name__ == "__main__":
    main()
