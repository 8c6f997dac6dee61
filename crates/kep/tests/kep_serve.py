"""What the Chromium scripts (browser.py, console_page.py, docs_page.py) share: `kep serve`
on port 0 with its data in a temp dir, the JSON lines they report, and waiting for a step.
"""
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

LISTENERS = ("admin", "live", "adapter", "messaging", "gateway", "media")


def emit(event, **fields):
    print(json.dumps({"event": event, **fields}), flush=True)


def until(what, check, timeout=30.0):
    """`check()`'s first truthy answer within `timeout` s; else the step failed: exit 1."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    emit("failed", step=what)
    sys.exit(1)


@contextlib.contextmanager
def serving(kep, *args, host="127.0.0.1", **env):
    """`kep serve` with every listener on a free port of `host`, `env` added to its
    environment: yields (its environment, its URLs by listener, `https` where it speaks
    TLS); stopped by SIGTERM on the way out."""
    data = tempfile.mkdtemp()
    env = dict(os.environ, KEP_DATA_DIR=data, KEP_LOG="warn", **env)
    ports = [a for listener in LISTENERS for a in (f"--{listener}-addr", f"{host}:0")]
    server = subprocess.Popen([kep, "serve", *args, *ports], env=env, stdout=subprocess.DEVNULL)
    try:
        # urls.json is written before addresses.json.
        path = os.path.join(data, "addresses.json")
        until("kep serve starts", lambda: os.path.exists(path))
        yield env, json.load(open(os.path.join(data, "urls.json")))
    finally:
        server.terminate()
        server.wait()


def publish_and_show(browser, live, token):
    """alice publishes Chromium's fake camera on the demo page at `live`, and bob's page
    shows it (`token(who)` mints their join tokens): (alice's page, bob's page, the stream
    id), after emitting `published` and `decoding`."""
    alice = browser.new_page()
    alice.goto(f"{live}/demo?token={token('alice')}")
    stream_id = until("alice publishes", lambda: alice.evaluate(
        "window.kep.error ? 'error: ' + window.kep.error : window.kep.published?.streamId"))
    if isinstance(stream_id, str):
        emit("failed", step="alice publishes", why=stream_id)
        sys.exit(1)
    emit("published", streamId=stream_id)
    bob = browser.new_page()
    bob.goto(f"{live}/demo?token={token('bob')}&publish=0")
    frames = until("bob decodes alice's video",
                   lambda: (n := bob.evaluate("window.kep.framesDecoded()")) > 30 and n)
    # Each tile is captioned with whose video it is.
    tiles = bob.locator("#videos figure.tile figcaption").all_inner_texts()
    emit("decoding", frames=frames, tiles=tiles)
    return alice, bob, stream_id
