"""Stands in for a real `tritonserver` or `tensorflow_model_server` on the PATH, which this
machine cannot install: it takes the real server's command line, checks the model layout
kep made for it as the real server reads it, then serves the model with `kep model-server`.

    native_server.py KEP tritonserver --model-repository=DIR --http-port=P ...
    native_server.py KEP tensorflow_model_server --rest_api_port=P --model_config_file=F ...

Triton's `config.pbtxt` is parsed with Triton's own ModelConfig schema (shipped in the
tritonclient package), TF Serving's model config file with TF Serving's own
ModelServerConfig (generated from the vendored protos); a SavedModel made from a frozen
graph is read by tract's SavedModel reader, a real one (with variables) and TorchScript by
their frameworks. Any mismatch exits non-zero with the reason in the instance log.
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

from google.protobuf import text_format

kep, program, args = sys.argv[1], sys.argv[2], sys.argv[3:]
flags = dict(a.removeprefix("--").split("=", 1) for a in args)


def serve(protocol, name, model, port, *extra):
    os.execv(kep, [kep, "model-server", "--protocol", protocol, "--name", name,
                   "--model", model, "--port", port, "--engine", "tract", *extra])


def policy(p):
    """A version policy message (Triton's or TF Serving's) as kep's `--version-policy`."""
    kind = p.WhichOneof("policy_choice")
    if kind == "latest":
        return json.dumps({"latest": p.latest.num_versions})
    if kind == "specific":
        return json.dumps({"specific": list(p.specific.versions)})
    return json.dumps({"all": True})


def archived(folder, versions):
    """The numbered version folders under `folder`, links followed, as one .tar.gz."""
    archive = os.path.join(tempfile.mkdtemp(), "model.tar.gz")
    subprocess.run(["tar", "czhf", archive, "-C", folder, *versions], check=True)
    return archive


if program == "tritonserver":
    assert flags.pop("http-address") == "127.0.0.1", flags
    assert flags.pop("allow-grpc") == "false" and flags.pop("allow-metrics") == "false", flags
    repository, port = flags.pop("model-repository"), flags.pop("http-port")
    assert not flags, f"flags tritonserver lacks: {flags}"
    import tritonclient

    path = os.path.join(os.path.dirname(tritonclient.__file__), "grpc", "model_config_pb2.py")
    spec = importlib.util.spec_from_file_location("model_config_pb2", path)
    model_config = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model_config)
    [name] = os.listdir(repository)
    folder = os.path.join(repository, name)
    with open(os.path.join(folder, "config.pbtxt")) as f:
        config = text_format.Parse(f.read(), model_config.ModelConfig())
    assert config.name == name, config
    print(f"config.pbtxt: {text_format.MessageToString(config, as_one_line=True)}", flush=True)
    versions = sorted((v for v in os.listdir(folder) if v.isdigit()), key=int)
    file = {"onnxruntime_onnx": "model.onnx", "tensorflow_graphdef": "model.graphdef",
            "tensorflow_savedmodel": "model.savedmodel", "pytorch_libtorch": "model.pt"}[config.platform]
    for v in versions:
        assert os.path.exists(os.path.join(folder, v, file)), (v, file)
    extra = ["--version-policy", policy(config.version_policy)]
    if config.platform == "tensorflow_savedmodel":
        serve("kserve", name, archived(folder, versions), port, *extra)
    assert versions == ["1"], versions
    model = os.path.join(folder, "1", file)
    if config.platform == "pytorch_libtorch":
        datatype = {v: k.removeprefix("TYPE_") for k, v in model_config.DataType.items()}
        inputs = [{"name": i.name, "datatype": datatype[i.data_type], "shape": list(i.dims)}
                  for i in config.input]
        extra += ["--inputs", json.dumps(inputs)]
    serve("kserve", name, model, port, *extra)
elif program == "tensorflow_model_server":
    assert flags.pop("port") == "0" and flags.pop("grpc_socket_path"), flags
    config_file, port = flags.pop("model_config_file"), flags.pop("rest_api_port")
    assert not flags, f"flags tensorflow_model_server lacks: {flags}"
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "..", "kep-model-server", "tests"))
    import tf_serving_apis  # noqa: F401  (generates the module below)
    from tensorflow_serving.config import model_server_config_pb2

    with open(config_file) as f:
        server = text_format.Parse(f.read(), model_server_config_pb2.ModelServerConfig())
    [config] = server.model_config_list.config
    assert config.model_platform == "tensorflow", config
    base, name = config.base_path, config.name
    versions = sorted((v for v in os.listdir(base) if v.isdigit()), key=int)
    for v in versions:
        assert os.path.isfile(os.path.join(base, v, "saved_model.pb")), v
    extra = ["--version-policy", policy(config.model_version_policy)]
    if os.path.exists(os.path.join(base, versions[-1], "variables", "variables.index")):
        serve("tfserving", name, archived(base, versions), port, *extra)
    # A frozen graph's: its one version, no variables.
    assert versions == ["1"], versions
    serve("tfserving", name, os.path.join(base, "1", "saved_model.pb"), port, *extra)
else:
    sys.exit(f"no such server: {program}")
