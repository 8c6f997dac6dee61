#!/usr/bin/env python3
"""Headless Chromium on kep's demo page and browser SDK, with real media.

Run inside a network namespace of the test's own (only `lo`), so that no packet of the
browser's goes anywhere but loopback: `unshare -n` + `ip link set lo up`. It starts
`kep serve`, mints join tokens with the CLI, opens two pages (one publishes Chromium's
fake camera, the other shows it), then acts on the room with the CLI. Prints JSON lines;
exits 0 when every step held, 1 with the failed step otherwise.
"""
import json
import subprocess
import sys
import time
import urllib.request

from playwright.sync_api import sync_playwright

from kep_serve import emit, publish_and_show, serving, until

KEP = sys.argv[1]


def main():
    with serving(KEP, "--only", "live", KEP_ADMIN_TOKEN="op") as (env, urls):
        run(env, urls)


def cli(env, *args):
    out = subprocess.run([KEP, "live", *args], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout) if out.stdout.strip() else None


def run(env, urls):
    live = urls["live"]
    req = urllib.request.Request(
        f"{urls['admin']}/admin/v1/live/services", method="POST",
        data=b'{"serviceId": "demo"}',
        headers={"Authorization": "Bearer op", "Content-Type": "application/json"})
    secrets = json.load(urllib.request.urlopen(req))
    token = lambda who, room="stage": cli(env, "token", room, who, "--service-id", "demo",
                            "--service-secret", secrets["serviceSecret"])["token"]
    cli(env, "provision", "--service-id", "demo", "--admin-secret", secrets["adminSecret"])
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=[
            "--no-sandbox", "--use-fake-device-for-media-stream",
            "--use-fake-ui-for-media-stream", "--allow-loopback-in-peer-connection",
            # Every simulcast layer asked for, whatever the camera's size (Chromium keeps
            # two of three below 960x540, and the fake camera is 640x480).
            "--force-fieldtrials=WebRTC-LegacySimulcastLayerLimit/Disabled/"])
        alice, bob, stream_id = publish_and_show(browser, live, token)
        listing = cli(env, "participants", "stage")
        emit("listed", participants=listing["participants"])

        # Bandwidth: alice's one video is brought down to what reaches bob (REMB).
        before = alice.evaluate(TARGET_BITRATE)
        hold_media_port(alice)
        after = until("alice's encoder fits bob's link",
                      lambda: (bps := alice.evaluate(TARGET_BITRATE)) < 400_000 and bps, timeout=60)
        release_media_port()
        emit("fitted", before=before, after=after)

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
        simulcast(browser, live, env, token)
        browser.close()


# A publisher's layers as it sends them now: {rid: frame width}.
LAYER_WIDTHS = """async () => {
  const widths = {};
  if (!window.kep.published) return widths;
  (await window.kep.published.pc.getStats()).forEach((r) => {
    if (r.type === "outbound-rtp" && r.kind === "video" && r.frameWidth) widths[r.rid] = r.frameWidth;
  });
  return widths;
}"""


def hold_media_port(publisher):
    """Holds what kep sends from its media port (the port of the candidate in the
    publisher's answer) to 400 kbit/s, as a narrow link to its subscribers would."""
    sdp = publisher.evaluate("window.kep.published.pc.remoteDescription.sdp")
    port = next(l.split()[5] for l in sdp.splitlines() if l.startswith("a=candidate:"))
    for command in ("qdisc add dev lo root handle 1: htb default 2",
                    "class add dev lo parent 1: classid 1:1 htb rate 400kbit",
                    "class add dev lo parent 1: classid 1:2 htb rate 10gbit",
                    f"filter add dev lo parent 1: protocol ip u32 match ip sport {port} 0xffff flowid 1:1"):
        subprocess.run(["tc", *command.split()], check=True, capture_output=True)


def release_media_port():
    subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root"], check=True)


# What a publisher's video encoder aims at now, in bits per second.
TARGET_BITRATE = """async () => {
  let bps = 0;
  (await window.kep.published.pc.getStats()).forEach((r) => {
    if (r.type === "outbound-rtp" && r.kind === "video") bps = r.targetBitrate || 0;
  });
  return bps;
}"""


def simulcast(browser, live, env, token):
    """Simulcast and bandwidth estimation: carol sends three layers; dave gets the best on
    an open loopback, a smaller one while kep's media port is held to 400 kbit/s, and
    the best again once it is not."""
    carol = browser.new_page()
    carol.goto(f"{live}/demo?token={token('carol', 'layers')}&simulcast=1")
    until("carol publishes three layers", lambda: len(carol.evaluate(LAYER_WIDTHS)) == 3)
    listing = cli(env, "participants", "layers")
    emit("simulcast", participants=listing["participants"])
    dave = browser.new_page()
    dave.goto(f"{live}/demo?token={token('dave', 'layers')}&publish=0")

    def width(compare):
        widths = carol.evaluate(LAYER_WIDTHS)
        got = dave.evaluate("window.kep.frameWidths()")
        return got and got[0] and compare(got[0], max(widths.values())) and (got[0], widths)
    # Up from the estimate's start to the best layer's rate: under a loaded 2-core CI
    # machine's build this once took over 30 s.
    got, widths = until("dave gets the best layer",
                        lambda: width(lambda w, best: w == best), timeout=90)
    emit("best layer", width=got, layers=widths)

    hold_media_port(carol)
    got, widths = until("dave moves to a smaller layer",
                        lambda: width(lambda w, best: w < best), timeout=60)
    emit("smaller layer", width=got, layers=widths)
    release_media_port()
    # The estimate climbs back by steps after a hold; on a loaded 2-core CI machine it once
    # took longer than 60 s to reach the best layer's rate.
    got, widths = until("dave is back on the best layer",
                        lambda: width(lambda w, best: w == best), timeout=120)
    emit("best layer again", width=got, layers=widths)
    cli(env, "destroy", "layers")


if __name__ == "__main__":
    main()
