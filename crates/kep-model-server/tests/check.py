"""Calls a running model server the way its users do and compares every answer with ONNX
Runtime's on the same inputs. Exits non-zero, saying why, on the first difference.

    check.py kserve URL NAME MODEL       # with tritonclient (http): binary and JSON tensors
    check.py tfserving URL NAME MODEL    # TF Serving REST: row and columnar requests
    check.py kserve-grpc URL NAME MODEL  # with tritonclient (grpc) on the REST port: every RPC

MODEL is the ONNX file ONNX Runtime runs: the served one, or for a TensorFlow frozen graph
the ONNX model with the same weights and names.
"""
import base64
import json
import queue
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
        # Plain, and compressed as tritonclient compresses them: the request body, the
        # answer, or both.
        for sent, asked in [(None, None), ("gzip", None), ("deflate", "gzip"), (None, "deflate")]:
            result = client.infer(name, inputs, outputs=outputs, request_compression_algorithm=sent,
                                  response_compression_algorithm=asked)
            for k, v in expected(feeds).items():
                compare(result.as_numpy(k), v,
                        f"{name} output {k} (batch {batch}, binary {binary}, {sent}/{asked})")
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


def typed_request(feeds):
    """A ModelInferRequest with its inputs in the typed `contents`, not raw: tritonclient
    sends raw contents only, other KServe clients send these."""
    from tritonclient.grpc import service_pb2
    from tritonclient.utils import np_to_triton_dtype

    field = {
        np.bool_: "bool_contents", np.int8: "int_contents", np.int16: "int_contents",
        np.int32: "int_contents", np.int64: "int64_contents", np.uint8: "uint_contents",
        np.uint16: "uint_contents", np.uint32: "uint_contents", np.uint64: "uint64_contents",
        np.float32: "fp32_contents", np.float64: "fp64_contents", np.object_: "bytes_contents",
    }
    request = service_pb2.ModelInferRequest(model_name=name, id="typed")
    for k, v in feeds.items():
        t = request.inputs.add(name=k, datatype=np_to_triton_dtype(v.dtype), shape=list(v.shape))
        if v.dtype.type in field:  # not FP16
            values = [s.encode() for s in v.ravel()] if v.dtype == object else v.ravel().tolist()
            getattr(t.contents, field[v.dtype.type]).extend(values)
    return request


def grpc_error(call, code, text):
    """`call` (tritonclient's or a stub's) fails with the gRPC status `code` (a name) and a
    message containing `text`."""
    import grpc
    from tritonclient.utils import InferenceServerException

    try:
        call()
    except InferenceServerException as e:
        status, message = e.status(), e.message()
    except grpc.RpcError as e:
        status, message = str(e.code()), e.details()
    else:
        sys.exit(f"expected {code} ({text}), the call succeeded")
    assert status == f"StatusCode.{code}" and text in message, (code, text, status, message)


