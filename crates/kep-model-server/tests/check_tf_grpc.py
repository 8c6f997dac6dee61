"""Calls TF Serving's gRPC API on a running `tensorflow-serving` model server the way a TF
Serving user does, with a client generated from the vendored protos (`grpc_tools.protoc`,
as `tensorflow-serving-api` is made), and checks each answer against ONNX Runtime, the
REST API on the same port and TF Serving's error codes and texts; exits non-zero, saying
why.

    check_tf_grpc.py ADDR NAME MODEL [KEY]

ADDR is the server's host:port, NAME the served model, MODEL its ONNX file, KEY an
endpoint key when ADDR is the gateway's (then only Predict is called, through it).
"""
import json
import sys
import urllib.request

import grpc
import numpy as np
import onnxruntime as ort

addr, name, path = sys.argv[1:4]
key = sys.argv[4] if len(sys.argv) > 4 else None
auth = [("authorization", f"Bearer {key}")] if key else None

import tf_serving_apis  # noqa: E402,F401  (generates the modules below)
from tensorflow.core.example import example_pb2, feature_pb2  # noqa: E402
from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2  # noqa: E402
from tensorflow_serving.apis import (  # noqa: E402
    classification_pb2, get_model_metadata_pb2, get_model_status_pb2, inference_pb2,
    input_pb2, model_management_pb2, model_pb2, model_service_pb2_grpc, predict_pb2,
    prediction_service_pb2_grpc, regression_pb2)

channel = grpc.insecure_channel(addr)
prediction = prediction_service_pb2_grpc.PredictionServiceStub(channel)
models = model_service_pb2_grpc.ModelServiceStub(channel)
session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])

# TensorFlow's type of each numpy type, and the TensorProto field its values travel in.
TYPES = {
    np.float32: (types_pb2.DT_FLOAT, "float_val"), np.float64: (types_pb2.DT_DOUBLE, "double_val"),
    np.int32: (types_pb2.DT_INT32, "int_val"), np.int16: (types_pb2.DT_INT16, "int_val"),
    np.int8: (types_pb2.DT_INT8, "int_val"), np.uint8: (types_pb2.DT_UINT8, "int_val"),
    np.uint16: (types_pb2.DT_UINT16, "int_val"), np.int64: (types_pb2.DT_INT64, "int64_val"),
    np.uint32: (types_pb2.DT_UINT32, "uint32_val"), np.uint64: (types_pb2.DT_UINT64, "uint64_val"),
    np.bool_: (types_pb2.DT_BOOL, "bool_val"), np.float16: (types_pb2.DT_HALF, "half_val"),
    np.object_: (types_pb2.DT_STRING, "string_val"),
}
ORT_TYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64,
             "tensor(int32)": np.int32, "tensor(int16)": np.int16, "tensor(int8)": np.int8,
             "tensor(uint8)": np.uint8, "tensor(uint16)": np.uint16,
             "tensor(int64)": np.int64, "tensor(uint32)": np.uint32,
             "tensor(uint64)": np.uint64, "tensor(bool)": np.bool_,
             "tensor(float16)": np.float16, "tensor(string)": np.object_}


def proto(a, content):
    """A TensorProto of `a`: its bytes in tensor_content, or its values in the typed field."""
    dtype, field = TYPES[a.dtype.type]
    p = tensor_pb2.TensorProto(dtype=dtype, tensor_shape=tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in a.shape]))
    if a.dtype == np.object_:
        p.string_val.extend(s.encode() for s in a.ravel())
    elif content:
        p.tensor_content = a.tobytes()
    elif a.dtype == np.float16:
        p.half_val.extend(a.ravel().view(np.uint16).tolist())
    else:
        getattr(p, field).extend(a.ravel().tolist())
    return p


def array(p):
    """A TensorProto's values, from the field TF Serving writes them in."""
    (np_type, (_, field)), = [(t, v) for t, v in TYPES.items() if v[0] == p.dtype]
    shape = [d.size for d in p.tensor_shape.dim]
    values = getattr(p, field)
    if np_type == np.float16:
        return np.array(values, np.uint16).view(np.float16).reshape(shape)
    if np_type == np.object_:
        return np.array([v.decode() for v in values], object).reshape(shape)
    return np.array(values, np_type).reshape(shape)


def fails(call, request, code, said):
    try:
        call(request, metadata=auth)
    except grpc.RpcError as e:
        assert (e.code(), e.details()) == (code, said), (e.code(), e.details(), said)
        return
    sys.exit(f"no error where TF Serving says {code}: {said!r}")


