#!/usr/bin/env python3
"""Headless Chromium on kep's demo page and browser SDK, with real media.

Run inside a network namespace of the test's own (only `lo`), so that no packet of the
browser's goes anywhere but loopback: `unshare -n` + `ip link set lo up`. It starts
`kep serve`, mints join tokens with the CLI, opens two pages (one publishes Chromium's
fake camera, the other shows it), then acts on the room with the CLI. Prints JSON lines;
exits 0 when every step held, 1 with the failed step otherwise.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

from playwright.sync_api import sync_playwright

KEP = sys.argv[1]


def emit(event, **fields):
    print(json.dumps({"event": event, **fields}), flush=True)


def until(what, check, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    emit("failed", step=what)
    sys.exit(1)


def main():
    data = tempfile.mkdtemp()
    env = dict(os.environ, KEP_DATA_DIR=data, KEP_ADMIN_TOKEN="op", KEP_LOG="warn")
    addrs = [f"--{l}-addr" for l in ("admin", "live", "adapter", "messaging", "gateway", "media")]
    args = [a for flag in addrs for a in (flag, "127.0.0.1:0")]
    server = subprocess.Popen([KEP, "serve", "--only", "live", *args], env=env)
    try:
        run(data, env)
    finally:
        server.terminate()
        server.wait()


def cli(env, *args):
    out = subprocess.run([KEP, "live", *args], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout) if out.stdout.strip() else None


def run(data, env):
    path = os.path.join(data, "addresses.json")
    addrs = until("kep serve starts", lambda: os.path.exists(path) and json.load(open(path)))
    live = f"http://{addrs['live']}"
    req = urllib.request.Request(
        f"http://{addrs['admin']}/admin/v1/live/services", method="POST",
        data=b'{"serviceId": "demo"}',
        headers={"Authorization": "Bearer op", "Content-Type": "application/json"})
    secrets = json.load(urllib.request.urlopen(req))
    token = lambda who: cli(env, "token", "stage", who, "--service-id", "demo",
                            "--service-secret", secrets["serviceSecret"])["token"]
    cli(env, "provision", "--service-id", "demo", "--admin-secret", secrets["adminSecret"])
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=[
            "--no-sandbox", "--use-fake-device-for-media-stream",
            "--use-fake-ui-for-media-stream", "--allow-loopback-in-peer-connection"])
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
        emit("decoding", frames=frames)
        listing = cli(env, "participants", "stage")
        emit("listed", participants=listing["participants"])

        # Room.InactiveStream: alice hears of it, bob's frames stop.
        cli(env, "inactivate", "stage", f"alice:{stream_id}")
        until("alice gets InactivatedStream", lambda: alice.evaluate(
            "window.kep.events.some(e => e.event === 'InactivatedStream')"))
        def stopped():
            before = bob.evaluate("window.kep.framesDecoded()")
            time.sleep(1.0)
            return bob.evaluate("window.kep.framesDecoded()") == before
        until("bob's frames stop", stopped)
        emit("stopped")

        # Room.DestroyRoom: both pages hear of it.
        cli(env, "destroy", "stage")
        for name, page in (("alice", alice), ("bob", bob)):
            until(f"{name} gets RoomDestroyed", lambda: page.evaluate(
                "window.kep.events.some(e => e.event === 'RoomDestroyed')"))
        emit("destroyed")
        browser.close()


if __name__ == "__main__":
    main()
