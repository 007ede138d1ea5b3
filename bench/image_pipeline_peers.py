#!/usr/bin/env python3
"""Input-pipeline benchmark peers (issue #3), and the photo-like JPEG folder they share.

Same work as bench/image_pipeline_bench.cpp: JPEG folder -> decode -> resize to 180x180
(bilinear, no antialias) -> random horizontal flip -> random rotation (0.1 turn = 36 degrees)
-> batches of 32 (float32, 0..255), on --threads workers. Prints one JSON line.

  image_pipeline_peers.py torch --data-dir DIR [--threads 2] [--reader tvio|pil]
  image_pipeline_peers.py tf --data-dir DIR [--threads 2]
  image_pipeline_peers.py make-folder --out DIR [--count 3000] [--classes 5] [--seed 0]

torch: DataLoader(num_workers=threads, persistent workers, one intra-op thread each) over a
  map-style dataset; torchvision.io.decode_jpeg (libjpeg-turbo) or PIL, then transforms.v2
  on the uint8 tensor (its fast path), converted to float32 at the end.
tf: tf.data with AUTOTUNE maps (decode_jpeg + tf.image.resize per file; Keras RandomFlip +
  RandomRotation per batch, as Keras's guide does for augmentation in the input pipeline),
  private thread pool of `threads`, intra/inter-op threads = threads.
"""
import argparse
import json
import os
import sys
import time


def list_folder(root):
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    files, labels = [], []
    for ci, c in enumerate(classes):
        for dirpath, _, names in sorted(os.walk(os.path.join(root, c))):
            for n in sorted(names):
                if n.lower().endswith((".jpg", ".jpeg")):
                    files.append(os.path.join(dirpath, n))
                    labels.append(ci)
    if not files:
        sys.exit(f"no JPEG files under {root}")
    return files, labels


def timed(batches_iter, warmup, batches):
    it = iter(batches_iter)
    for _ in range(warmup):
        next(it)
    t0 = time.perf_counter()
    images = 0
    for _ in range(batches):
        x, _ = next(it)
        images += int(x.shape[0])
    return images, time.perf_counter() - t0


def run_torch(a):
    import torch
    import torchvision
    from torchvision.io import ImageReadMode, decode_jpeg, read_file
    from torchvision.transforms import InterpolationMode, v2

    torch.set_num_threads(1)
    files, labels = list_folder(a.data_dir)
    tf = v2.Compose([
        v2.Resize((a.size, a.size), interpolation=InterpolationMode.BILINEAR, antialias=False),
        v2.RandomHorizontalFlip(),
        v2.RandomRotation(36.0, interpolation=InterpolationMode.BILINEAR),
        v2.ToDtype(torch.float32),
    ])

    class Files(torch.utils.data.Dataset):
        def __len__(self):
            return len(files)

        def __getitem__(self, i):
            if a.reader == "tvio":
                img = decode_jpeg(read_file(files[i]), mode=ImageReadMode.RGB)
            else:
                from PIL import Image
                img = v2.functional.pil_to_tensor(Image.open(files[i]).convert("RGB"))
            return tf(img), labels[i]

    def forever():
        loader = torch.utils.data.DataLoader(
            Files(), batch_size=a.batch_size, shuffle=True, num_workers=a.threads,
            drop_last=True, persistent_workers=True, prefetch_factor=4,
            worker_init_fn=lambda _: torch.set_num_threads(1))
        while True:
            yield from loader

    images, secs = timed(forever(), a.warmup, a.batches)
    return {"system": "pytorch", "reader": a.reader, "torch_version": torch.__version__,
            "torchvision_version": torchvision.__version__, "images_per_sec": images / secs,
            "images": images, "seconds": secs, "threads": a.threads, "files": len(files)}