def spec(**kw):
    return model_pb2.ModelSpec(name=kw.pop("model", name), **kw)


rng = np.random.default_rng(5)
feed = {}
for i in session.get_inputs():
    t = ORT_TYPES[i.type]
    shape = [3 if not isinstance(d, int) else d for d in i.shape]
    if t == np.object_:
        feed[i.name] = np.array([f"s{k}" for k in range(int(np.prod(shape)))], object).reshape(shape)
    elif t == np.bool_:
        feed[i.name] = rng.integers(0, 2, size=shape).astype(np.bool_)
    else:
        feed[i.name] = (rng.normal(size=shape) * 20).astype(t)
want = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))


def same(got, expected):
    if expected.dtype == object:
        return list(got.ravel()) == [str(v) for v in expected.ravel()]
    return got.shape == expected.shape and np.allclose(got.astype(np.float64),
                                                       expected.astype(np.float64), atol=1e-5)


# Predict: tensor_content and typed fields alike, every output or the filtered ones.
for content in [True, False]:
    request = predict_pb2.PredictRequest(model_spec=spec())
    for k, a in feed.items():
        request.inputs[k].CopyFrom(proto(a, content))
    answer = prediction.Predict(request, metadata=auth)
    assert answer.model_spec.name == name and answer.model_spec.version.value == 1, answer.model_spec
    assert answer.model_spec.signature_name == "serving_default", answer.model_spec
    assert set(answer.outputs) == set(want), answer.outputs.keys()
    for k, expected in want.items():
        assert same(array(answer.outputs[k]), expected), (k, array(answer.outputs[k]), expected)
first = next(iter(want))
request.output_filter.append(first)
request.model_spec.signature_name = "serving_default"
request.model_spec.version.value = 1
assert list(prediction.Predict(request, metadata=auth).outputs) == [first]
if key:
    print(f"tf grpc {name}: Predict through the gateway")
    sys.exit(0)

# The same inputs over REST, on the same port.
rest_body = json.dumps({"inputs": {k: a.tolist() for k, a in feed.items()}}).encode()
if all(a.dtype.kind == "f" for a in feed.values()):
    rest = json.loads(urllib.request.urlopen(urllib.request.Request(
        f"http://{addr}/v1/models/{name}:predict", data=rest_body)).read())["outputs"]
    rest = rest if isinstance(rest, dict) else {first: rest}
    for k, expected in want.items():
        assert np.allclose(rest[k], expected, atol=1e-5), (k, rest[k], expected)

# Metadata: the one signature, as TF Serving packs it.
meta = prediction.GetModelMetadata(get_model_metadata_pb2.GetModelMetadataRequest(
    model_spec=spec(), metadata_field=["signature_def"]))
assert meta.model_spec.name == name and meta.model_spec.version.value == 1, meta.model_spec
signatures = get_model_metadata_pb2.SignatureDefMap()
assert meta.metadata["signature_def"].Unpack(signatures)
(signature_name, signature), = signatures.signature_def.items()
assert signature_name == "serving_default", signature_name
assert set(signature.inputs) == set(feed) and set(signature.outputs) == set(want), signature
for k, a in feed.items():
    info = signature.inputs[k]
    assert info.name == k and info.dtype == TYPES[a.dtype.type][0], info
    assert info.tensor_shape.dim[0].size in (-1, a.shape[0]), info
rest_meta = json.loads(urllib.request.urlopen(f"http://{addr}/v1/models/{name}/metadata").read())
method = signature.method_name
assert method == rest_meta["metadata"]["signature_def"]["signature_def"]["serving_default"][
    "method_name"], rest_meta

# Status: version 1, available.
status = models.GetModelStatus(get_model_status_pb2.GetModelStatusRequest(model_spec=spec()))
(version,) = status.model_version_status
assert (version.version, version.state, version.status.error_code) == (
    1, get_model_status_pb2.ModelVersionStatus.AVAILABLE, 0), status

# Classify and Regress, where the signature's method is theirs.
x_name = next(iter(feed))
rows = feed[x_name]


def examples(values=None):
    items = []
    for row in (rows if values is None else values):
        feature = feature_pb2.Feature(float_list=feature_pb2.FloatList(value=list(row)))
        items.append(example_pb2.Example(features=feature_pb2.Features(feature={x_name: feature})))
    return input_pb2.Input(example_list=input_pb2.ExampleList(examples=items))


