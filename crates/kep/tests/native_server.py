"""Stands in for a real `tritonserver` or `tensorflow_model_server` on the PATH, which this
machine cannot install: it takes the real server's command line, checks the model layout
kep made for it as the real server reads it, then serves the model with `kep model-server`.

    native_server.py KEP tritonserver --model-repository=DIR --http-port=P ...
    native_server.py KEP tensorflow_model_server --rest_api_port=P --model_name=M ...

Triton's `config.pbtxt` is parsed with Triton's own ModelConfig schema (shipped in the
tritonclient package); the SavedModel is read by tract's SavedModel reader. Any mismatch
exits non-zero with the reason in the instance log.
"""
import importlib.util
import os
import sys

kep, program, args = sys.argv[1], sys.argv[2], sys.argv[3:]
flags = dict(a.removeprefix("--").split("=", 1) for a in args)


def serve(protocol, name, model, port):
    os.execv(kep, [kep, "model-server", "--protocol", protocol, "--name", name,
                   "--model", model, "--port", port, "--engine", "tract"])


if program == "tritonserver":
    assert flags.pop("http-address") == "127.0.0.1", flags
    assert flags.pop("allow-grpc") == "false" and flags.pop("allow-metrics") == "false", flags
    repository, port = flags.pop("model-repository"), flags.pop("http-port")
    assert not flags, f"flags tritonserver lacks: {flags}"
    import tritonclient
    from google.protobuf import text_format

    path = os.path.join(os.path.dirname(tritonclient.__file__), "grpc", "model_config_pb2.py")
    spec = importlib.util.spec_from_file_location("model_config_pb2", path)
    model_config = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model_config)
    [name] = os.listdir(repository)
    with open(os.path.join(repository, name, "config.pbtxt")) as f:
        config = text_format.Parse(f.read(), model_config.ModelConfig())
    assert config.name == name, config
    file = {"onnxruntime_onnx": "model.onnx", "tensorflow_graphdef": "model.graphdef"}[config.platform]
    model = os.path.join(repository, name, "1", file)
    assert os.path.exists(model), model
    print(f"config.pbtxt: {text_format.MessageToString(config, as_one_line=True)}", flush=True)
    serve("kserve", name, model, port)
elif program == "tensorflow_model_server":
    assert flags.pop("port") == "0" and flags.pop("grpc_socket_path"), flags
    name, base, port = flags.pop("model_name"), flags.pop("model_base_path"), flags.pop("rest_api_port")
    assert not flags, f"flags tensorflow_model_server lacks: {flags}"
    version = max(int(v) for v in os.listdir(base) if v.isdigit())
    saved = os.path.join(base, str(version))
    assert os.path.isdir(os.path.join(saved, "variables")), saved
    serve("tfserving", name, os.path.join(saved, "saved_model.pb"), port)
else:
    sys.exit(f"no such server: {program}")
