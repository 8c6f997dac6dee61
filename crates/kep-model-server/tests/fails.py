"""What the Triton checks (check_triton.py, check_shm.py) share: a call that must fail with
Triton's words."""
import sys

from tritonclient.utils import InferenceServerException


def fails(call, said):
    try:
        call()
    except InferenceServerException as e:
        assert said in e.message(), f"{said!r} not in {e.message()!r}"
        return e
    sys.exit(f"no error where Triton says {said!r}")
