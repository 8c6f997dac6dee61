"""TF Serving's Python API, generated from the model server's vendored protos with
`grpc_tools.protoc` (as the `tensorflow-serving-api` package is made) into a temporary
folder put first on `sys.path`: the checks import `tensorflow_serving.apis` after this."""
import glob
import os
import subprocess
import sys
import tempfile

protos = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "proto")
out = tempfile.mkdtemp()
files = [os.path.relpath(f, protos) for pattern in ["tensorflow/**/*.proto",
                                                     "tensorflow_serving/**/*.proto"]
         for f in glob.glob(os.path.join(protos, pattern), recursive=True)]
subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", protos,
                f"--python_out={out}", f"--grpc_python_out={out}", *files], check=True)
sys.path.insert(0, out)
