"""Makes the test models with the `onnx` package's helper API, into the folder given:

mlp.onnx        x FP32 [batch, 4] -> probs FP32 [batch, 3] (Gemm, Relu, Gemm, Softmax)
identity.onnx   in_<type> -> out_<type> [n] for every KServe v2 datatype
unsupported.onnx an operator of a domain no engine knows
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
rng = np.random.default_rng(7)


def save(model, name):
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(out, name))


def mlp():
    w1 = numpy_helper.from_array(rng.normal(size=(4, 8)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.normal(size=(8,)).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.normal(size=(8, 3)).astype(np.float32), "w2")
    b2 = numpy_helper.from_array(rng.normal(size=(3,)).astype(np.float32), "b2")
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"]),
        helper.make_node("Relu", ["h"], ["hr"]),
        helper.make_node("Gemm", ["hr", "w2", "b2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 3])],
        [w1, b1, w2, b2],
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), "mlp.onnx")


TYPES = {
    "bool": TensorProto.BOOL,
    "uint8": TensorProto.UINT8,
    "uint16": TensorProto.UINT16,
    "uint32": TensorProto.UINT32,
    "uint64": TensorProto.UINT64,
    "int8": TensorProto.INT8,
    "int16": TensorProto.INT16,
    "int32": TensorProto.INT32,
    "int64": TensorProto.INT64,
    "fp16": TensorProto.FLOAT16,
    "fp32": TensorProto.FLOAT,
    "fp64": TensorProto.DOUBLE,
    "bytes": TensorProto.STRING,
}


def identity():
    nodes = [helper.make_node("Identity", [f"in_{t}"], [f"out_{t}"]) for t in TYPES]
    graph = helper.make_graph(
        nodes,
        "identity",
        [helper.make_tensor_value_info(f"in_{t}", p, ["n"]) for t, p in TYPES.items()],
        [helper.make_tensor_value_info(f"out_{t}", p, ["n"]) for t, p in TYPES.items()],
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), "identity.onnx")


def unsupported():
    graph = helper.make_graph(
        [helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example")],
        "unsupported",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.example", 1)],
    )
    model.ir_version = 8
    onnx.save(model, os.path.join(out, "unsupported.onnx"))


mlp()
identity()
unsupported()
