"""Makes the test models with the `onnx` package's helper API, into the folder given:

mlp.onnx        x FP32 [batch, 4] -> probs FP32 [batch, 3] (Gemm, Relu, Gemm, Softmax)
identity.onnx   in_<type> -> out_<type> [n] for every KServe v2 datatype
unsupported.onnx an operator of a domain no engine knows
ort_only.onnx   x FP32 [n, 3, 3] -> y FP32 [n]: Det, which ONNX Runtime runs and tract lacks
linear.onnx     x FP32 [batch, 4] -> y FP32 [batch, 1] (Gemm): a regressor for TF Serving's
                :regress
unnamed_batch.onnx, minus_one_batch.onnx
                x FP32 [?, 4] -> y FP32 [?, 4] (Relu), the batch dimension with no name, as
                `onnx.helper` writes `None`, and as `-1`, as some exporters write it
mlp.pb          the same MLP, weights and names as a TensorFlow frozen GraphDef (MatMul,
                Add, Relu, MatMul, Add, Softmax), written with a small protobuf encoder: no
                TensorFlow needed
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
    weights = {
        "w1": rng.normal(size=(4, 8)).astype(np.float32),
        "b1": rng.normal(size=(8,)).astype(np.float32),
        "w2": rng.normal(size=(8, 3)).astype(np.float32),
        "b2": rng.normal(size=(3,)).astype(np.float32),
    }
    frozen_mlp(weights)
    w1, b1, w2, b2 = (numpy_helper.from_array(v, k) for k, v in weights.items())
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


# TensorFlow's protobuf messages (graph.proto, node_def.proto, attr_value.proto,
# tensor.proto, tensor_shape.proto), as field numbers.
def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, value):
    """A varint for an int, length-delimited for bytes or str."""
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    if isinstance(value, str):
        value = value.encode()
    return varint(number << 3 | 2) + varint(len(value)) + value


DT_FLOAT = 1


def shape(dims):  # TensorShapeProto.dim (2) of Dim.size (1)
    return b"".join(field(2, field(1, d)) for d in dims)


def attrs(**values):  # NodeDef.attr (5): map entries {key 1, value 2: AttrValue}
    return b"".join(field(5, field(1, k) + field(2, v)) for k, v in values.items())


def node(name, op, inputs=(), **attr_values):
    return field(1, name) + field(2, op) + b"".join(field(3, i) for i in inputs) + attrs(**attr_values)


def frozen_mlp(weights):
    t = field(6, DT_FLOAT)  # AttrValue.type
    no = field(5, 0)  # AttrValue.b: false
    nodes = [node("x", "Placeholder", dtype=t, shape=field(7, shape([-1, 4])))]
    for name, value in weights.items():
        tensor = field(1, DT_FLOAT) + field(2, shape(value.shape)) + field(4, value.astype("<f4").tobytes())
        nodes.append(node(name, "Const", dtype=t, value=field(8, tensor)))
    nodes += [
        node("h", "MatMul", ["x", "w1"], T=t, transpose_a=no, transpose_b=no),
        node("hb", "Add", ["h", "b1"], T=t),
        node("hr", "Relu", ["hb"], T=t),
        node("l", "MatMul", ["hr", "w2"], T=t, transpose_a=no, transpose_b=no),
        node("logits", "Add", ["l", "b2"], T=t),
        node("probs", "Softmax", ["logits"], T=t),
        # What TensorFlow's convert_variables_to_constants_v2 leaves beside the outputs: ops
        # that yield no tensor, one with a control input. Neither is an output.
        node("NoOp", "NoOp", ["^probs"]),
        node("init", "NoOp"),
    ]
    graph = b"".join(field(1, n) for n in nodes) + field(4, field(1, 1087))  # versions.producer
    with open(os.path.join(out, "mlp.pb"), "wb") as f:
        f.write(graph)


def ort_only():
    graph = helper.make_graph(
        [helper.make_node("Det", ["x"], ["y"])],
        "ort_only",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])],
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), "ort_only.onnx")


def linear():
    w = numpy_helper.from_array(rng.normal(size=(4, 1)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.normal(size=(1,)).astype(np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"])],
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1])],
        [w, b],
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), "linear.onnx")


def unknown_batch():
    for name, dim in [("unnamed_batch", None), ("minus_one_batch", -1)]:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim, 4])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [dim, 4])
        graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], name, [x], [y])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        # The checker refuses a -1 dimension, which exporters still write.
        onnx.save(model, os.path.join(out, f"{name}.onnx"))


mlp()
identity()
unknown_batch()
unsupported()
ort_only()
linear()