C = classification_pb2.ClassificationRequest
R = regression_pb2.RegressionRequest
if method == "tensorflow/serving/classify":
    got = prediction.Classify(C(model_spec=spec(), input=examples()))
    scores = [[c.score for c in r.classes] for r in got.result.classifications]
    assert np.allclose(scores, want[first], atol=1e-5), (scores, want[first])
    assert got.model_spec.signature_name == "serving_default", got.model_spec
    fails(prediction.Regress, R(model_spec=spec(), input=examples()), grpc.StatusCode.INVALID_ARGUMENT,
          "Expected regression signature method_name to be tensorflow/serving/regress. "
          "Was: tensorflow/serving/classify")
    ints = input_pb2.Input(example_list=input_pb2.ExampleList(examples=[example_pb2.Example(
        features=feature_pb2.Features(feature={x_name: feature_pb2.Feature(
            int64_list=feature_pb2.Int64List(value=[1, 2, 3, 4]))}))]))
    fails(prediction.Classify, C(model_spec=spec(), input=ints), grpc.StatusCode.INVALID_ARGUMENT,
          f"Name: <unknown>, Key: {x_name}, Index: 0.  Data types don't match. Data type: int64 "
          "but expected type: float")
    fails(prediction.Classify, C(model_spec=spec(), input=input_pb2.Input()),
          grpc.StatusCode.INVALID_ARGUMENT, "Input is empty.")
    fails(prediction.Classify, C(model_spec=spec(signature_name="nope"), input=examples()),
          grpc.StatusCode.INVALID_ARGUMENT, "No signature was found with the name: nope")
    fails(prediction.Classify, C(input=examples()), grpc.StatusCode.INVALID_ARGUMENT,
          "Missing ModelSpec")
elif method == "tensorflow/serving/regress":
    context = example_pb2.Example()
    with_context = input_pb2.Input(example_list_with_context=input_pb2.ExampleListWithContext(
        examples=examples().example_list.examples, context=context))
    got = prediction.Regress(R(model_spec=spec(), input=with_context))
    values = [r.value for r in got.result.regressions]
    assert np.allclose(values, want[first].ravel(), atol=1e-5), (values, want[first])
    fails(prediction.Classify, C(model_spec=spec(), input=examples()),
          grpc.StatusCode.INVALID_ARGUMENT,
          "Expected classification signature method_name to be tensorflow/serving/classify. "
          "Was: tensorflow/serving/regress")
else:
    fails(prediction.Classify, C(model_spec=spec(), input=examples([[1.0]])),
          grpc.StatusCode.INVALID_ARGUMENT,
          "Expected classification signature method_name to be tensorflow/serving/classify. "
          "Was: tensorflow/serving/predict")

# TF Serving's errors, codes and texts.
IA, NF, FP = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
              grpc.StatusCode.FAILED_PRECONDITION)
P = predict_pb2.PredictRequest


def predict(model_spec=None, inputs=None, **kw):
    r = P(model_spec=model_spec if model_spec is not None else spec(), **kw)
    for k, p in (inputs if inputs is not None else {k: proto(a, True) for k, a in feed.items()}).items():
        r.inputs[k].CopyFrom(p)
    return r


fails(prediction.Predict, P(), IA, "Missing ModelSpec")
fails(prediction.Predict, predict(spec(model="")), IA, "ModelSpec has no name specified.")
fails(prediction.Predict, predict(spec(model="nope")), NF,
      "Servable not found for request: Latest(nope)")
v2 = spec()
v2.version.value = 2
fails(prediction.Predict, predict(v2), NF, f"Servable not found for request: Specific({name}, 2)")
fails(prediction.Predict, predict(spec(version_label="stable")), IA,
      "Unrecognized servable version label: stable")
fails(prediction.Predict, predict(spec(signature_name="nope")), FP,
      'Serving signature key "nope" not found.')
names = ",".join(sorted(feed))
fails(prediction.Predict, predict(inputs={}), IA,
      f"input size does not match signature: 0!={len(feed)} len({{}}) != len({{{names}}}). "
      f"Sent extra: {{}}. Missing but required: {{{names}}}.")
extra = {k: proto(a, True) for k, a in feed.items()}
extra["zz"] = proto(rows, True)
fails(prediction.Predict, predict(inputs=extra), IA,
      f"input size does not match signature: {len(feed) + 1}!={len(feed)} len({{{names},zz}}) "
      f"!= len({{{names}}}). Sent extra: {{zz}}. Missing but required: {{}}.")
