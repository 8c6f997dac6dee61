#!/usr/bin/env python3
"""TensorFlow and PyTorch in-process, the reference of bench/frameworks.sh (issue #46).

  frameworks.py make DIR                   # DIR/mlp.tar.gz (a SavedModel) and DIR/mlp.pt
                                           # (TorchScript) of the same MLP, same weights
  frameworks.py body BATCH OUT             # KServe v2 binary request for x [BATCH, 256];
                                           # prints the JSON header's length
  frameworks.py check FRAMEWORK DIR BATCH RESPONSE HEADERS   # kep's answer against the
                                           # framework's own
  frameworks.py inproc FRAMEWORK DIR BATCH DURATION          # one line per caller count:
                                           # name ips p50_us p99_us n

The MLP: x FP32 [batch, 256] → Dense 1024, relu → Dense 1024, relu → Dense 256 (about 1.6
M multiply-adds per row), seeded weights; the input is seeded too. In-process calls are
what a user of the framework writes: the SavedModel's `serving_default` signature on a
tf.constant, the TorchScript module under torch.inference_mode on a tensor, with each
framework's default threads, by 1 or 4 caller threads (both release the GIL while they
compute).
"""
import json
import os
import re
import subprocess
import sys

import numpy as np

from timing import seconds, timed

SIZES = [256, 1024, 1024, 256]


def weights():
    rng = np.random.default_rng(46)
    return [((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32),
             (rng.standard_normal(b) * 0.1).astype(np.float32))
            for a, b in zip(SIZES, SIZES[1:])]


def x_of(batch):
    return np.random.default_rng(7).standard_normal((batch, SIZES[0]), dtype=np.float32)


def make(out):
    import tensorflow as tf
    import torch

    layers = weights()

    class Mlp(tf.Module):
        def __init__(self):
            self.vars = [(tf.Variable(w), tf.Variable(b)) for w, b in layers]

        @tf.function(input_signature=[tf.TensorSpec([None, SIZES[0]], tf.float32)])
        def serve(self, x):
            for i, (w, b) in enumerate(self.vars):
                x = x @ w + b
                if i + 1 < len(self.vars):
                    x = tf.nn.relu(x)
            return {"y": x}

    mlp = Mlp()
    tf.saved_model.save(mlp, os.path.join(out, "mlp", "1"), signatures={"serving_default": mlp.serve})
    subprocess.run(["tar", "czf", "mlp.tar.gz", "mlp"], cwd=out, check=True)

    class TorchMlp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fcs = torch.nn.ModuleList()
            for w, b in layers:
                fc = torch.nn.Linear(*w.shape)
                with torch.no_grad():
                    fc.weight.copy_(torch.from_numpy(w.T.copy()))
                    fc.bias.copy_(torch.from_numpy(b))
                self.fcs.append(fc)

        def forward(self, x):
            n = len(self.fcs)
            for i, fc in enumerate(self.fcs):
                x = fc(x)
                if i + 1 < n:
                    x = torch.relu(x)
            return x

    torch.jit.save(torch.jit.script(TorchMlp().eval()), os.path.join(out, "mlp.pt"))


def body(batch, out):
    x = x_of(int(batch))
    # The output's name is the model's (`y` for the SavedModel, OUTPUT__0 for TorchScript):
    # asking for none answers every output, binary by the request's parameter.
    head = json.dumps({
        "inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes}}],
        "parameters": {"binary_data_output": True},
    }).encode()
    with open(out, "wb") as f:
        f.write(head + x.astype("<f4").tobytes())
    print(len(head))


def runner(framework, dir, batch):
    """A call of the model on the batch, as a user of the framework writes it."""
    x = x_of(batch)
    if framework == "tensorflow":
        import tensorflow as tf
        f = tf.saved_model.load(os.path.join(dir, "mlp", "1")).signatures["serving_default"]
        t = tf.constant(x)
        return lambda: f(x=t)["y"].numpy()
    import torch
    m = torch.jit.load(os.path.join(dir, "mlp.pt"))
    t = torch.from_numpy(x)

    def call():
        with torch.inference_mode():
            return m(t).numpy()
    return call


def check(framework, dir, batch, response, headers):
    want = runner(framework, dir, int(batch))()
    n = int(re.search(r"(?im)^inference-header-content-length:\s*(\d+)", open(headers).read())[1])
    raw = open(response, "rb").read()
    head = json.loads(raw[:n])
    got = np.frombuffer(raw[n:], "<f4").reshape(head["outputs"][0]["shape"])
    diff = np.abs(got - want).max()
    print(f"max |kep - {framework}| = {diff:.2e} over {got.size} values")
    if diff > 1e-4:
        sys.exit("kep's answer is not the framework's")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "make":
        make(*args)
    elif cmd == "body":
        body(*args)
    elif cmd == "check":
        check(*args)
    elif cmd == "inproc":
        framework, dir, batch, duration = args
        call = runner(framework, dir, int(batch))
        for callers in (1, 4):
            ips, p50, p99, n = timed(call, seconds(duration), callers)
            print(f"inproc-c{callers} {ips:.1f} {p50:.1f} {p99:.1f} {n}", flush=True)
    else:
        sys.exit(__doc__)
