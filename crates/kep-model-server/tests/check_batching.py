"""Calls a model server that batches (Triton's dynamic batcher) the way tritonclient users
do, many at once, and compares each answer with ONNX Runtime's for the caller's own rows.
Exits non-zero, saying why, on the first difference.

    check_batching.py HOST:PORT NAME MODEL CALLERS

CALLERS at once over REST (binary tensors and JSON), then over gRPC, then CALLERS requests
on one gRPC stream (answers in the order sent), then callers whose tensors travel in system
shared memory; 1 to 4 rows each. Prints the statistics' inference and execution counts.
"""
import concurrent.futures
import os
import queue
import sys

import numpy as np
import onnxruntime as ort
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

at, name, path, callers = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
x_spec, y_spec = session.get_inputs()[0], session.get_outputs()[0]


def rows(seed):
    n = seed % 4 + 1
    return np.random.default_rng(seed).normal(size=(n, x_spec.shape[1])).astype(np.float32)


def same(got, x, what):
    want = session.run([y_spec.name], {x_spec.name: x})[0]
    if got is None or got.shape != want.shape or not np.allclose(got, want, atol=1e-5):
        sys.exit(f"{what}: {got} where ONNX Runtime gives {want}")


def over_http(seed):
    x = rows(seed)
    client = httpclient.InferenceServerClient(at)
    given = httpclient.InferInput(x_spec.name, list(x.shape), "FP32")
    given.set_data_from_numpy(x, binary_data=seed % 2 == 0)
    same(client.infer(name, [given]).as_numpy(y_spec.name), x, f"REST call {seed}")


def over_grpc(seed):
    x = rows(seed)
    client = grpcclient.InferenceServerClient(at)
    given = grpcclient.InferInput(x_spec.name, list(x.shape), "FP32")
    given.set_data_from_numpy(x)
    same(client.infer(name, [given]).as_numpy(y_spec.name), x, f"gRPC call {seed}")


def in_shared_memory(seed):
    x = rows(seed)
    client = httpclient.InferenceServerClient(at)
    want = session.run([y_spec.name], {x_spec.name: x})[0]
    tag = f"{os.getpid()}_{seed}"
    inside = shm.create_shared_memory_region(f"in_{tag}", f"/kep_bin_{tag}", x.nbytes)
    outside = shm.create_shared_memory_region(f"out_{tag}", f"/kep_bout_{tag}", want.nbytes)
    try:
        shm.set_shared_memory_region(inside, [x])
        client.register_system_shared_memory(f"in_{tag}", f"/kep_bin_{tag}", x.nbytes)
        client.register_system_shared_memory(f"out_{tag}", f"/kep_bout_{tag}", want.nbytes)
        given = httpclient.InferInput(x_spec.name, list(x.shape), "FP32")
        given.set_shared_memory(f"in_{tag}", x.nbytes)
        asked = httpclient.InferRequestedOutput(y_spec.name, binary_data=True)
        asked.set_shared_memory(f"out_{tag}", want.nbytes)
        client.infer(name, [given], outputs=[asked])
        got = shm.get_contents_as_numpy(outside, np.float32, want.shape)
        same(got, x, f"shared-memory call {seed}")
        client.unregister_system_shared_memory(f"in_{tag}")
        client.unregister_system_shared_memory(f"out_{tag}")
    finally:
        shm.destroy_shared_memory_region(inside)
        shm.destroy_shared_memory_region(outside)


with concurrent.futures.ThreadPoolExecutor(callers) as pool:
    for call, seeds in [
        (over_http, range(callers)),
        (over_grpc, range(callers, 2 * callers)),
        (in_shared_memory, range(2 * callers, 3 * callers)),
    ]:
        list(pool.map(call, seeds))

# One stream, every request sent before any answer is read: answers in the order sent.
client = grpcclient.InferenceServerClient(at)
answers = queue.Queue()
client.start_stream(lambda result, error: answers.put((result, error)))
sent = [rows(seed) for seed in range(3 * callers, 4 * callers)]
for i, x in enumerate(sent):
    given = grpcclient.InferInput(x_spec.name, list(x.shape), "FP32")
    given.set_data_from_numpy(x)
    client.async_stream_infer(name, [given], request_id=f"s{i}")
got = [answers.get(timeout=60) for _ in sent]
client.stop_stream()
for i, ((result, error), x) in enumerate(zip(got, sent)):
    if error is not None or result.get_response().id != f"s{i}":
        sys.exit(f"stream request {i}: {error or result.get_response().id}")
    same(result.as_numpy(y_spec.name), x, f"stream request {i}")

stats = httpclient.InferenceServerClient(at).get_inference_statistics(name)["model_stats"][0]
print(f"batched answers match ONNX Runtime's: {stats['inference_count']} inferences in "
      f"{stats['execution_count']} runs")
