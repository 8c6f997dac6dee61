"""kep's framework worker: runs SavedModels in TensorFlow and TorchScript in libtorch for
the model server, which talks to it over stdin/stdout, or, inside the model server's own
process, calls `call`.

A frame is a u32 (little-endian) length, that many bytes of a JSON header, then the raw
bytes of the tensors the header lists (`tensors`: datatype, shape, size), one after the
other. Requests carry an `id`; each answer carries its request's. Requests run on a thread
pool (TensorFlow and torch release the GIL while they compute), so answers may come back in
any order. The worker exits when its stdin closes.
"""

import concurrent.futures
import json
import os
import struct
import sys
import threading
import traceback

WRITING = threading.Lock()

# Element types by their KServe v2 names, and as numpy reads them (little-endian).
NUMPY = {
    "BOOL": "?", "UINT8": "<u1", "UINT16": "<u2", "UINT32": "<u4", "UINT64": "<u8",
    "INT8": "<i1", "INT16": "<i2", "INT32": "<i4", "INT64": "<i8",
    "FP16": "<f2", "FP32": "<f4", "FP64": "<f8",
}
# TensorFlow's and torch's names for the same types (`dtype.name`, `str(dtype)` less `torch.`).
FRAMEWORK_TYPES = {
    "bool": "BOOL", "uint8": "UINT8", "uint16": "UINT16", "uint32": "UINT32",
    "uint64": "UINT64", "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64",
    "float16": "FP16", "float32": "FP32", "float64": "FP64",
}

models = {}


class Unavailable(Exception):
    def __init__(self, framework, package):
        super().__init__(framework, package)
        self.framework, self.package = framework, package


class Unreadable(Exception):
    pass


class Refused(Exception):
    """A run the worker cannot start (no such model or signature): no traceback to log."""


def one_line(e):
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def datatype(name, what):
    try:
        return FRAMEWORK_TYPES[name]
    except KeyError:
        raise Unreadable(f"{what}: element type {name} has no KServe v2 datatype") from None


def import_framework(framework, package, module):
    """The framework's module (and numpy), imported on the first load of its format."""
    for name, pip in ((module, package), ("numpy", "numpy")):
        try:
            __import__(name)
        except ImportError:
            traceback.print_exc()
            raise Unavailable(framework, pip) from None
    imported = sys.modules[module]
    # The instance's CPUs, as a container would bound them (`--threads`).
    threads = int(os.environ.get("KEP_FRAMEWORK_THREADS", "0"))
    if threads and module == "tensorflow":
        imported.config.threading.set_intra_op_parallelism_threads(threads)
        imported.config.threading.set_inter_op_parallelism_threads(threads)
    elif threads and module == "torch":
        imported.set_num_threads(threads)
    return imported


def decode(spec, data):
    np = sys.modules["numpy"]
    if spec["datatype"] == "BYTES":
        items, at = [], 0
        while at < len(data):
            (n,) = struct.unpack_from("<I", data, at)
            items.append(bytes(data[at + 4 : at + 4 + n]))
            at += 4 + n
        array = np.empty(len(items), dtype=object)
        array[:] = items
        return array.reshape(spec["shape"])
    return np.frombuffer(data, dtype=NUMPY[spec["datatype"]]).reshape(spec["shape"])


def encode(array):
    """An answer's tensor: its header entry and its bytes."""
    np = sys.modules["numpy"]
    if array.dtype == object or array.dtype.kind == "S":
        data = b"".join(struct.pack("<I", len(x)) + bytes(x) for x in array.reshape(-1))
        name = "BYTES"
    else:
        name = datatype(array.dtype.name, "an output")
        data = np.ascontiguousarray(array, dtype=NUMPY[name]).tobytes()
    return {"datatype": name, "shape": list(array.shape), "size": len(data)}, data


