"""Calls Triton's system shared memory extension on a running `triton` model server the way
a Triton user does, with `tritonclient.utils.shared_memory` and `tritonclient.http` or
`tritonclient.grpc`, and checks each answer against ONNX Runtime's; exits non-zero, saying
why.

    check_shm.py http|grpc URL NAME MODEL [KEY]

URL is the server's (host:port), NAME the served model, MODEL its ONNX file (one FP32
input and output, any batch), KEY an endpoint key when URL is the gateway's.
"""
import os
import sys

import numpy as np
import onnxruntime as ort
import tritonclient.utils.shared_memory as shm
from fails import fails

protocol, url, name, path = sys.argv[1:5]
key = sys.argv[5] if len(sys.argv) > 5 else None
if protocol == "grpc":
    import tritonclient.grpc as client_lib
    headers = {"authorization": f"Bearer {key}"} if key else None
else:
    import tritonclient.http as client_lib
    headers = {"Authorization": f"Bearer {key}"} if key else None
client = client_lib.InferenceServerClient(url)
session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
x_spec, out_spec = session.get_inputs()[0], session.get_outputs()[0]


def status(region=""):
    got = client.get_system_shared_memory_status(region, headers=headers, **(
        {"as_json": True} if protocol == "grpc" else {}))
    # gRPC answers a map by name, with numbers as JSON strings and zeros left out; REST a
    # list.
    if protocol == "grpc":
        got = [{**r, "offset": int(r.get("offset", 0)), "byte_size": int(r["byte_size"])}
               for r in got.get("regions", {}).values()]
    return sorted(got, key=lambda r: r["name"])


rng = np.random.default_rng(5)
shape = [3 if not isinstance(d, int) else d for d in x_spec.shape]
x = rng.normal(size=shape).astype(np.float32)
want = session.run([out_spec.name], {x_spec.name: x})[0]
tag = f"{os.getpid()}_{protocol}"
# The output region starts 64 bytes into its object, its tensor 16 bytes into the region.
in_key, out_key = f"/kep_in_{tag}", f"/kep_out_{tag}"
in_handle = shm.create_shared_memory_region(f"in_{tag}", in_key, x.nbytes)
out_handle = shm.create_shared_memory_region(f"out_{tag}", out_key, 64 + 16 + want.nbytes)
try:
    client.unregister_system_shared_memory(headers=headers)
    shm.set_shared_memory_region(in_handle, [x])
    client.register_system_shared_memory("input", in_key, x.nbytes, headers=headers)
    client.register_system_shared_memory("output", out_key, 16 + want.nbytes, offset=64,
                                         headers=headers)
    assert status() == [
        {"name": "input", "key": in_key, "offset": 0, "byte_size": x.nbytes},
        {"name": "output", "key": out_key, "offset": 64, "byte_size": 16 + want.nbytes},
    ], status()
    assert [r["name"] for r in status("output")] == ["output"], status("output")
    fails(lambda: status("nope"), "Unable to find system shared memory region: 'nope'")
    fails(lambda: client.register_system_shared_memory("input", in_key, 4, headers=headers),
          "shared memory region 'input' already in manager")
    fails(lambda: client.register_system_shared_memory("big", in_key, x.nbytes + 1,
                                                       headers=headers),
          "failed to register shared memory region 'big': invalid args")
    fails(lambda: client.register_system_shared_memory("gone", "/kep_no_such_key", 4,
                                                       headers=headers),
          "Unable to open shared memory region: '/kep_no_such_key'")

    def infer(in_size=x.nbytes, out_region="output", out_size=want.nbytes, out_offset=16):
        inp = client_lib.InferInput(x_spec.name, shape, "FP32")
        inp.set_shared_memory("input", in_size)
        out = client_lib.InferRequestedOutput(out_spec.name)
        if out_region:
            out.set_shared_memory(out_region, out_size, offset=out_offset)
        return client.infer(name, [inp], outputs=[out], headers=headers)

    # Input and output in shared memory: the answer says only the output's type and shape.
    result = infer()
    output = result.get_output(out_spec.name)
    shape_of = output["shape"] if protocol == "http" else list(output.shape)
    datatype = output["datatype"] if protocol == "http" else output.datatype
    assert datatype == "FP32" and [int(d) for d in shape_of] == list(want.shape), output
    got = shm.get_contents_as_numpy(out_handle, np.float32, want.shape, offset=64 + 16)
    assert np.allclose(got, want, atol=1e-5), (got, want)
    # Input in shared memory, output in the answer; the region rewritten between calls.
    x2 = (x * 2).astype(np.float32)
    shm.set_shared_memory_region(in_handle, [x2])
    want2 = session.run([out_spec.name], {x_spec.name: x2})[0]
    got = infer(out_region=None).as_numpy(out_spec.name)
    assert np.allclose(got, want2, atol=1e-5), (got, want2)

    # Limits: a byte short of the input, an output region a byte short, a region past its end.
    fails(lambda: infer(in_size=x.nbytes - 1), "bytes of binary data where shape")
    fails(lambda: infer(out_size=want.nbytes - 1),
          f"shared memory size specified with the request for output '{out_spec.name}' "
          f"({want.nbytes - 1} bytes) should be at least {want.nbytes} bytes to hold the results")
    fails(lambda: infer(out_offset=17),
          "Invalid offset + byte size for shared memory region: 'output'")
    fails(lambda: infer(out_region="nope"), "Unable to find shared memory region: 'nope'")

    # CUDA shared memory as a Triton without GPU support answers it: none, none registered.
    cuda_status = client.get_cuda_shared_memory_status(headers=headers)
    assert (cuda_status == [] if protocol == "http" else not cuda_status.regions), cuda_status
    fails(lambda: client.get_cuda_shared_memory_status("input", headers=headers),
          "The region named 'input' is registered as system shared memory, not CUDA shared memory")
    fails(lambda: client.get_cuda_shared_memory_status("nope", headers=headers),
          "Unable to find cuda shared memory region: 'nope'")
    handle = "AAAA" if protocol == "http" else b"\0" * 64
    fails(lambda: client.register_cuda_shared_memory("gpu", handle, 0, 4, headers=headers),
          "failed to register CUDA shared memory region: 'gpu', GPUs not supported")
    client.unregister_cuda_shared_memory(headers=headers)
    client.unregister_cuda_shared_memory("input", headers=headers)
    assert len(status()) == 2, status()

    client.unregister_system_shared_memory("output", headers=headers)
    assert [r["name"] for r in status()] == ["input"], status()
    client.unregister_system_shared_memory(headers=headers)
    assert status() == [], status()
    fails(lambda: infer(out_region=None), "Unable to find shared memory region: 'input'")
finally:
    shm.destroy_shared_memory_region(in_handle)
    shm.destroy_shared_memory_region(out_handle)

print(f"system shared memory {protocol} {name}: as Triton answers it")
