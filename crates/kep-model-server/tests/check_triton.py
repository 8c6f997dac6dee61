"""Calls Triton's protocol extensions on a running `triton` model server the way a Triton
user does, with `tritonclient.http`, and checks each answer; exits non-zero, saying why.

    check_triton.py URL NAME MODEL [KEY]

URL is the server's (host:port[/base path]), NAME the served model, MODEL its ONNX file
(ONNX Runtime gives the expected classes), KEY an endpoint key when URL is the gateway's.
"""
import gzip
import json
import sys
import urllib.error
import urllib.request
import zlib

import numpy as np
import onnxruntime as ort
import tritonclient.http as http
from fails import fails

url, name, path = sys.argv[1:4]
headers = {"Authorization": f"Bearer {sys.argv[4]}"} if len(sys.argv) > 4 else None
client = http.InferenceServerClient(url)
session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
x_spec, out_spec = session.get_inputs()[0], session.get_outputs()[0]


meta = client.get_server_metadata(headers=headers)
assert meta["name"] == "triton", meta
# The logging and trace settings are check_settings.py's.
for extension in ["binary_tensor_data", "classification", "model_repository", "statistics",
                  "model_configuration", "logging", "trace"]:
    assert extension in meta["extensions"], meta

config = client.get_model_config(name, headers=headers)
assert config["name"] == name and config["max_batch_size"] == 0, config
assert config["platform"] == "onnxruntime_onnx", config
assert [i["name"] for i in config["input"]] == [i.name for i in session.get_inputs()], config
assert config["input"][0]["data_type"] == "TYPE_FP32", config
assert config["input"][0]["dims"] == [-1 if not isinstance(d, int) else d for d in x_spec.shape], config
fails(lambda: client.get_model_config(name + "-nope", headers=headers),
      f"Request for unknown model: '{name}-nope' is not found")

before = client.get_inference_statistics(name, headers=headers)["model_stats"][0]
rng = np.random.default_rng(3)
shape = [2 if not isinstance(d, int) else d for d in x_spec.shape]
x = rng.normal(size=shape).astype(np.float32)
inp = http.InferInput(x_spec.name, shape, "FP32")
inp.set_data_from_numpy(x)
for binary in [True, False]:
    k = 2
    out = http.InferRequestedOutput(out_spec.name, binary_data=binary, class_count=k)
    got = client.infer(name, [inp], outputs=[out], headers=headers).as_numpy(out_spec.name)
    want = session.run([out_spec.name], {x_spec.name: x})[0].ravel()
    best = np.argsort(-want, kind="stable")[:k]
    classes = [g.decode() if isinstance(g, bytes) else g for g in got.ravel()]
    assert [int(c.split(":")[1]) for c in classes] == list(best), (classes, want)
    assert np.allclose([float(c.split(":")[0]) for c in classes], want[best], atol=1e-5), classes
bad = http.InferInput(x_spec.name, shape, "FP64")
bad.set_data_from_numpy(x.astype(np.float64))
fails(lambda: client.infer(name, [bad], headers=headers),
      f"inference input '{x_spec.name}' data-type is 'FP64', but model '{name}' expects 'FP32'")

stats = client.get_inference_statistics(name, headers=headers)["model_stats"][0]
every = client.get_inference_statistics(headers=headers)["model_stats"]
assert [s["name"] for s in every] == [name], every
i, j = before["inference_stats"], stats["inference_stats"]
assert j["success"]["count"] - i["success"]["count"] == 2, stats
assert j["fail"]["count"] - i["fail"]["count"] == 1, stats
assert stats["execution_count"] - before["execution_count"] == 2, stats
assert j["compute_infer"]["ns"] > i["compute_infer"]["ns"], stats
assert stats["last_inference"] > 0, stats
fails(lambda: client.get_inference_statistics(name, "2", headers=headers),
      f"requested model version is not available for model '{name}'")

# The model repository: the one model, unloaded and loaded again.
assert client.get_model_repository_index(headers=headers) == [
    {"name": name, "version": "1", "state": "READY"}]
client.unload_model(name, headers=headers)
assert not client.is_model_ready(name, headers=headers)
assert client.get_model_repository_index(headers=headers)[0]["state"] == "UNAVAILABLE"
fails(lambda: client.infer(name, [inp], headers=headers),
      f"Request for unknown model: '{name}' has no available versions")
fails(lambda: client.load_model(name + "-nope", headers=headers),
      f"failed to load '{name}-nope', failed to poll from model repository")
client.load_model(name, headers=headers)
assert client.is_model_ready(name, headers=headers)
client.infer(name, [inp], headers=headers)

# Compression read and written as Triton does: a gzip body inflated, the answer in the
# encoding weighed highest of those Triton knows; an encoding it does not know refused.
# (The key alone: tritonclient has added its own headers to `headers`.)
auth = {"Authorization": f"Bearer {sys.argv[4]}"} if len(sys.argv) > 4 else {}
body = json.dumps({"inputs": [{"name": x_spec.name, "shape": shape, "datatype": "FP32",
                               "data": x.ravel().tolist()}]}).encode()
infer_url = f"http://{url}/v2/models/{name}/infer"
req = urllib.request.Request(infer_url, data=gzip.compress(body), headers={
    **auth, "Content-Encoding": "gzip", "Accept-Encoding": "br, gzip;q=0.2, deflate;q=0.5"})
with urllib.request.urlopen(req) as res:
    assert res.headers["Content-Encoding"] == "deflate", res.headers
    got = json.loads(zlib.decompress(res.read()))["outputs"][0]["data"]
    want = session.run([out_spec.name], {x_spec.name: x})[0].ravel()
    assert np.allclose(got, want, atol=1e-5), (got, want)
req = urllib.request.Request(infer_url, data=body, headers={**auth, "Content-Encoding": "br"})
try:
    urllib.request.urlopen(req)
    sys.exit("a body in br was read")
except urllib.error.HTTPError as e:
    assert e.code == 501 and e.headers["Accept-Encoding"] == "gzip, deflate", e.headers
    assert json.loads(e.read()) == {"error": "Unsupported compression type"}

# An unknown path is Triton's JSON 404.
req = urllib.request.Request(f"http://{url}/v2/no/such/path", headers=headers or {})
try:
    urllib.request.urlopen(req)
    sys.exit("an unknown path answered")
except urllib.error.HTTPError as e:
    assert e.code == 404 and json.loads(e.read()) == {"error": "Not Found"}, e

print(f"triton extensions {name}: as Triton answers them")