class SavedModel:
    def __init__(self, path):
        tf = import_framework("TensorFlow", "tensorflow-cpu", "tensorflow")
        from tensorflow.core.protobuf import saved_model_pb2

        self.tf = tf
        try:
            # Kept: the signature functions only hold the loaded object's variables weakly.
            self.loaded = tf.saved_model.load(path)
            proto = saved_model_pb2.SavedModel()
            with open(os.path.join(path, "saved_model.pb"), "rb") as f:
                proto.ParseFromString(f.read())
        except Exception as e:
            traceback.print_exc()
            raise Unreadable(one_line(e)) from None
        graphs = [g for g in proto.meta_graphs if "serve" in g.meta_info_def.tags]
        recorded = (graphs or proto.meta_graphs)[0].signature_def
        self.signatures = {}
        names = sorted(self.loaded.signatures, key=lambda n: (n != "serving_default", n))
        for name in names:
            fn = self.loaded.signatures[name]
            method = recorded[name].method_name if name in recorded else ""
            inputs = fn.structured_input_signature[1]
            self.signatures[name] = {
                "name": name,
                "method": method or None,
                "inputs": [spec(name, k, v) for k, v in sorted(inputs.items())],
                "outputs": [spec(name, k, v) for k, v in sorted(fn.structured_outputs.items())],
            }

    def run(self, signature, inputs, outputs):
        fn = self.loaded.signatures[signature]
        dtypes = fn.structured_input_signature[1]
        given = {k: self.tf.constant(v, dtype=dtypes[k].dtype) for k, v in inputs.items()}
        result = fn(**given)
        return [result[n].numpy() for n in outputs]


def spec(signature, name, t):
    what = f"{signature}: {name}"
    if t.shape.rank is None:
        raise Unreadable(f"{what} has no known rank")
    dtype = "BYTES" if t.dtype.name == "string" else datatype(t.dtype.name, what)
    shape = [-1 if d is None else d for d in t.shape.as_list()]
    return {"name": name, "datatype": dtype, "shape": shape}


class TorchScript:
    def __init__(self, path, inputs):
        self.torch = import_framework("PyTorch", "torch", "torch")
        torch = self.torch
        try:
            self.module = torch.jit.load(path, map_location="cpu").eval()
            args = [a.name for a in self.module.forward.schema.arguments[1:]]
        except Exception as e:
            traceback.print_exc()
            raise Unreadable(one_line(e)) from None
        if [i["name"] for i in inputs] != args:
            raise Unreadable(
                f"the inputs declared ({', '.join(i['name'] for i in inputs)}) are not "
                f"forward's arguments: {', '.join(args)}"
            )
        if any(i["datatype"] not in NUMPY for i in inputs):
            raise Unreadable("TorchScript takes no BYTES input")
        # TorchScript records no output types or shapes: two runs, each -1 as 1 then 2.
        runs = []
        for size in (1, 2):
            shapes = [[size if d < 0 else d for d in i["shape"]] for i in inputs]
            zeros = [torch.zeros(s, dtype=torch_type(i["datatype"])) for s, i in zip(shapes, inputs)]
            try:
                runs.append(self.call(zeros))
            except Unreadable:
                raise
            except Exception as e:
                traceback.print_exc()
                why = one_line(e)
                raise Unreadable(f"forward fails on zeros of the declared inputs: {why}") from None
        (one, two) = runs
        if [n for n, _ in one] != [n for n, _ in two] or any(
            a.dtype != b.dtype or a.dim() != b.dim() for (_, a), (_, b) in zip(one, two)
        ):
            raise Unreadable("forward's outputs change names, types or ranks with the batch size")
        outputs = []
        for (name, a), (_, b) in zip(one, two):
            dtype = datatype(str(a.dtype).removeprefix("torch."), f"forward: {name}")
            shape = [x if x == y else -1 for x, y in zip(a.shape, b.shape)]
            outputs.append({"name": name, "datatype": dtype, "shape": shape})
        forward = {"name": "forward", "method": None, "inputs": inputs, "outputs": outputs}
        self.signatures = {"forward": forward}

    def call(self, args):
        with self.torch.inference_mode():
            out = self.module(*args)
        is_tensor = lambda t: isinstance(t, self.torch.Tensor)
        if is_tensor(out):
            return [("OUTPUT__0", out)]
        if isinstance(out, (tuple, list)) and all(map(is_tensor, out)):
            return [(f"OUTPUT__{i}", t) for i, t in enumerate(out)]
        if isinstance(out, dict) and all(isinstance(k, str) and is_tensor(t) for k, t in out.items()):
            return list(out.items())
        raise Unreadable(
            f"forward returns {type(out).__name__}, not a tensor, a tuple or list of tensors, "
            "or a dict of them"
        )

    def run(self, _signature, inputs, outputs):
        names = [i["name"] for i in self.signatures["forward"]["inputs"]]
        result = dict(self.call([self.torch.from_numpy(inputs[n]) for n in names]))
        return [result[n].detach().cpu().numpy() for n in outputs]