if len(feed) == 1:
    fails(prediction.Predict, predict(inputs={"zz": proto(rows, True)}), IA,
          f"Signature input alias: {x_name}(feed name: {x_name}) not found in request and no "
          "default value provided. Inputs expected to be in the request {zz}, or default input "
          "alias set: ")
    short = proto(rows, True)
    short.tensor_content = short.tensor_content[:-1]
    fails(prediction.Predict, predict(inputs={x_name: short}), IA, f"tensor parsing error: {x_name}")
    if rows.dtype == np.float32:
        fails(prediction.Predict, predict(inputs={x_name: proto(rows.astype(np.float64), True)}),
              IA, "Expects arg[0] to be float but double is provided")
fails(prediction.Predict, predict(output_filter=["nope"]), IA,
      "output tensor alias not found in signature: nope Outputs expected to be in the set "
      f"{{{','.join(sorted(want))}}}.")
fails(prediction.Predict, predict(output_filter=[first, first]), IA,
      f"duplicate output tensor alias: {first}")
M = get_model_metadata_pb2.GetModelMetadataRequest
fails(prediction.GetModelMetadata, M(model_spec=spec()), IA,
      "GetModelMetadataRequest must specify at least one metadata_field")
fails(prediction.GetModelMetadata, M(model_spec=spec(), metadata_field=["signature_def", "x"]),
      IA, "Metadata field x is not supported")
fails(prediction.GetModelMetadata, M(model_spec=spec(model="nope"), metadata_field=["signature_def"]),
      NF, "Servable not found for request: Latest(nope)")
S = get_model_status_pb2.GetModelStatusRequest
fails(models.GetModelStatus, S(), IA, "Missing ModelSpec")
fails(models.GetModelStatus, S(model_spec=v2), NF, f"Could not find version 2 of model {name}")
fails(models.GetModelStatus, S(model_spec=spec(model="nope")), NF,
      "Could not find any versions of model nope")
# MultiInference: TF Serving's checks of the tasks, then the one signature evaluated once.
MI, T = inference_pb2.MultiInferenceRequest, inference_pb2.InferenceTask
CLASSIFY, REGRESS = "tensorflow/serving/classify", "tensorflow/serving/regress"
fails(prediction.MultiInference, MI(), IA, "ModelSpec has no name specified.")
fails(prediction.MultiInference, MI(tasks=[T(model_spec=spec(model="nope"), method_name=REGRESS)]),
      NF, "Servable not found for request: Latest(nope)")
fails(prediction.MultiInference, MI(tasks=[T(model_spec=spec(), method_name=REGRESS),
                                           T(model_spec=spec(model="other"), method_name=REGRESS)]),
      IA, "All ModelSpecs in a MultiInferenceRequest must access the same model name.")
fails(prediction.MultiInference, MI(tasks=[T(model_spec=spec(), method_name=CLASSIFY),
                                           T(model_spec=spec(signature_name="serving_default"),
                                             method_name=REGRESS)]),
      IA, "Duplicate evaluation of signature: serving_default")
fails(prediction.MultiInference, MI(tasks=[T(model_spec=spec(signature_name="s"), method_name=REGRESS)]),
      IA, "Requested signature not found in model graph: s")
fails(prediction.MultiInference, MI(tasks=[T(model_spec=spec(), method_name="tensorflow/serving/predict")]),
      grpc.StatusCode.UNIMPLEMENTED, "Unsupported signature method_name: tensorflow/serving/predict")
if method in (CLASSIFY, REGRESS):
    got = prediction.MultiInference(MI(tasks=[T(model_spec=spec(), method_name=method)],
                                       input=examples()))
    (result,) = got.results
    assert (result.model_spec.name, result.model_spec.version.value) == (name, 1), result
    if method == CLASSIFY:
        scores = [[c.score for c in r.classes] for r in result.classification_result.classifications]
        assert np.allclose(scores, want[first], atol=1e-5), (scores, want[first])
    else:
        values = [r.value for r in result.regression_result.regressions]
        assert np.allclose(values, want[first].ravel(), atol=1e-5), (values, want[first])
other = REGRESS if method == CLASSIFY else CLASSIFY
kind = "regression" if other == REGRESS else "classification"
sample = examples() if method in (CLASSIFY, REGRESS) else examples([[1.0]])
fails(prediction.MultiInference, MI(tasks=[T(model_spec=spec(), method_name=other)], input=sample),
      IA, f"Expected {kind} signature method_name to be {other}. Was: {method}")
fails(models.HandleReloadConfigRequest, model_management_pb2.ReloadConfigRequest(),
      grpc.StatusCode.UNIMPLEMENTED,
      "HandleReloadConfigRequest is not supported by this server (kep's model server)")

print(f"tf grpc {name}: as TF Serving answers")
