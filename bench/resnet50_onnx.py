"""Writes ResNet-50 (torchvision's v1.5 layout: the stride on the 3×3 convolution) as ONNX
with a variable batch: `input` FP32 [N, 3, 224, 224] → `logits` FP32 [N, 1000].

Batch norms are folded into their convolutions, as an exported inference model has them
after ONNX Runtime's fusions; the weights are random (He-scaled, fixed seed), so the model
does the work of ResNet-50 without a download. About 25.5 M parameters, a 102 MB file.

    python3 bench/resnet50_onnx.py OUT.onnx
"""

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(50)
nodes, inits = [], []


def conv(x, cin, cout, k, stride=1, relu=True, scale=1.0):
    """A convolution with bias (a folded batch norm), then ReLU where asked."""
    name = f"conv{len(inits) // 2}"
    w = rng.standard_normal((cout, cin, k, k), dtype=np.float32) * np.float32(scale * np.sqrt(2 / (cin * k * k)))
    b = np.zeros(cout, np.float32)
    inits.extend([numpy_helper.from_array(w, name + "_w"), numpy_helper.from_array(b, name + "_b")])
    nodes.append(helper.make_node("Conv", [x, name + "_w", name + "_b"], [name], kernel_shape=[k, k],
                                  strides=[stride, stride], pads=[k // 2] * 4))
    if not relu:
        return name
    nodes.append(helper.make_node("Relu", [name], [name + "_r"]))
    return name + "_r"


def bottleneck(x, cin, width, stride):
    out = width * 4
    y = conv(x, cin, width, 1)
    y = conv(y, width, width, 3, stride)
    # A small last scale keeps the residual sum from growing through the 16 blocks.
    y = conv(y, width, out, 1, relu=False, scale=0.2)
    shortcut = conv(x, cin, out, 1, stride, relu=False) if stride != 1 or cin != out else x
    name = f"add{len(nodes)}"
    nodes.append(helper.make_node("Add", [y, shortcut], [name]))
    nodes.append(helper.make_node("Relu", [name], [name + "_r"]))
    return name + "_r"


x = conv("input", 3, 64, 7, 2)
nodes.append(helper.make_node("MaxPool", [x], ["pool"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4))
x, cin = "pool", 64
for width, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
    for i in range(blocks):
        x = bottleneck(x, cin, width, stride if i == 0 else 1)
        cin = width * 4
nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"]))
nodes.append(helper.make_node("Flatten", ["gap"], ["flat"]))
fc_w = rng.standard_normal((1000, 2048), dtype=np.float32) * np.float32(np.sqrt(1 / 2048))
inits.extend([numpy_helper.from_array(fc_w, "fc_w"), numpy_helper.from_array(np.zeros(1000, np.float32), "fc_b")])
nodes.append(helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1))

graph = helper.make_graph(
    nodes, "resnet50",
    [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 224, 224])],
    [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 1000])], inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
onnx.checker.check_model(model)
onnx.save(model, sys.argv[1])
