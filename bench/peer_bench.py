#!/usr/bin/env python3
"""Driver of bench/run_peer_bench.sh: Lockstep vs Keras 3 (TensorFlow) vs PyTorch, side by side.

Workloads (identical architecture, batch, threads and data in all three systems):
  cnn_train     the reference CNN, Fashion-MNIST 28x28x1, batch 128, Adam, train img/s
  resnet_train  bench/bench_resnet.h, synthetic 64x64x3, batch 64, SGD momentum 0.9, train img/s
  cnn_infer     the reference CNN, batch 1000, inference img/s
  resnet_infer  the ResNet, batch 256, inference img/s
  mobilenet_v2_train / _infer, efficientnet_b0_train / _infer
                keras.applications' MobileNetV2 / EfficientNetB0 (weights=None, 10 classes;
                Lockstep: ls::applications, PyTorch: torchvision.models' models of the same
                architecture), synthetic --image-size (96) square images, batch 32, SGD
                momentum 0.9
  mobilenet_v2_frozen_train, efficientnet_b0_frozen_train
                the same training step with the backbone frozen (only the classifier trains:
                transfer learning's first phase); the table's "frozen vs full" lines compare
                each system's frozen and full training rates
--workloads applications selects the six application workloads (all: every workload)
each in fp32 and in each system's own bf16 mode (Lockstep and Keras: the mixed_bfloat16 dtype
policy; PyTorch: torch.autocast("cpu", dtype=torch.bfloat16)).

Rounds: in each round every (workload, dtype) is measured once per system, the systems in an
order that rotates from one measurement group to the next; a fresh process per measurement,
warm-up steps excluded. The health probe (build/bin/fma_health: FMA throughput, and DRAM and L3
bandwidth, recorded with every measurement) runs between measurements; a measurement whose
probe before or after reads below --threshold x the healthy FMA rate (the best of three probes
at start, raised by any later probe that reads higher), or below --bandwidth-threshold x the
healthy DRAM bandwidth when that is set (default off: in a 3-round run of the backbones the slow
Lockstep rounds did not coincide with low bandwidth), is dropped and repeated,
at most --max-retries times (then the last try is kept, marked disturbed). Figures are medians
over rounds.

Peers run in their best configuration: PyTorch the faster of contiguous / channels_last
(measured in the same process, interleaved) with jemalloc preloaded; Keras with jit_compile off,
unless the XLA probe (--keras-xla probe, before the rounds, short runs of both) finds it more
than 10% faster.

Prints a table, then as the last line one JSON object with every figure, the ratios to the
strongest peer's fp32 and to the strongest peer's own bf16, GFLOP/s (forward = 2 x MACs of the
convolutions and Dense layers; training = 3 x forward) and the fraction of the measured FMA rate
and of the physical fp32 peak.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

WORKLOADS = {  # name: (model, mode, timed steps, warm-up steps)
    "cnn_train": ("cnn", "train", 100, 10),
    "resnet_train": ("resnet", "train", 30, 5),
    "cnn_infer": ("cnn", "infer", 10, 2),
    "resnet_infer": ("resnet", "infer", 10, 2),
    "mobilenet_v2_train": ("mobilenet_v2", "train", 20, 3),
    "mobilenet_v2_infer": ("mobilenet_v2", "infer", 20, 2),
    "mobilenet_v2_frozen_train": ("mobilenet_v2", "train", 20, 3),
    "efficientnet_b0_train": ("efficientnet_b0", "train", 20, 3),
    "efficientnet_b0_infer": ("efficientnet_b0", "infer", 20, 2),
    "efficientnet_b0_frozen_train": ("efficientnet_b0", "train", 20, 3),
    "text_conv1d_train": ("text_conv1d", "train", 100, 10),
    "text_conv1d_infer": ("text_conv1d", "infer", 20, 2),
    "text_bilstm_train": ("text_bilstm", "train", 30, 5),
    "text_bilstm_infer": ("text_bilstm", "infer", 10, 2),
}
DEFAULT_WORKLOADS = ["cnn_train", "resnet_train", "cnn_infer", "resnet_infer"]
APPLICATIONS = ("mobilenet_v2", "efficientnet_b0")
WORKLOAD_SETS = {  # --workloads shorthands
    "applications": [w for w in WORKLOADS if WORKLOADS[w][0] in APPLICATIONS],
    "text": [w for w in WORKLOADS if WORKLOADS[w][0].startswith("text_")],
    "all": list(WORKLOADS),
}


def frozen(workload):
    """The workload trains only the classifier (backbone frozen)."""
    return workload.endswith("_frozen_train")
DTYPES = ["float32", "bfloat16"]
SYSTEMS = ["lockstep", "keras", "pytorch"]
PEERS = ["keras", "pytorch"]


def log(*a):
    print("[peer_bench]", *a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- model FLOPs

def conv_macs(h, w, cin, cout, k, stride, same):
    oh = -(-h // stride) if same else (h - k) // stride + 1
    ow = -(-w // stride) if same else (w - k) // stride + 1
    return oh * ow * cout * k * k * cin, oh, ow


def same(h, stride):
    return -(-h // stride)


def mobilenet_v2_macs(size, classes=10):
    """keras.applications.MobileNetV2 (alpha 1): convolutions, depthwise convolutions, Dense."""
    h = same(size, 2)
    total = h * h * 32 * 9 * 3  # stem 3x3 stride 2
    cin = 32
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            stride = s if i == 0 else 1
            e = cin * t
            if t != 1:
                total += h * h * cin * e  # expand 1x1
            oh = same(h, stride)
            total += oh * oh * e * 9 + oh * oh * e * c  # depthwise 3x3, project 1x1
            h, cin = oh, c
    return total + h * h * cin * 1280 + 1280 * classes


def efficientnet_b0_macs(size, classes=10):
    """keras.applications.EfficientNetB0: convolutions, depthwise, squeeze-excite, Dense."""
    h = same(size, 2)
    total = h * h * 32 * 9 * 3
    for k, n, cin, cout, t, s in [(3, 1, 32, 16, 1, 1), (3, 2, 16, 24, 6, 2),
                                  (5, 2, 24, 40, 6, 2), (3, 3, 40, 80, 6, 2),
                                  (5, 3, 80, 112, 6, 1), (5, 4, 112, 192, 6, 2),
                                  (3, 1, 192, 320, 6, 1)]:
        for i in range(n):
            stride, c_in = (s, cin) if i == 0 else (1, cout)
            e = c_in * t
            if t != 1:
                total += h * h * c_in * e
            oh = same(h, stride)
            se = max(1, int(c_in * 0.25))
            total += oh * oh * e * k * k + 2 * e * se + oh * oh * e * cout
            h = oh
    return total + h * h * 320 * 1280 + 1280 * classes


def forward_macs(model, image_size=96):
    """Multiply-adds per image of the convolutions and Dense layers (BN, ReLU, pooling, adds
    and the optimizer are left out: < 1% of the arithmetic here)."""
    if model == "mobilenet_v2":
        return mobilenet_v2_macs(image_size)
    if model == "efficientnet_b0":
        return efficientnet_b0_macs(image_size)
    if model == "text_conv1d":  # Conv1D(128, 5) over 60 steps of 64 channels; the Dense head
        return 60 * 5 * 64 * 128 + 128 * 64 + 64 * 10
    if model == "text_bilstm":  # two directions x 64 steps x the four gates' two matmuls
        return 2 * 64 * 4 * 64 * (64 + 64) + 128 * 10
    if model == "cnn":
        m1, h, w = conv_macs(28, 28, 1, 32, 3, 1, False)
        m2, h, w = conv_macs(h, w, 32, 64, 3, 1, False)
        flat = (h // 2) * (w // 2) * 64
        return m1 + m2 + flat * 128 + 128 * 10
    total, h, w = conv_macs(64, 64, 3, 32, 3, 2, True)
    cin = 32
    for filters, stride in [(32, 1), (64, 2), (128, 2)]:
        a, oh, ow = conv_macs(h, w, cin, filters, 3, stride, True)
        b, _, _ = conv_macs(oh, ow, filters, filters, 3, 1, True)
        total += a + b
        if stride != 1 or cin != filters:
            total += conv_macs(h, w, cin, filters, 1, stride, True)[0]
        h, w, cin = oh, ow, filters
    return total + cin * 10


def flops_per_image(workload, image_size=96):
    """A frozen-backbone step counts as forward only (the classifier's backward is tiny)."""
    model, mode = WORKLOADS[workload][:2]
    fwd = 2 * forward_macs(model, image_size)
    return fwd * (3 if mode == "train" and not frozen(workload) else 1)


# ------------------------------------------------------------------------------- running

class Bench:
    def __init__(self, a):
        self.a = a
        self.raw = open(os.path.join(a.out_dir, "measurements.jsonl"), "a")
        self.health = []
        self.dropped = 0
        self.disturbed_kept = 0
        self.failed = []
        self.last_probe = None

    def env(self, system):
        e = dict(os.environ, OMP_NUM_THREADS=str(self.a.threads))
        if system == "keras":
            e.update(KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2")
        if system == "pytorch" and self.a.jemalloc:
            e.update(LD_PRELOAD=self.a.jemalloc,
                     MALLOC_CONF="dirty_decay_ms:-1,muzzy_decay_ms:-1")
        return e

    def probe(self):
        out = subprocess.run([os.path.join(self.a.build, "bin", "fma_health"),
                              str(self.a.threads)], capture_output=True, text=True, check=True)
        p = json.loads(out.stdout.strip().splitlines()[-1])
        p["time"] = time.time()
        self.health.append(p)
        self.last_probe = p
        if hasattr(self, "healthy") and p["fma_gflops"] > self.healthy:
            self.healthy = p["fma_gflops"]  # the machine was busy at start: a better baseline
        if hasattr(self, "healthy_bw") and p["triad_gbps"] > self.healthy_bw:
            self.healthy_bw = p["triad_gbps"]
        if hasattr(self, "healthy_x") and p.get("exchange_gbps", 0) > self.healthy_x:
            self.healthy_x = p["exchange_gbps"]
        return p

    def disturbed(self, p):
        """Whether probe p reads below the threshold: compute squeezed (the host put both
        threads on one core) or the memory bus saturated by a neighbour."""
        return (p["fma_gflops"] < self.a.threshold * self.healthy or
                p["triad_gbps"] < self.a.bandwidth_threshold * self.healthy_bw or
                p.get("exchange_gbps", 0) < self.a.exchange_threshold * self.healthy_x)

    def command(self, system, workload, dtype, variants=None, scale=1.0):
        model, mode, steps, warmup = WORKLOADS[workload]
        steps = max(2, round(steps * self.a.steps_scale * scale))
        warmup = max(1, round(warmup * min(1.0, self.a.steps_scale * scale * 2)))
        t = str(self.a.threads)
        if system == "lockstep":
            cmd = [os.path.join(self.a.build, "bin", "train_bench"), "--model", model,
                   "--mode", mode, "--threads", t, "--warmup", str(warmup),
                   "--dtype-policy", "mixed_bfloat16" if dtype == "bfloat16" else "float32"]
            cmd += (["--train-steps", str(steps)] if mode == "train"
                    else ["--infer-batches", str(steps)])
            if model in APPLICATIONS:
                cmd += ["--image-size", str(self.a.image_size)]
                if frozen(workload):
                    cmd += ["--trainable", "head"]
            return cmd
        py = self.a.tf_py if system == "keras" else self.a.torch_py
        cmd = [py, os.path.join(self.a.repo, "bench", "peers.py"), "--system", system,
               "--model", model, "--mode", mode, "--dtype", dtype, "--threads", t,
               "--steps", str(steps), "--warmup", str(warmup)]
        if variants:
            cmd += ["--variants", variants]
        if model in APPLICATIONS:
            cmd += ["--image-size", str(self.a.image_size)]
            if frozen(workload):
                cmd += ["--trainable", "head"]
        return cmd

    def run_once(self, system, workload, dtype, variants=None, scale=1.0):
        cmd = self.command(system, workload, dtype, variants, scale)
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env=self.env(system),
                           timeout=self.a.timeout)
        wall = time.perf_counter() - t0
        lines = [l for l in p.stdout.strip().splitlines() if l.startswith("{")]
        if p.returncode != 0 or not lines:
            tail = "\n".join((p.stderr or "").strip().splitlines()[-5:])
            raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{tail}")
        r = json.loads(lines[-1])
        r["wall_seconds"] = round(wall, 2)
        return r

    def measure(self, rnd, system, workload, dtype, variants=None):
        """One kept measurement (retried while the health probe flags it), or None."""
        before = self.last_probe or self.probe()
        for attempt in range(self.a.max_retries + 1):
            try:
                r = self.run_once(system, workload, dtype, variants)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                log(f"FAILED {system} {workload} {dtype}: {e}")
                self.failed.append({"round": rnd, "system": system, "workload": workload,
                                    "dtype": dtype, "error": str(e)[-500:]})
                return None
            after = self.probe()
            bad = self.disturbed(before) or self.disturbed(after)
            r.update(round=rnd, workload=workload, dtype=dtype, attempt=attempt,
                     health_before=before["fma_gflops"], health_after=after["fma_gflops"],
                     bandwidth_before=before["triad_gbps"], bandwidth_after=after["triad_gbps"],
                     l3_bandwidth_before=before["l3_triad_gbps"],
                     l3_bandwidth_after=after["l3_triad_gbps"],
                     exchange_before=before.get("exchange_gbps"),
                     exchange_after=after.get("exchange_gbps"),
                     disturbed=bad)
            self.raw.write(json.dumps(r) + "\n")
            self.raw.flush()
            log(f"round {rnd} {workload:12} {dtype:8} {system:8} {r['images_per_sec']:9.1f} img/s"
                f"  ({r.get('config', '')}; probe {before['fma_gflops']:.0f}/"
                f"{after['fma_gflops']:.0f} GFLOP/s, {before['triad_gbps']:.0f}/"
                f"{after['triad_gbps']:.0f} GB/s, exchange {before.get('exchange_gbps', 0):.0f}/"
                f"{after.get('exchange_gbps', 0):.0f} GB/s{', DISTURBED' if bad else ''})")
            if not bad:
                return r
            if attempt < self.a.max_retries:
                self.dropped += 1
                log(f"  dropped (probe below {self.a.threshold:.2f} x the healthy "
                    f"{self.healthy:.0f} GFLOP/s, or {self.a.bandwidth_threshold:.2f} x "
                    f"{self.healthy_bw:.0f} GB/s, or exchange below "
                    f"{self.a.exchange_threshold:.2f} x {self.healthy_x:.0f} GB/s); repeating")
            before = after
        self.disturbed_kept += 1
        return r

    def keras_xla_probe(self, combos):
        """Short runs of Keras with jit_compile off and on; returns ({(wl, dtype): variant},
        details). XLA is chosen only when it is more than 10% faster."""
        choice, detail = {}, {}
        for wl, dt in combos:
            try:
                r = self.run_once("keras", wl, dt, "jit_off,jit_on", scale=0.25)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                log(f"keras XLA probe {wl} {dt} failed: {e}")
                continue
            v = r["variants"]
            # XLA only when clearly faster: the probe is short, and jit_compile=False is what
            # Keras's "auto" picks on CPU.
            pick = "jit_on" if v.get("jit_on", 0) > 1.1 * v.get("jit_off", 0) else "jit_off"
            detail[f"{wl}/{dt}"] = dict(v, chosen=pick)
            choice[(wl, dt)] = pick
            log(f"keras XLA probe {wl} {dt}: {v} -> {pick}")
        return choice, detail


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def median(xs):
    return statistics.median(xs) if xs else None


def fmt_ratio(x):
    return f"{x:5.2f}x" if x else "    -"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("rounds", nargs="?", type=int, default=3)
    p.add_argument("threads", nargs="?", type=int, default=2)
    p.add_argument("--build", default="build")
    p.add_argument("--repo", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p.add_argument("--tf-py")
    p.add_argument("--torch-py")
    p.add_argument("--jemalloc", default="")
    p.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS),
                   help="comma list of " + ",".join(WORKLOADS) + "; or applications, all")
    p.add_argument("--image-size", type=int, default=96,
                   help="input size of the mobilenet_v2 / efficientnet_b0 workloads")
    p.add_argument("--dtypes", default=",".join(DTYPES))
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--steps-scale", type=float, default=1.0,
                   help="multiplies every workload's timed steps (0.1 for a quick check)")
    p.add_argument("--threshold", type=float, default=0.7,
                   help="drop a measurement whose probe reads below this x the healthy rate")
    p.add_argument("--bandwidth-threshold", type=float, default=0.0,
                   help="also drop one whose DRAM bandwidth reads below this x the healthy "
                        "bandwidth (0: record only)")
    p.add_argument("--exchange-threshold", type=float, default=0.0,
                   help="also drop one whose thread-exchange probe (fma_health's exchange_gbps: "
                        "low where the host put the vCPUs on different CCDs) reads below this x "
                        "the healthy rate (0: record only)")
    p.add_argument("--max-retries", type=int, default=2)
    p.add_argument("--keras-xla", choices=["probe", "off", "both"], default="probe")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per measurement")
    p.add_argument("--out-dir", help="where measurements.jsonl and state.json go")
    p.add_argument("--report", metavar="DIR",
                   help="print the table and JSON again from DIR/state.json of an earlier run")
    a = p.parse_args()
    if a.report:
        with open(os.path.join(a.report, "state.json")) as f:
            return report(json.load(f))
    if not (a.out_dir and a.tf_py and a.torch_py):
        raise SystemExit("peer_bench: --out-dir, --tf-py and --torch-py are required")
    workloads = [x for w in a.workloads.split(",") if w for x in WORKLOAD_SETS.get(w, [w])]
    dtypes = [d for d in a.dtypes.split(",") if d]
    systems = [s for s in a.systems.split(",") if s]
    for name, got, allowed in [("--workloads", workloads, WORKLOADS), ("--dtypes", dtypes, DTYPES),
                               ("--systems", systems, SYSTEMS)]:
        bad = [g for g in got if g not in allowed]
        if bad or not got:
            raise SystemExit(f"peer_bench: {name} {','.join(bad) or '(empty)'}: choose from "
                             f"{','.join(allowed)}")
    if a.rounds < 1 or a.threads < 1:
        raise SystemExit("peer_bench: ROUNDS and THREADS must be >= 1")
    a.build = os.path.abspath(a.build)
    os.makedirs(a.out_dir, exist_ok=True)
    b = Bench(a)

    # Healthy rate: the best of three probes at start.
    start = [b.probe() for _ in range(3)]
    b.healthy = max(s["fma_gflops"] for s in start)
    b.healthy_bw = max(s["triad_gbps"] for s in start)
    b.healthy_x = max(s.get("exchange_gbps", 0) for s in start)
    peak = start[0]["peak_gflops"]
    log(f"memory bandwidth probe at start: {[round(s['triad_gbps']) for s in start]} GB/s")
    log(f"FMA probe at start: {[round(s['fma_gflops']) for s in start]} GFLOP/s; physical fp32 "
        f"peak {peak:.0f} GFLOP/s ({start[0]['clock_ghz']:.2f} GHz x "
        f"{start[0]['flops_per_cycle_per_core']} FLOPs/cycle x {a.threads} cores)")
    if b.healthy < 0.8 * peak:
        log(f"WARNING: the machine is busy: the probe reaches {b.healthy / peak:.0%} of the "
            "physical peak; figures will be noisy")

    combos = [(w, d) for w in workloads for d in dtypes]
    keras_variant, xla_detail = {}, {}
    if "keras" in systems:
        if a.keras_xla == "probe":
            keras_variant, xla_detail = b.keras_xla_probe(combos)
        elif a.keras_xla == "both":
            keras_variant = {c: "jit_off,jit_on" for c in combos}

    kept = []
    group = 0
    for rnd in range(1, a.rounds + 1):
        for wl, dt in combos:
            k = group % len(systems)
            order = systems[k:] + systems[:k]
            group += 1
            for s in order:
                variants = keras_variant.get((wl, dt)) if s == "keras" else None
                r = b.measure(rnd, s, wl, dt, variants)
                if r:
                    kept.append(r)

    state = {"threads": a.threads, "rounds": a.rounds, "steps_scale": a.steps_scale,
             "image_size": a.image_size,
             "threshold": a.threshold, "workloads": workloads, "dtypes": dtypes,
             "systems": systems, "repo": a.repo, "start": start, "healthy": b.healthy,
             "healthy_bw": b.healthy_bw, "healthy_x": b.healthy_x,
             "kept": kept, "health": b.health, "dropped": b.dropped,
             "disturbed_kept": b.disturbed_kept, "failed": b.failed, "xla_detail": xla_detail,
             "raw": b.raw.name}
    path = os.path.join(a.out_dir, "state.json")
    with open(path + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(path + ".tmp", path)
    report(state)


def report(st):
    """Prints the table and the JSON line from a run's state (state.json)."""
    workloads, dtypes, systems = st["workloads"], st["dtypes"], st["systems"]
    start, healthy = st["start"], st["healthy"]
    peak = start[0]["peak_gflops"]
    rows = {}  # (workload, system, dtype) -> kept measurements
    for r in st["kept"]:
        rows.setdefault((r["workload"], r["system"], r["dtype"]), []).append(r)
    # ---- aggregate
    results, versions = {}, {}
    image_size = st.get("image_size", 96)
    for (wl, s, dt), rs in rows.items():
        ips = median([r["images_per_sec"] for r in rs])
        configs = [r.get("config", "") for r in rs]
        gflops = ips * flops_per_image(wl, image_size) / 1e9
        if "version" in rs[0]:
            versions[s] = rs[0]["version"]
        results.setdefault(wl, {}).setdefault(s, {})[dt] = {
            "images_per_sec": round(ips, 1),
            "rounds_images_per_sec": [r["images_per_sec"] for r in rs],
            "config": max(set(configs), key=configs.count) if any(configs) else "",
            "gflops": round(gflops, 1),
            "fraction_of_measured_fma": round(gflops / healthy, 3),
            "fraction_of_physical_fp32_peak": round(gflops / peak, 3),
            "disturbed_rounds": sum(r["disturbed"] for r in rs),
            "peak_rss_mb": median([r.get("peak_rss_mb", 0) for r in rs]),
        }
    try:
        rev = subprocess.run(["git", "-C", st["repo"], "describe", "--always", "--dirty"],
                             capture_output=True, text=True, check=True).stdout.strip()
        versions["lockstep"] = f"lockstep {rev}"
    except (OSError, subprocess.CalledProcessError):
        pass
    params = {}  # model -> system -> parameter count: the same architecture everywhere?
    for r in st["kept"]:
        if "params" in r:
            params.setdefault(WORKLOADS[r["workload"]][0], {})[r["system"]] = r["params"]
    # Within 0.01%: Keras's EfficientNetB0 counts its Normalization layer's 7 statistics,
    # torchvision's model has no preprocessing layers.
    params_match = all(max(v.values()) <= min(v.values()) * 1.0001 for v in params.values())
    best_peer = {}
    for wl in workloads:
        for dt in dtypes:
            cands = [(results.get(wl, {}).get(s, {}).get(dt, {}).get("images_per_sec"), s)
                     for s in PEERS]
            cands = [c for c in cands if c[0]]
            if cands:
                ips, s = max(cands)
                best_peer.setdefault(wl, {})[dt] = {"system": s, "images_per_sec": ips}
    for wl, per in results.items():
        bp = best_peer.get(wl, {})
        for s, per_dt in per.items():
            for dt, r in per_dt.items():
                f32 = bp.get("float32", {}).get("images_per_sec")
                b16 = bp.get("bfloat16", {}).get("images_per_sec")
                r["ratio_vs_best_peer_fp32"] = round(r["images_per_sec"] / f32, 3) if f32 else None
                r["ratio_vs_best_peer_bf16"] = round(r["images_per_sec"] / b16, 3) if b16 else None

    # ---- table
    print(f"\nLockstep vs peers, {st['threads']} threads, medians of {st['rounds']} round(s) "
          f"(steps scale {st['steps_scale']}); %FMA: of the FMA probe's healthy "
          f"{healthy:.0f} GFLOP/s, "
          f"%peak: of the physical fp32 peak {peak:.0f} GFLOP/s")
    ww = max([13] + [len(w) for w in workloads])  # the workload column
    hdr = (f"{'workload':{ww}} {'system':9} {'dtype':9} {'img/s':>9} {'vs peer fp32':>12} "
           f"{'vs peer bf16':>12} {'GFLOP/s':>8} {'%FMA':>5} {'%peak':>5}  config")
    print(hdr)
    print("-" * len(hdr))
    for wl in workloads:
        for s in systems:
            for dt in dtypes:
                r = results.get(wl, {}).get(s, {}).get(dt)
                if not r:
                    print(f"{wl:{ww}} {s:9} {dt:9} {'failed':>9}")
                    continue
                print(f"{wl:{ww}} {s:9} {dt:9} {r['images_per_sec']:9.1f} "
                      f"{fmt_ratio(r['ratio_vs_best_peer_fp32']):>12} "
                      f"{fmt_ratio(r['ratio_vs_best_peer_bf16']):>12} {r['gflops']:8.1f} "
                      f"{100 * r['fraction_of_measured_fma']:4.0f}% "
                      f"{100 * r['fraction_of_physical_fp32_peak']:4.0f}%  {r['config'] or '-'}"
                      + (f"  (disturbed x{r['disturbed_rounds']})" if r["disturbed_rounds"]
                         else ""))
        bp = best_peer.get(wl, {})
        print(f"{'':{ww}} strongest peer: " + ", ".join(
            f"{dt} {v['system']} {v['images_per_sec']:.1f}" for dt, v in bp.items()))
    # Frozen backbone vs full training, per system: the speed-up of a frozen epoch, against
    # the ideal by FLOPs (a frozen step is the forward only: 3x).
    frozen_vs_full = {}
    for wl in workloads:
        if not frozen(wl):
            continue
        full = wl.replace("_frozen_train", "_train")
        for s in systems:
            for dt in dtypes:
                f = results.get(wl, {}).get(s, {}).get(dt, {}).get("images_per_sec")
                g = results.get(full, {}).get(s, {}).get(dt, {}).get("images_per_sec")
                if f and g:
                    frozen_vs_full.setdefault(WORKLOADS[wl][0], {}).setdefault(s, {})[dt] = (
                        round(f / g, 2))
    for m, per in frozen_vs_full.items():
        print(f"frozen vs full training, {m} (speed-up of a frozen-backbone epoch; by FLOPs "
              f"3.0x): " + "; ".join(f"{s} " + ", ".join(f"{dt} {v:.2f}x" for dt, v in d.items())
                                    for s, d in per.items()))
    hs = [h["fma_gflops"] for h in st["health"]]
    bw = [h.get("triad_gbps", 0) for h in st["health"]]
    ex = [h.get("exchange_gbps", 0) for h in st["health"]]
    print(f"health: {len(hs)} probes, {min(hs):.0f}-{max(hs):.0f} GFLOP/s, {min(bw):.0f}-"
          f"{max(bw):.0f} GB/s DRAM and {min(ex):.0f}-{max(ex):.0f} GB/s thread exchange, "
          f"threshold {st['threshold']:.2f} x {healthy:.0f} GFLOP/s; "
          f"{st['dropped']} measurement(s) dropped and "
          f"repeated, {st['disturbed_kept']} kept although disturbed, {len(st['failed'])} failed")
    print("parameters (count_params): " + "; ".join(
        f"{m} " + ", ".join(f"{k} {v:,}" for k, v in per.items()) for m, per in params.items()) +
        ("" if params_match else "  WARNING: the architectures differ"))
    xla_detail = st["xla_detail"]
    if xla_detail:
        print("keras XLA probe (short runs, img/s): " + "; ".join(
            f"{k} off {v.get('jit_off')} on {v.get('jit_on')}" + (" (XLA chosen)" if
                                                                    v.get("chosen") == "jit_on"
                                                                    else "")
            for k, v in xla_detail.items()))
    print(f"raw measurements: {st['raw']}")

    out = {
        "date": datetime.date.today().isoformat(), "threads": st["threads"],
        "rounds": st["rounds"], "steps_scale": st["steps_scale"], "machine": {
            "cpu": cpu_model(), "cores": os.cpu_count(),
            "fma_healthy_gflops": round(healthy, 1), "fma_physical_peak_gflops": round(peak, 1),
            "triad_healthy_gbps": round(st.get("healthy_bw", 0), 1),
            "exchange_healthy_gbps": round(st.get("healthy_x", 0), 1),
            "clock_ghz": start[0]["clock_ghz"],
            "flops_per_cycle_per_core": start[0]["flops_per_cycle_per_core"]},
        "versions": versions,
        "image_size": image_size,
        "flops_per_image": {wl: flops_per_image(wl, image_size) for wl in workloads},
        "frozen_vs_full": frozen_vs_full,
        "flops_convention":
            "forward = 2 x MACs of convolutions and Dense layers; train = 3 x forward",
        "params": params, "params_match": params_match,
        "results": results, "best_peer": best_peer,
        "keras_xla_probe": xla_detail,
        "health": {"threshold": st["threshold"], "healthy_gflops": round(healthy, 1),
                   "probes": len(hs), "min_gflops": min(hs), "max_gflops": max(hs),
                   "dropped": st["dropped"], "disturbed_kept": st["disturbed_kept"]},
        "failed": st["failed"],
    }
    print(json.dumps(out, separators=(",", ":")))


if __name__ == "__main__":
    main()