def check_kserve_grpc():
    import grpc
    import tritonclient.grpc as tc
    from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc
    from tritonclient.utils import np_to_triton_dtype

    target = url.removeprefix("http://")
    client = tc.InferenceServerClient(target)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(target))
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready(name) and client.is_model_ready(name, "1")
    assert not client.is_model_ready(name, "2") and not client.is_model_ready(name + "-nope")
    server = client.get_server_metadata()
    assert server.name == "triton" and "model_repository" in server.extensions, server

    meta = client.get_model_metadata(name)
    assert meta.versions == ["1"] and meta.platform == "onnxruntime_onnx", meta
    assert [i.name for i in meta.inputs] == [i.name for i in session.get_inputs()], meta
    assert [o.name for o in meta.outputs] == [o.name for o in session.get_outputs()], meta
    config = client.get_model_config(name).config
    assert config.name == name and config.max_batch_size == 0 and config.platform == "onnxruntime_onnx", config
    for i, m in zip(config.input, meta.inputs):
        want = "TYPE_STRING" if m.datatype == "BYTES" else f"TYPE_{m.datatype}"
        assert (i.name, model_config_pb2.DataType.Name(i.data_type), list(i.dims)) == (m.name, want, list(m.shape)), (i, m)

    def counts():
        (stats,) = client.get_inference_statistics(name).model_stats
        s = stats.inference_stats
        assert stats.inference_count == stats.execution_count == s.success.count, stats
        return s.success.count, s.fail.count

    def typed_inputs(feeds):
        inputs = []
        for k, v in feeds.items():
            t = tc.InferInput(k, list(v.shape), np_to_triton_dtype(v.dtype))
            t.set_data_from_numpy(v)
            inputs.append(t)
        return inputs

    before = counts()
    ok = fail = 0
    for batch in [1, 3]:
        feeds = sample(batch)
        inputs = typed_inputs(feeds)
        result = client.infer(name, inputs, request_id=f"b{batch}")
        ok += 1
        response = result.get_response()
        assert (response.model_name, response.model_version, response.id) == (name, "1", f"b{batch}"), response
        assert len(response.raw_output_contents) == len(response.outputs), response
        for k, v in expected(feeds).items():
            compare(result.as_numpy(k), v, f"{name} output {k} (grpc, batch {batch})")
        for algorithm in ["gzip", "deflate"]:
            result = client.infer(name, inputs, compression_algorithm=algorithm)
            ok += 1
            for k, v in expected(feeds).items():
                compare(result.as_numpy(k), v, f"{name} output {k} (grpc, batch {batch}, {algorithm})")
    # Only the outputs asked for come back.
    first = session.get_outputs()[0].name
    result = client.infer(name, inputs, model_version="1", outputs=[tc.InferRequestedOutput(first)])
    ok += 1
    assert [o.name for o in result.get_response().outputs] == [first], result.get_response()

    # A stream (ModelStreamInfer): an answer per request, in the order sent, whatever the
    # server runs at once; a failure is an answer with Triton's message and the request's
    # id, and the stream goes on.
    answers = queue.Queue()
    client.start_stream(lambda result, error: answers.put((result, error)))
    wrong = tc.InferInput(inputs[0].name(), inputs[0].shape(), "BYTES" if inputs[0].datatype() != "BYTES" else "FP32")
    wrong.set_data_from_numpy(np.zeros(inputs[0].shape(), np.object_ if wrong.datatype() == "BYTES" else np.float32))
    sent = [sample(1 + i % 3) for i in range(12)]
    for i, request in enumerate(sent):
        client.async_stream_infer(name, [wrong] + inputs[1:] if i == 1 else typed_inputs(request), request_id=f"s{i}")
    got = [answers.get(timeout=60) for _ in sent]
    client.stop_stream()
    for i, ((r, e), feeds) in enumerate(zip(got, sent)):
        if i == 1:
            assert r is None and f"inference input '{inputs[0].name()}' data-type is" in e.message(), (r, e)
            continue
        assert e is None and r.get_response().id == f"s{i}", (i, e, r and r.get_response())
        for k, v in expected(feeds).items():
            compare(r.as_numpy(k), v, f"{name} output {k} (grpc stream, request {i})")
    ok, fail = ok + len(sent) - 1, fail + 1

    # Typed contents: the protocol has no typed field for FP16, which must go raw.
    feeds = sample(2)
    request = typed_request(feeds)
    if any(v.dtype == np.float16 for v in feeds.values()):
        grpc_error(lambda: stub.ModelInfer(request), "INVALID_ARGUMENT", "FP16 data must be sent in raw_input_contents")
        fail += 1
    else:
        result = tc.InferResult(stub.ModelInfer(request))
        ok += 1
        for k, v in expected(feeds).items():
            compare(result.as_numpy(k), v, f"{name} output {k} (grpc, typed contents)")

    # Errors: Triton's texts and status codes, a request that fits no input counted failed.
    grpc_error(lambda: client.infer(name, [wrong] + inputs[1:]), "INVALID_ARGUMENT", f"inference input '{inputs[0].name()}' data-type is")
    fail += 1
    grpc_error(lambda: client.infer(name + "-nope", inputs), "NOT_FOUND", f"Request for unknown model: '{name}-nope' is not found")
    grpc_error(lambda: client.get_model_metadata(name, "2"), "NOT_FOUND", f"Request for unknown model: '{name}' version 2 is not found")
    grpc_error(lambda: client.get_model_config(name, "x"), "INVALID_ARGUMENT", "failed to get model version from specified version string 'x'")
    grpc_error(lambda: client.get_inference_statistics(name + "-nope"), "NOT_FOUND", f"requested model '{name}-nope' is not available")
    # Client shared memory is off unless the server allows it, as in Triton.
    assert not client.get_system_shared_memory_status().regions
    grpc_error(lambda: client.register_system_shared_memory("r", "/k", 4), "UNIMPLEMENTED",
               "Client shared memory is disabled")
    # CUDA shared memory as a Triton without GPU support answers it, allowed or not.
    assert not client.get_cuda_shared_memory_status().regions
    grpc_error(lambda: client.register_cuda_shared_memory("c", b"\0" * 64, 0, 4), "INVALID_ARGUMENT",
               "failed to register CUDA shared memory region: 'c', GPUs not supported")
    grpc_error(client.unregister_cuda_shared_memory, "UNIMPLEMENTED", "Client shared memory is disabled")
    # The logging and trace settings are check_settings.py's.
    after = counts()
    assert after == (before[0] + ok, before[1] + fail), (before, after, ok, fail)
    assert client.get_inference_statistics().model_stats[0].name == name

    # The repository holds the one model: loads of it succeed, of another fail; unloaded,
    # it is kept but unavailable until loaded again.
    (index,) = client.get_model_repository_index().models
    assert (index.name, index.version, index.state) == (name, "1", "READY"), index
    client.load_model(name)
    grpc_error(lambda: client.load_model(name + "-nope"), "INTERNAL", f"failed to load '{name}-nope', failed to poll from model repository")
    client.unload_model(name + "-nope")
    client.unload_model(name)
    assert not client.is_model_ready(name)
    assert client.get_model_repository_index().models[0].state == "UNAVAILABLE"
    assert not stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=True)).models
    grpc_error(lambda: client.infer(name, inputs), "NOT_FOUND", f"Request for unknown model: '{name}' has no available versions")
    client.load_model(name)
    assert client.is_model_ready(name)

    # REST goes on answering on the same port.
    with urllib.request.urlopen(f"{url}/v2/models/{name}") as res:
        assert json.loads(res.read())["name"] == name
    with urllib.request.urlopen(f"{url}/v2/health/ready") as res:
        assert res.status == 200


{"kserve": check_kserve, "kserve-grpc": check_kserve_grpc, "tfserving": check_tfserving}[protocol]()
print(f"{protocol} {name}: answers match ONNX Runtime's")
