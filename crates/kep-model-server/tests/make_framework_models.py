"""Models as their frameworks save them, for tests/framework.rs: two SavedModels and two
TorchScript files under the directory given, and on stdout (JSON) the inputs the test
runs and each framework's own answers to them, computed here in process.

    python3 make_framework_models.py DIR
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf
import torch

out = sys.argv[1]
W = np.array([[0.5, -1.0], [2.0, 0.25], [-0.75, 1.5]], dtype=np.float32)
B = np.array([0.1, -0.2], dtype=np.float32)
X = np.array([[1, 2, 3], [-1, 0.5, 2], [0, 0, 0], [4, -2, 1]], dtype=np.float32)
IDX = np.array([3, -1, 0, 7], dtype=np.int64)


class Dense(tf.Module):
    def __init__(self):
        self.w = tf.Variable(W)
        self.b = tf.Variable(B)

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def serve(self, x):
        return {"y": x @ self.w + self.b}

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def scores(self, x):
        return {"probs": tf.nn.softmax(x @ self.w + self.b)}


dense = Dense()
saved = os.path.join(out, "dense")
signatures = {"serving_default": dense.serve, "scores": dense.scores}
tf.saved_model.save(dense, saved, signatures=signatures)
loaded = tf.saved_model.load(saved)
tf_y = loaded.signatures["serving_default"](x=tf.constant(X))["y"].numpy()
tf_probs = loaded.signatures["scores"](x=tf.constant(X))["probs"].numpy()


class Strings(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def serve(self, s):
        return {"length": tf.strings.length(s), "upper": tf.strings.upper(s)}


strings = Strings()
tf.saved_model.save(strings, os.path.join(out, "strings"), signatures=strings.serve)


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


answers = {"x": X.tolist(), "idx": IDX.tolist(), "y": tf_y.tolist(), "probs": tf_probs.tolist()}
for name, module, args in [
    ("linear", Linear(), (torch.from_numpy(X),)),
    ("two", Two(), (torch.from_numpy(X), torch.from_numpy(IDX))),
]:
    scripted = torch.jit.script(module.eval())
    torch.jit.save(scripted, os.path.join(out, f"{name}.pt"))
    with torch.inference_mode():
        result = scripted(*args)
    answers[name] = [t.tolist() for t in (result if isinstance(result, tuple) else (result,))]
print(json.dumps(answers))
