"""Models as TensorFlow and PyTorch users save and ship them, for kep's end-to-end tests
(crates/kep/tests/it/serve/frameworks.rs): archives as `tar czf` and `zip -r` make them, and
on stdout (JSON) the inputs the tests send with each framework's own answers, computed here
in process.

    python3 make_saved_models.py DIR

DIR/dense.tar.gz   TF Serving's base path `dense/` with versions 1 and 2 (version 2's weights
                   are twice version 1's), each with the signatures `serving_default` (y)
                   and `scores` (probs), as `tf.saved_model.save` writes them
DIR/examples.zip   one SavedModel at the archive's root whose signatures take serialized
                   tf.Examples: `serving_default` (classify: classes, scores) and `regress`
                   (outputs), as TF1's SavedModelBuilder writes them
DIR/linear.pt      a TorchScript module (Linear(3, 2), then relu), as `torch.jit.save` writes it
DIR/traced.pt      the same module traced (`torch.jit.trace`) rather than scripted
DIR/two.pt         a TorchScript module of two inputs (x FP32, idx INT64) and two outputs
DIR/strings        a SavedModel folder whose signature takes and gives strings (tf.string),
                   and DIR/strings.zip of it

The folders the archives were made of stay (`dense/1`, `dense/2`, `examples`), for the
framework worker's own tests (tests/framework.rs).
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import tensorflow as tf
import torch

out = sys.argv[1]
W = np.array([[0.5, -1.0], [2.0, 0.25], [-0.75, 1.5]], dtype=np.float32)
B = np.array([0.1, -0.2], dtype=np.float32)
X = np.array([[1, 2, 3], [-1, 0.5, 2], [0, 0, 0], [4, -2, 1]], dtype=np.float32)
IDX = np.array([3, -1, 0, 7], dtype=np.int64)
answers = {"x": X.tolist(), "idx": IDX.tolist()}


class Dense(tf.Module):
    def __init__(self, scale):
        self.w = tf.Variable(W * scale)
        self.b = tf.Variable(B)

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def serve(self, x):
        return {"y": x @ self.w + self.b}

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def scores(self, x):
        return {"probs": tf.nn.softmax(x @ self.w + self.b)}


base = os.path.join(out, "dense")
for version, scale in [(1, 1.0), (2, 2.0)]:
    dense = Dense(scale)
    path = os.path.join(base, str(version))
    tf.saved_model.save(dense, path, signatures={"serving_default": dense.serve, "scores": dense.scores})
    loaded = tf.saved_model.load(path)
    answers[f"v{version}"] = {
        "y": loaded.signatures["serving_default"](x=tf.constant(X))["y"].numpy().tolist(),
        "probs": loaded.signatures["scores"](x=tf.constant(X))["probs"].numpy().tolist(),
    }
subprocess.run(["tar", "czf", "dense.tar.gz", "dense"], cwd=out, check=True)

# TF1's builder: the signatures TF Serving's :classify and :regress run, on serialized
# tf.Examples with a fixed-length feature `x`.
examples = os.path.join(out, "examples")
with tf.compat.v1.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session:
    serialized = tf.compat.v1.placeholder(tf.string, [None], name="tf_example")
    features = tf.io.parse_example(serialized, {"x": tf.io.FixedLenFeature([3], tf.float32)})
    logits = tf.matmul(features["x"], tf.constant(W)) + tf.constant(B)
    scores = tf.nn.softmax(logits)
    classes = tf.tile(tf.constant([["down", "up"]]), [tf.shape(logits)[0], 1])
    value = tf.reduce_sum(logits, axis=1, keepdims=True)
    sigs = tf.compat.v1.saved_model.signature_def_utils
    builder = tf.compat.v1.saved_model.Builder(examples)
    builder.add_meta_graph_and_variables(
        session,
        [tf.compat.v1.saved_model.tag_constants.SERVING],
        signature_def_map={
            "serving_default": sigs.classification_signature_def(serialized, classes, scores),
            "regress": sigs.regression_signature_def(serialized, value),
        },
    )
    builder.save()
    feed = [
        tf.train.Example(
            features=tf.train.Features(
                feature={"x": tf.train.Feature(float_list=tf.train.FloatList(value=row))}
            )
        ).SerializeToString()
        for row in X.tolist()
    ]
    got_scores, got_values = session.run([scores, value], {serialized: feed})
    answers["classify"] = got_scores.tolist()
    answers["regress"] = got_values[:, 0].tolist()
shutil.make_archive(os.path.join(out, "examples"), "zip", examples)


class Strings(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def serve(self, s):
        return {"length": tf.strings.length(s), "upper": tf.strings.upper(s)}


strings = Strings()
tf.saved_model.save(strings, os.path.join(out, "strings"), signatures=strings.serve)
shutil.make_archive(os.path.join(out, "strings"), "zip", os.path.join(out, "strings"))


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)
        with torch.no_grad():
            self.fc.weight.copy_(torch.from_numpy(W.T.copy()))
            self.fc.bias.copy_(torch.from_numpy(B))

    def forward(self, x):
        return torch.relu(self.fc(x))


class Two(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = Linear()

    def forward(self, x, idx):
        return self.linear(x) * idx.unsqueeze(1).to(torch.float32), idx * 2


for name, module, args in [
    ("linear", Linear(), (torch.from_numpy(X),)),
    ("two", Two(), (torch.from_numpy(X), torch.from_numpy(IDX))),
]:
    scripted = torch.jit.script(module.eval())
    torch.jit.save(scripted, os.path.join(out, f"{name}.pt"))
    with torch.inference_mode():
        result = scripted(*args)
    answers[name] = ([t.tolist() for t in result] if isinstance(result, tuple)
                     else result.tolist())
# What most PyTorch users save: a module traced on an example input rather than scripted.
torch.jit.save(torch.jit.trace(Linear().eval(), torch.from_numpy(X)), os.path.join(out, "traced.pt"))
print(json.dumps(answers))
