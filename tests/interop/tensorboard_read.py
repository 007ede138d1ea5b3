"""Reads TensorBoard runs back through tensorboard's own EventAccumulator and prints JSON.

    python tensorboard_read.py LOGDIR > out.json

For every run folder under LOGDIR (train, validation): {"scalars": {tag: [[step, value], ...]},
"histograms": {tag: [{step, min, max, num, sum, sum_squares, bucket_total}, ...]},
"tensors": {tag: the string value of its last event}}. Used by tests/train/tensorboard_test.cpp
(TensorBoardInterop) to compare the event files Lockstep wrote with fit()'s History.
"""
import json
import os
import sys

from tensorboard.backend.event_processing import event_accumulator


def read_run(path):
    acc = event_accumulator.EventAccumulator(
        path, size_guidance={event_accumulator.SCALARS: 0, event_accumulator.HISTOGRAMS: 0,
                             event_accumulator.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()
    run = {"scalars": {}, "histograms": {}, "tensors": {}}
    for tag in tags["scalars"]:
        run["scalars"][tag] = [[e.step, e.value] for e in acc.Scalars(tag)]
    for tag in tags["histograms"]:
        run["histograms"][tag] = [
            {"step": e.step, "min": e.histogram_value.min, "max": e.histogram_value.max,
             "num": e.histogram_value.num, "sum": e.histogram_value.sum,
             "sum_squares": e.histogram_value.sum_squares,
             "bucket_total": sum(e.histogram_value.bucket)}
            for e in acc.Histograms(tag)]
    for tag in tags["tensors"]:
        last = acc.Tensors(tag)[-1].tensor_proto
        run["tensors"][tag] = b"".join(last.string_val).decode("utf-8")
    return run


def main():
    logdir = sys.argv[1]
    runs = {name: read_run(os.path.join(logdir, name)) for name in sorted(os.listdir(logdir))
            if os.path.isdir(os.path.join(logdir, name))}
    json.dump(runs, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
