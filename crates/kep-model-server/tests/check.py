"""Calls a running model server the way its users do and compares every answer with ONNX
Runtime's on the same inputs. Exits non-zero, saying why, on the first difference.

    check.py kserve URL NAME MODEL       # with tritonclient (http): binary and JSON tensors
    check.py tfserving URL NAME MODEL    # TF Serving REST: row and columnar requests

MODEL is the ONNX file ONNX Runtime runs: the served one, or for a TensorFlow frozen graph
the ONNX model with the same weights and names.
"""
import base64
import json
import sys
import urllib.error
import urllib.request

import numpy as np
import onnxruntime as ort

protocol, url, name, path = sys.argv[1:5]
session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
rng = np.random.default_rng(11)

NUMPY = {
    "tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
    "tensor(bool)": np.bool_, "tensor(uint8)": np.uint8, "tensor(uint16)": np.uint16,
    "tensor(uint32)": np.uint32, "tensor(uint64)": np.uint64, "tensor(int8)": np.int8,
    "tensor(int16)": np.int16, "tensor(int32)": np.int32, "tensor(int64)": np.int64,
    "tensor(string)": np.object_,
}


def sample(batch):
    """Inputs for every model input: a variable dimension gets `batch`."""
    feeds = {}
    for i in session.get_inputs():
        shape = [d if isinstance(d, int) and d > 0 else batch for d in i.shape]
        dtype = NUMPY[i.type]
        if dtype is np.object_:
            feeds[i.name] = np.array([f"text {k}" for k in range(int(np.prod(shape)))], dtype=object).reshape(shape)
        elif dtype is np.bool_:
            feeds[i.name] = rng.integers(0, 2, size=shape).astype(np.bool_)
        elif np.issubdtype(dtype, np.integer):
            feeds[i.name] = rng.integers(0, 100, size=shape).astype(dtype)
        else:
            feeds[i.name] = rng.normal(size=shape).astype(dtype)
    return feeds


def text(g):
    """A BYTES element as text: raw bytes (tritonclient) or {"b64": …} (TF Serving)."""
    if isinstance(g, dict):
        g = base64.b64decode(g["b64"])
    return g.decode() if isinstance(g, bytes) else g


def compare(got, want, what):
    got = np.asarray(got)
    if want.dtype == object:
        got = np.array([text(g) for g in got.ravel()], dtype=object).reshape(got.shape)
        ok = got.shape == want.shape and (got == want).all()
    else:
        ok = got.shape == want.shape and np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-4, atol=1e-5)
    if not ok:
        sys.exit(f"{what}: got {got!r}, ONNX Runtime gives {want!r}")


def expected(feeds):
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def check_kserve():
    import tritonclient.http as http
    from tritonclient.utils import InferenceServerException, np_to_triton_dtype

    client = http.InferenceServerClient(url.removeprefix("http://"))
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready(name)
    meta = client.get_model_metadata(name)
    assert [i["name"] for i in meta["inputs"]] == [i.name for i in session.get_inputs()], meta
    for batch, binary in [(1, True), (3, True), (2, False)]:
        feeds = sample(batch)
        inputs = []
        for k, v in feeds.items():
            t = http.InferInput(k, list(v.shape), np_to_triton_dtype(v.dtype))
            t.set_data_from_numpy(v, binary_data=binary)
            inputs.append(t)
        outputs = [http.InferRequestedOutput(o.name, binary_data=binary) for o in session.get_outputs()]
        result = client.infer(name, inputs, outputs=outputs)
        for k, v in expected(feeds).items():
            compare(result.as_numpy(k), v, f"{name} output {k} (batch {batch}, binary {binary})")
    # Only the outputs asked for come back.
    first = session.get_outputs()[0].name
    result = client.infer(name, inputs, outputs=[http.InferRequestedOutput(first)])
    assert [o["name"] for o in result.get_response()["outputs"]] == [first], result.get_response()
    try:
        client.infer(name + "-nope", inputs)
        sys.exit("an unknown model answered")
    except InferenceServerException as e:
        assert "unknown model" in str(e), e


def post(path, doc):
    req = urllib.request.Request(url + path, data=json.dumps(doc).encode(), method="POST")
    try:
        with urllib.request.urlopen(req) as res:
            return res.status, json.loads(res.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def as_json(v):
    if v.dtype == object:
        return [{"b64": base64.b64encode(s.encode()).decode()} for s in v.ravel()] if v.ndim == 1 else v.tolist()
    return v.tolist()


def check_tfserving():
    feeds = sample(3)
    want = expected(feeds)
    outputs = [o.name for o in session.get_outputs()]
    # Columnar: each input whole.
    status, doc = post(f"/v1/models/{name}:predict", {"inputs": {k: as_json(v) for k, v in feeds.items()}})
    assert status == 200, doc
    got = doc["outputs"] if len(outputs) > 1 else {outputs[0]: doc["outputs"]}
    for k, v in want.items():
        compare(np.array(got[k], dtype=v.dtype) if v.dtype != object else np.array(got[k], dtype=object), v, f"{name} columnar {k}")
    # Row: one object per instance, stacked by the server.
    instances = [{k: as_json(v[i:i + 1])[0] for k, v in feeds.items()} for i in range(3)]
    if len(feeds) == 1:
        instances = [next(iter(i.values())) for i in instances]
    status, doc = post(f"/v1/models/{name}/versions/1:predict", {"instances": instances})
    assert status == 200, doc
    rows = doc["predictions"]
    for k, v in want.items():
        column = [r[k] for r in rows] if len(outputs) > 1 else rows
        compare(np.array(column, dtype=v.dtype), v, f"{name} row {k}")


check_kserve() if protocol == "kserve" else check_tfserving()
print(f"{protocol} {name}: answers match ONNX Runtime's")
