"""Runs Lockstep's exported ONNX files in onnxruntime and compares with Lockstep's predictions.

    python onnx_interop.py DIR

DIR/manifest.json lists cases: {name, onnx, input_name, input_shape, output_shape}; each has
DIR/<name>.input.f32 and DIR/<name>.expected.f32 (raw little-endian float32, C order). For each
case: onnx.checker.check_model(full_check=True) (which also runs ONNX shape inference),
an onnxruntime CPU session, and the max abs difference against Lockstep's predict. Writes
DIR/results.json ({name: {checker_ok, max_abs_diff, max_abs_output, output_shape}}) and prints
one line per case. Exits 1 if a case could not be run at all (the C++ test judges the numbers).
"""
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort


def run_case(folder, case):
    path = os.path.join(folder, case["onnx"])
    model = onnx.load(path)
    checker_ok, checker_error = True, ""
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:  # report, and still run it
        checker_ok, checker_error = False, str(e)
    x = np.fromfile(os.path.join(folder, case["name"] + ".input.f32"), dtype="<f4")
    x = x.reshape(case["input_shape"]).astype(case.get("input_dtype", "float32"))
    want = np.fromfile(os.path.join(folder, case["name"] + ".expected.f32"), dtype="<f4")
    want = want.reshape(case["output_shape"])
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = session.run(None, {case["input_name"]: x})[0]
    diff = float(np.max(np.abs(got - want))) if got.shape == want.shape else float("inf")
    ops = sorted({n.op_type for n in model.graph.node})
    return {
        "checker_ok": checker_ok,
        "checker_error": checker_error,
        "max_abs_diff": diff,
        "max_abs_output": float(np.max(np.abs(got))),
        "output_shape": list(got.shape),
        "opset": model.opset_import[0].version,
        "ops": ops,
    }


def main():
    folder = sys.argv[1]
    with open(os.path.join(folder, "manifest.json")) as f:
        cases = json.load(f)
    results = {}
    for case in cases:
        r = run_case(folder, case)
        results[case["name"]] = r
        print(f"onnxruntime {ort.__version__} {case['name']} (opset {r['opset']}, "
              f"{'checker ok' if r['checker_ok'] else 'CHECKER FAILED: ' + r['checker_error']}): "
              f"max abs diff {r['max_abs_diff']:.3g} vs Lockstep predict; ops {' '.join(r['ops'])}")
    with open(os.path.join(folder, "results.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
