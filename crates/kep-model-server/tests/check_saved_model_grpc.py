"""Calls TF Serving's gRPC API on a `tensorflow-serving` deployment of the SavedModel
`make_saved_models.py` makes (`dense`: versions 1 and 2, signatures `serving_default` and
`scores`, all versions loaded) as a TF Serving user does, and checks each answer against
TensorFlow's own; exits non-zero, saying why.

    check_saved_model_grpc.py ADDR KEY ANSWERS

ADDR is the gateway's host:port, KEY the endpoint's key, ANSWERS the JSON the maker printed.
"""
import json
import sys

import grpc
import numpy as np
import tensorflow as tf

import tf_serving_apis  # noqa: F401  (generates the modules below)
from tensorflow_serving.apis import (  # noqa: E402
    get_model_metadata_pb2, get_model_status_pb2, model_pb2, model_service_pb2_grpc,
    predict_pb2, prediction_service_pb2_grpc)

addr, key, answers = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
auth = [("authorization", f"Bearer {key}")]
channel = grpc.insecure_channel(addr)
prediction = prediction_service_pb2_grpc.PredictionServiceStub(channel)
models = model_service_pb2_grpc.ModelServiceStub(channel)
x = np.array(answers["x"], np.float32)


def spec(version=None, signature=""):
    s = model_pb2.ModelSpec(name="dense", signature_name=signature)
    if version is not None:
        s.version.value = version
    return s


def predict(version, signature, output):
    request = predict_pb2.PredictRequest(model_spec=spec(version, signature))
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(x))
    answer = prediction.Predict(request, metadata=auth)
    return answer.model_spec, tf.make_ndarray(answer.outputs[output])


for version, signature, output, want in [
    (None, "", "y", answers["v2"]["y"]),
    (1, "", "y", answers["v1"]["y"]),
    (None, "scores", "probs", answers["v2"]["probs"]),
    (1, "scores", "probs", answers["v1"]["probs"]),
]:
    answered, got = predict(version, signature, output)
    assert answered.version.value == (version or 2), answered
    assert answered.signature_name == (signature or "serving_default"), answered
    assert np.allclose(got, np.array(want), atol=1e-5), (version, signature, got, want)

for version, signature, code, said in [
    (3, "", grpc.StatusCode.NOT_FOUND, "Servable not found for request: Specific(dense, 3)"),
    (None, "nope", grpc.StatusCode.FAILED_PRECONDITION, 'Serving signature key "nope" not found.'),
]:
    try:
        predict(version, signature, "y")
        sys.exit(f"no error for version {version}, signature {signature!r}")
    except grpc.RpcError as e:
        assert (e.code(), e.details()) == (code, said), (e.code(), e.details())

metadata = prediction.GetModelMetadata(
    get_model_metadata_pb2.GetModelMetadataRequest(model_spec=spec(1),
                                                   metadata_field=["signature_def"]),
    metadata=auth)
defs = get_model_metadata_pb2.SignatureDefMap()
metadata.metadata["signature_def"].Unpack(defs)
assert metadata.model_spec.version.value == 1, metadata.model_spec
assert {"serving_default", "scores"} <= set(defs.signature_def), defs.signature_def.keys()
assert defs.signature_def["scores"].inputs["x"].name == "scores_x:0", defs.signature_def["scores"]

status = models.GetModelStatus(
    get_model_status_pb2.GetModelStatusRequest(model_spec=spec()), metadata=auth)
assert [v.version for v in status.model_version_status] == [2, 1], status
print("SavedModel over gRPC: versions, signatures, metadata and status as TF Serving's")
