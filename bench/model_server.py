#!/usr/bin/env python3
"""Python onnxruntime in-process, the reference of bench/model_server.sh (issue #6).

  model_server.py body MODEL BODY            # KServe v2 binary request for MODEL's first input
                                             # (batch 1, seeded); prints the JSON header's length
  model_server.py check MODEL RESPONSE HEADERS  # kep's binary answer against onnxruntime's
  model_server.py ort MODEL DURATION         # one line per variant: name ips p50_us p99_us n

The input is the same in all three (numpy, seed 6, symbolic dimensions set to 1). Variants:
1 or 2 caller threads on one InferenceSession (onnxruntime releases the GIL in run), each with
intra_op_num_threads left at its default (0: one per physical core) and at 1.
"""
import json
import re
import sys

import numpy as np
import onnxruntime as ort

from timing import seconds, timed


def session(path, intra=0):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = intra
    opts.log_severity_level = 3
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def feed(sess):
    i = sess.get_inputs()[0]
    shape = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
    x = np.random.default_rng(6).standard_normal(shape, dtype=np.float32)
    return i.name, x, sess.get_outputs()[0].name


def body(model, out):
    name, x, output = feed(session(model))
    head = json.dumps({
        "inputs": [{"name": name, "shape": list(x.shape), "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes}}],
        "outputs": [{"name": output, "parameters": {"binary_data": True}}],
    }).encode()
    with open(out, "wb") as f:
        f.write(head + x.astype("<f4").tobytes())
    print(len(head))


def check(model, response, headers):
    sess = session(model)
    name, x, output = feed(sess)
    want = sess.run([output], {name: x})[0]
    n = int(re.search(r"(?im)^inference-header-content-length:\s*(\d+)", open(headers).read())[1])
    raw = open(response, "rb").read()
    head = json.loads(raw[:n])
    got = np.frombuffer(raw[n:], "<f4").reshape(head["outputs"][0]["shape"])
    # light_resnet50's weights are constants: every output is 0.001, so its check is weak.
    print(f"max |kep - ort| = {np.abs(got - want).max():.2e} over {got.size} values"
          f" ({np.unique(want).size} distinct)")


def bench(model, duration, callers, intra):
    sess = session(model, intra)
    name, x, output = feed(sess)
    return timed(lambda: sess.run([output], {name: x}), duration, callers)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "body":
        body(*args)
    elif cmd == "check":
        check(*args)
    elif cmd == "ort":
        for callers in (2, 1):
            for intra in (0, 1):
                ips, p50, p99, n = bench(args[0], seconds(args[1]), callers, intra)
                print(f"ort-c{callers}-i{intra} {ips:.1f} {p50:.1f} {p99:.1f} {n}", flush=True)
    else:
        sys.exit(__doc__)