def run_tf(a):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    import keras

    tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    files, labels = list_folder(a.data_dir)
    AUTOTUNE = tf.data.AUTOTUNE
    aug = keras.Sequential([keras.layers.RandomFlip("horizontal"),
                            keras.layers.RandomRotation(0.1)])

    def load(path, label):
        img = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        img = tf.image.resize(img, [a.size, a.size], method="bilinear", antialias=False)
        return img, label

    ds = (tf.data.Dataset.from_tensor_slices((files, labels)).repeat()
          .shuffle(a.batch_size * 8, seed=1)
          .map(load, num_parallel_calls=AUTOTUNE)
          .batch(a.batch_size, drop_remainder=True)
          .map(lambda x, y: (aug(x, training=True), y), num_parallel_calls=AUTOTUNE)
          .prefetch(AUTOTUNE))
    opts = tf.data.Options()
    opts.threading.private_threadpool_size = a.threads
    ds = ds.with_options(opts)
    images, secs = timed(ds, a.warmup, a.batches)
    return {"system": "tensorflow", "tf_version": tf.__version__, "keras_version": keras.__version__,
            "images_per_sec": images / secs, "images": images, "seconds": secs,
            "threads": a.threads, "files": len(files)}


def make_folder(a):
    """Photo-like RGB JPEGs of varied sizes (like tf_flowers: ~240-500 px): a smooth
    two-colour gradient, blurred blobs ("petals") in a class palette, and sensor-like noise."""
    import numpy as np
    from PIL import Image, ImageDraw, ImageFilter

    rng = np.random.default_rng(a.seed)
    palettes = [((230, 200, 40), (60, 120, 40)), ((200, 40, 60), (40, 90, 30)),
                ((240, 240, 235), (70, 110, 160)), ((150, 60, 170), (50, 100, 50)),
                ((250, 140, 30), (90, 70, 40)), ((60, 90, 200), (120, 140, 60))]
    per_class = a.count // a.classes
    for c in range(a.classes):
        d = os.path.join(a.out, f"class_{c}")
        os.makedirs(d, exist_ok=True)
        petal, ground = palettes[c % len(palettes)]
        for i in range(per_class):
            w, h = int(rng.integers(280, 420)), int(rng.integers(220, 330))
            yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
            t = (xx / w * rng.uniform(0.2, 1) + yy / h * rng.uniform(0.2, 1))[..., None] / 2
            top = np.array(ground) * rng.uniform(0.6, 1.2)
            bottom = np.array(ground)[::-1] * rng.uniform(0.5, 1.0)
            img = Image.fromarray(np.clip(top * (1 - t) + bottom * t, 0, 255).astype(np.uint8))
            draw = ImageDraw.Draw(img)
            cx, cy = rng.uniform(0.3, 0.7) * w, rng.uniform(0.3, 0.7) * h
            for _ in range(int(rng.integers(5, 12))):
                r = rng.uniform(0.05, 0.18) * min(w, h)
                ox, oy = rng.normal(0, 0.12 * w), rng.normal(0, 0.12 * h)
                col = tuple(int(v) for v in np.clip(np.array(petal) * rng.uniform(0.7, 1.1), 0, 255))
                draw.ellipse([cx + ox - r, cy + oy - r * 0.6, cx + ox + r, cy + oy + r * 0.6], fill=col)
            img = img.filter(ImageFilter.GaussianBlur(1.2))
            arr = np.asarray(img).astype(np.float32) + rng.normal(0, 6, (h, w, 3))
            Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(
                os.path.join(d, f"{i:05d}.jpg"), quality=90)
    print(f"wrote {per_class * a.classes} JPEGs to {a.out}", file=sys.stderr)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("torch", "tf"):
        s = sub.add_parser(name)
        s.add_argument("--data-dir", required=True)
        s.add_argument("--threads", type=int, default=2)
        s.add_argument("--batches", type=int, default=150)
        s.add_argument("--warmup", type=int, default=5)
        s.add_argument("--size", type=int, default=180)
        s.add_argument("--batch-size", type=int, default=32)
        if name == "torch":
            s.add_argument("--reader", choices=["tvio", "pil"], default="tvio")
    m = sub.add_parser("make-folder")
    m.add_argument("--out", required=True)
    m.add_argument("--count", type=int, default=3000)
    m.add_argument("--classes", type=int, default=5)
    m.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if a.cmd == "make-folder":
        return make_folder(a)
    res = run_torch(a) if a.cmd == "torch" else run_tf(a)
    print(json.dumps(res), flush=True)
    os._exit(0)  # skip slow interpreter/worker teardown


if __name__ == "__main__":
    main()