def torch_type(name):
    floats = {"BOOL": "bool", "FP16": "float16", "FP32": "float32", "FP64": "float64"}
    return getattr(sys.modules["torch"], floats.get(name, name.lower()))


def handle(header, payload):
    op = header["op"]
    if op == "load_saved_model":
        model = SavedModel(header["path"])
    elif op == "load_torchscript":
        model = TorchScript(header["path"], header["inputs"])
    else:
        model = models.get(header["key"])
        if model is None:
            raise Refused(f"no model is loaded under {header['key']}")
        if header["signature"] not in model.signatures:
            raise Refused(
                f"no signature {header['signature']}: the model's are {', '.join(model.signatures)}"
            )
        # Views of the payload, not copies; writable, as torch.from_numpy wants.
        inputs, at, view = {}, 0, memoryview(payload)
        for t in header["tensors"]:
            inputs[t["name"]] = decode(t, view[at : at + t["size"]])
            at += t["size"]
        answers = [encode(a) for a in model.run(header["signature"], inputs, header["outputs"])]
        return {"tensors": [h for h, _ in answers]}, [d for _, d in answers]
    models[header["key"]] = model
    return {"result": list(model.signatures.values())}, []


def answer(header, payload):
    """The answer's frame, as the parts to write one after the other."""
    try:
        reply, blobs = handle(header, payload)
    except Unavailable as e:
        error = {"kind": "unavailable", "framework": e.framework, "package": e.package}
        reply, blobs = {"error": error}, []
    except Unreadable as e:
        reply, blobs = {"error": {"kind": "unreadable", "message": str(e)}}, []
    except Refused as e:
        reply, blobs = {"error": {"kind": "failed", "message": str(e)}}, []
    except Exception as e:
        traceback.print_exc()
        reply, blobs = {"error": {"kind": "failed", "message": one_line(e)}}, []
    return frame(dict(reply, id=header["id"]), blobs)


def frame(header, blobs):
    head = json.dumps(header).encode()
    return [struct.pack("<I", len(head)) + head, *blobs]


def call(request):
    """A request's frame (a writable memoryview) in, its answer's frame out: the worker run
    inside the model server's process."""
    (length,) = struct.unpack_from("<I", request)
    header = json.loads(bytes(request[4 : 4 + length]))
    return b"".join(answer(header, request[4 + length :]))


def send(parts):
    with WRITING:
        for data in parts:
            OUT.write(data)
        OUT.flush()


def reply_to(header, payload):
    send(answer(header, payload))


def read_exact(n):
    buf = bytearray(n)
    view, at = memoryview(buf), 0
    while at < n:
        got = IN.readinto(view[at:])
        if not got:
            raise EOFError
        at += got
    return buf


def main():
    global OUT, IN
    # The protocol owns the real stdout; whatever else prints (a model's own `print`) goes
    # to stderr, the instance's log, rather than into the frames.
    OUT = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    IN = sys.stdin.buffer
    send(frame({"id": 0, "result": {"python": sys.version.split()[0]}}, []))
    pool = concurrent.futures.ThreadPoolExecutor(8)
    try:
        while True:
            (length,) = struct.unpack("<I", read_exact(4))
            header = json.loads(read_exact(length))
            payload = read_exact(sum(t["size"] for t in header.get("tensors", [])))
            pool.submit(reply_to, header, payload)
    except EOFError:
        # kep closed the pipe: nobody waits for the calls still under way.
        os._exit(0)


if __name__ == "__main__":
    main()
