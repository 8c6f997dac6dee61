"""Calls Triton's logging and trace settings on a running `triton` model server the way a
Triton user does, with `tritonclient.http` and `tritonclient.grpc` in turn, and checks each
answer against Triton's rules and texts; exits non-zero, saying why.

    check_settings.py HTTP_URL GRPC_TARGET NAME [KEY]

HTTP_URL is the server's for REST (host:port[/base path]), GRPC_TARGET its host:port for
gRPC, NAME the served model, KEY an endpoint key when both are the gateway's. What one
protocol changes the other reads, and every read is made several times: through the
gateway, a change must reach every instance.
"""
import sys

import tritonclient.grpc as grpc
import tritonclient.http as http
from fails import fails

http_url, grpc_target, name = sys.argv[1:4]
key = sys.argv[4] if len(sys.argv) > 4 else None
LOG = {"log_file": "", "log_info": True, "log_warning": True, "log_error": True,
       "log_verbose_level": 0, "log_format": "default"}
TRACE = {"trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1",
         "log_frequency": "0", "trace_file": "", "trace_mode": "triton"}


class Http:
    protocol = "http"

    def __init__(self):
        self.client = http.InferenceServerClient(http_url)
        self.headers = {"Authorization": f"Bearer {key}"} if key else None

    def log(self, change=None):
        if change is None:
            return self.client.get_log_settings(headers=self.headers)
        return self.client.update_log_settings(change, headers=self.headers)

    def trace(self, model=None, change=None):
        if change is None:
            return self.client.get_trace_settings(model, headers=self.headers)
        return self.client.update_trace_settings(model, change, headers=self.headers)


class Grpc:
    """Answers as REST's JSON, for comparison."""
    protocol = "grpc"

    def __init__(self):
        self.client = grpc.InferenceServerClient(grpc_target)
        self.headers = {"authorization": f"Bearer {key}"} if key else None

    def log(self, change=None):
        if change is None:
            got = self.client.get_log_settings(headers=self.headers, as_json=True)
        else:
            got = self.client.update_log_settings(change, headers=self.headers, as_json=True)
        return {k: next(iter(v.values())) for k, v in got["settings"].items()}

    def trace(self, model=None, change=None):
        if change is None:
            got = self.client.get_trace_settings(model, headers=self.headers, as_json=True)
        else:
            got = self.client.update_trace_settings(model, change, headers=self.headers,
                                                    as_json=True)
        return {k: v.get("value", []) if k == "trace_level" else v.get("value", [""])[0]
                for k, v in got["settings"].items()}


def agreed(read):
    """What `read` answers, the same six times over."""
    answers = [read() for _ in range(6)]
    assert all(a == answers[0] for a in answers), answers
    return answers[0]


for one, other in [(Http(), Grpc()), (Grpc(), Http())]:
    rest = one.protocol == "http"
    assert agreed(one.log) == LOG, one.log()
    changed = {**LOG, "log_verbose_level": 2, "log_info": False}
    assert one.log({"log_verbose_level": 2, "log_info": False}) == changed
    assert agreed(other.log) == changed, other.log()
    fails(lambda: one.log({"log_format": "xml"}),
          f"invalid argument for {'--' if rest else ''}log_format, got: xml")
    fails(lambda: one.log({"log_file": "/tmp/kep.log"}),
          "log file location can not be updated through network protocol")
    if rest:
        fails(lambda: one.log({"log_warning": "no"}), "attempt to access JSON non-boolean as boolean")
        assert one.log({"log_warning": None}) == changed  # null: left as it is
    else:
        fails(lambda: one.log({"log_warning": None}), "expect boolean for 'log_warning'")
    assert one.log({"log_verbose_level": 0, "log_info": True, "log_format": "ISO8601"}) == {
        **LOG, "log_format": "ISO8601"}
    assert one.log({"log_format": "default"}) == LOG

    # The model's settings fall back on the server's where it sets none.
    assert agreed(lambda: one.trace(name)) == TRACE
    assert one.trace(name, {"trace_rate": "10"}) == {**TRACE, "trace_rate": "10"}
    assert agreed(other.trace) == TRACE
    assert one.trace(None, {"trace_rate": "20", "trace_count": "5"})["trace_count"] == "5"
    model = {**TRACE, "trace_rate": "10", "trace_count": "5"}
    assert agreed(lambda: other.trace(name)) == model, other.trace(name)
    assert one.trace(name, {"trace_rate": None}) == {**model, "trace_rate": "20"}

    fails(lambda: one.trace(None, {"trace_level": ["TIMESTAMPS"]}),
          "Attempting to set invalid trace setting :trace file name is not given")
    fails(lambda: one.trace(name, {"trace_level": ["TENSORS"], "trace_rate": "0"}),
          "Attempting to set invalid trace setting :sample rate must be non-zero")
    fails(lambda: one.trace(None, {"trace_level": ["OFF", "TENSORS"]}),
          "Expect only one trace level 'OFF' is specified")
    fails(lambda: one.trace(None, {"trace_rate": "abc"}), "Unable to parse 'trace_rate', got: abc")
    fails(lambda: one.trace(None, {"log_frequency": "4294967296"}),
          "Unable to parse 'log_frequency', value is out of range [ 0, 4294967295 ], got: 4294967296")
    fails(lambda: one.trace(None, {"trace_count": "-2"}),
          f"Unable to parse 'trace_count'. Expecting value >= -1, got:{'' if rest else ' '}-2")
    fails(lambda: one.trace(None, {"trace_file": "/tmp/kep.trace"}),
          "trace file location can not be updated through network protocol")
    fails(lambda: one.trace(name + "-nope", {"trace_rate": "1"}),
          f"Request for unknown model: '{name}-nope' is not found")
    if rest:
        fails(lambda: one.trace(None, {"trace_rate": ["1"]}),
              "attempt to access JSON non-string as string")
    else:
        fails(lambda: one.trace(None, {"trace_rate": ["1", "2"]}),
              "expect only 1 value for 'trace_rate'")
    # Refused changes changed nothing; clearing the server's goes back to Triton's defaults.
    assert agreed(lambda: other.trace(name)) == {**model, "trace_rate": "20"}
    assert one.trace(None, {"trace_rate": None, "trace_count": None}) == TRACE
    assert agreed(lambda: other.trace(name)) == TRACE

print(f"triton settings {name}: as Triton answers them")
