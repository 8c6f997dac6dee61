#!/usr/bin/env python3
"""The MLP and the in-process reference of bench/batching.sh (issue #47).

  batching.py make OUT                 # OUT/mlp.onnx: x FP32 [N, 256] -> Gemm 1024, Relu ->
                                       # Gemm 1024, Relu -> Gemm 256 (y), seeded weights
  batching.py ort MODEL DURATION N     # onnxruntime in-process, N caller threads on one
                                       # session at batch 1: "ort-cN ips p50_us p99_us n"
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from model_server import bench
from timing import seconds


def make(out):
    rng = np.random.default_rng(47)
    sizes = [256, 1024, 1024, 256]
    nodes, inits, x = [], [], "x"
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        w = (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"),
                  numpy_helper.from_array(np.zeros(b, np.float32), f"b{i}")]
        last = i == len(sizes) - 2
        y = "y" if last else f"h{i}"
        nodes.append(helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [y if last else f"g{i}"]))
        if not last:
            nodes.append(helper.make_node("Relu", [f"g{i}"], [y]))
        x = y
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 256])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, f"{out}/mlp.onnx")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "make":
        make(*args)
    elif cmd == "ort":
        n = int(args[2])
        ips, p50, p99, count = bench(args[0], seconds(args[1]), n, 0)
        print(f"ort-c{n} {ips:.1f} {p50:.1f} {p99:.1f} {count}", flush=True)
    else:
        sys.exit(__doc__)
