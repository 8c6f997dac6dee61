#!/usr/bin/env python3
"""WHIP/WHEP test peer for kep's integration tests (aiortc based).

Subcommands: publish, subscribe. Events are JSON lines on stdout.
Exit codes: 0 ok / closed / deleted / SIGTERM, 2 error, 3 refused (non-201).
All media stays on 127.0.0.1: no STUN/TURN, host candidates forced to loopback.
"""
import argparse
import asyncio
import fractions
import json
import math
import os
import signal
import struct
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

# Until the event loop installs its handler, SIGTERM still means "exit 0".
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))

import aioice.ice  # noqa: E402 (after the handler: importing aiortc is slow)
import av
from aiortc import (RTCBundlePolicy, RTCConfiguration, RTCPeerConnection,
                    RTCRtpSender, RTCSessionDescription)
from aiortc.mediastreams import (AudioStreamTrack, MediaStreamError,
                                 VideoStreamTrack)
from aiortc.rtcdtlstransport import RTCDtlsTransport
from aiortc.rtp import RtcpByePacket, RtcpPacket

# aioice gathers one host candidate per address returned by this function (and
# deliberately skips 127.0.0.1); offer loopback only so no traffic leaves lo.
aioice.ice.get_host_addresses = lambda use_ipv4=True, use_ipv6=True: ["127.0.0.1"]
# RFC 7675 consent freshness: aioice checks every 5 s and gives up after 6
# misses (~30 s) before the connection turns "failed". A server that vanishes
# without a DTLS close_notify should be noticed within a few seconds instead.
aioice.ice.CONSENT_INTERVAL, aioice.ice.CONSENT_FAILURES = 1, 5

DEBUG = False
BYE_HOOKS = []  # callbacks run when any RTCP BYE arrives on any DTLS transport


def emit(event, **fields):
    print(json.dumps({"event": event, **fields}), flush=True)


def debug_candidates(label, sdp):
    if DEBUG:
        for line in sdp.splitlines():
            if line.startswith("a=candidate") or line.startswith("c="):
                print(f"[{label}] {line}", file=sys.stderr, flush=True)


# aiortc routes a BYE only to receivers whose SSRC it knows, so a sendonly
# publisher never hears it; peek at every RTCP compound packet instead.
_orig_handle_rtcp = RTCDtlsTransport._handle_rtcp_data


async def _handle_rtcp_data(self, data):
    try:
        if any(isinstance(p, RtcpByePacket) for p in RtcpPacket.parse(data)):
            if DEBUG:
                print("[rtcp] BYE received", file=sys.stderr, flush=True)
            for hook in BYE_HOOKS:
                hook()
    except ValueError:
        pass
    await _orig_handle_rtcp(self, data)


RTCDtlsTransport._handle_rtcp_data = _handle_rtcp_data


# --- HTTP (stdlib only: aiortc does not depend on aiohttp) -------------------
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # ignore *_proxy env


def _http(method, url, token, body=None):
    req = urllib.request.Request(url, data=body, method=method)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    if body is not None:
        req.add_header("Content-Type", "application/sdp")
    try:
        with _opener.open(req, timeout=10) as resp:
            return resp.status, resp.headers, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read().decode(errors="replace")


async def http(method, url, token, body=None):
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, _http, method, url, token, body)


# --- synthetic media ----------------------------------------------------------
class ColorVideoTrack(VideoStreamTrack):
    """320x240 @ 30 fps; luma/chroma change every frame so the encoder works."""

    def __init__(self):
        super().__init__()
        self.n = 0

    async def recv(self):
        pts, time_base = await self.next_timestamp()
        frame = av.VideoFrame(320, 240, "yuv420p")
        self.n += 1
        values = ((self.n * 3) % 256, (self.n * 5) % 256, 255 - (self.n * 7) % 256)
        for plane, value in zip(frame.planes, values):
            plane.update(bytes([value]) * plane.buffer_size)
        frame.pts, frame.time_base = pts, time_base
        return frame


class ToneAudioTrack(AudioStreamTrack):
    """450 Hz sine, 48 kHz s16 mono: exactly 9 periods per 20 ms frame, so one
    buffer repeats. (The base class paces silence at 8 kHz; we pace ourselves.)"""

    PCM = b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * 450 * i / 48000)))
                   for i in range(960))

    async def recv(self):
        if self.readyState != "live":
            raise MediaStreamError
        if hasattr(self, "_pts"):
            self._pts += 960
            await asyncio.sleep(self._start + self._pts / 48000 - time.time())
        else:
            self._start, self._pts = time.time(), 0
        frame = av.AudioFrame(format="s16", layout="mono", samples=960)
        frame.planes[0].update(self.PCM)
        frame.pts, frame.sample_rate = self._pts, 48000
        frame.time_base = fractions.Fraction(1, 48000)
        return frame


def tamper_fingerprint(sdp):
    """The offer with a certificate fingerprint that is not ours: kep's DTLS handshake
    with us must fail."""
    def flip(line):
        if not line.startswith("a=fingerprint:"):
            return line
        head, digest = line.rsplit(" ", 1)
        return f"{head} {'00' if digest[:2] != '00' else '11'}{digest[2:]}"
    return "\r\n".join(flip(l) for l in sdp.split("\r\n"))


def directions(sdp):
    """Each media section's direction in an SDP, in order."""
    names = ("sendrecv", "sendonly", "recvonly", "inactive")
    return [next((l[2:] for l in section.split("\r\n") if l[2:] in names), "sendrecv")
            for section in sdp.split("\r\nm=")[1:]]


# --- one WHIP/WHEP session -------------------------------------------------------
class Session:
    def __init__(self, args):
        self.args = args
        # max-bundle: one transport for every section, as RFC 9725 §4.2 asks of WHIP
        # clients; aiortc's default (balanced) gathers one per kind.
        policy = RTCBundlePolicy.MAX_BUNDLE if args.max_bundle else RTCBundlePolicy.BALANCED
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[], bundlePolicy=policy))
        self.done = asyncio.Event()
        self.stopping = False  # set once we end the session ourselves
        self.location = None
        self.pc.on("connectionstatechange", self.on_state)

    def on_state(self):
        state = self.pc.connectionState
        if state == "connected":
            emit("connected")
        elif state in ("failed", "closed", "disconnected"):
            self.remote_closed(state)

    def remote_closed(self, state):
        if not self.stopping and not self.done.is_set():
            emit("closed", state=state)
            self.done.set()

    async def negotiate(self):
        # aiortc's setLocalDescription waits until ICE gathering is complete.
        await self.pc.setLocalDescription(await self.pc.createOffer())
        offer = self.pc.localDescription.sdp
        if self.args.bad_fingerprint:
            offer = tamper_fingerprint(offer)
        debug_candidates("offer", offer)
        status, headers, body = await http("POST", self.args.url, self.args.token, offer.encode())
        if status != 201:
            emit("refused", status=status, body=body)
            return False
        loc = headers.get("Location")
        self.location = urllib.parse.urljoin(self.args.url, loc) if loc else None
        emit("answered", location=loc, stream_id=headers.get("Kep-Stream-Id"),
             directions=directions(body))
        debug_candidates("answer", body)
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=body, type="answer"))
        return True

    async def run(self):
        if not await self.negotiate():
            return 3
        try:
            await asyncio.wait_for(self.done.wait(), self.args.seconds)
        except asyncio.TimeoutError:
            self.stopping = True
            status = None
            if self.location:
                status, _, _ = await http("DELETE", self.location, self.args.token)
            emit("deleted", status=status)
        return 0


def setup_publish(session, args):
    if not (args.video or args.audio):
        args.video = args.audio = True
    pc = session.pc
    direction = "sendrecv" if args.sendrecv else "sendonly"
    if args.video:
        t = pc.addTransceiver(ColorVideoTrack(), direction=direction)
        codecs = RTCRtpSender.getCapabilities("video").codecs
        t.setCodecPreferences(sorted(codecs, key=lambda c: c.mimeType != "video/VP8"))
    if args.audio:
        pc.addTransceiver(ToneAudioTrack(), direction=direction)
    # A BYE from the server means it ended our ingest session.
    BYE_HOOKS.append(lambda: session.remote_closed("bye"))


def setup_subscribe(session, args):
    pc = session.pc
    pc.addTransceiver("video", direction="recvonly")
    pc.addTransceiver("audio", direction="recvonly")
    session.consumers = []

    @pc.on("track")
    def on_track(track):
        session.consumers.append(asyncio.ensure_future(consume(session, track, args.frames)))


async def consume(session, track, want_frames):
    kind, every = track.kind, (10 if track.kind == "video" else 50)
    count, stalled = 0, False
    while True:
        try:
            # No stall timeout before the first frame: only a track that has
            # delivered and then goes quiet counts as stalled.
            frame = await asyncio.wait_for(track.recv(), 1.0 if count else None)
        except asyncio.TimeoutError:
            if not stalled:
                emit("stalled", kind=kind, count=count)
                stalled = True
            continue
        except MediaStreamError:
            if not session.stopping:  # our own close/DELETE ends tracks too: not news
                emit("ended", kind=kind, count=count)
            return
        if stalled:
            emit("resumed", kind=kind, count=count)
            stalled = False
        count += 1
        if count == 1 or count % every == 0:
            extra = {"width": frame.width, "height": frame.height} if kind == "video" else {}
            emit("frame", kind=kind, count=count, **extra)
        if kind == "video" and want_frames and count == want_frames:
            emit("enough", count=count)


async def peer_main(args, setup):
    session = Session(args)
    setup(session, args)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    body = asyncio.ensure_future(session.run())
    stopper = asyncio.ensure_future(stop.wait())
    rc = 0
    try:
        await asyncio.wait({body, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if body.done():
            rc = body.result()
        else:
            emit("terminated")
            body.cancel()
    except Exception as exc:  # network errors, bad SDP, ...
        emit("error", message=f"{type(exc).__name__}: {exc}")
        rc = 2
    session.stopping = True
    try:
        await asyncio.wait_for(session.pc.close(), 5)
    except Exception:
        pass
    return rc


def main():
    global DEBUG
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--debug", action="store_true", help="print SDP candidate lines to stderr")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("publish", "subscribe"):
        p = sub.add_parser(name)
        p.add_argument("--url", required=True)
        p.add_argument("--token", required=True)
        p.add_argument("--seconds", type=float, default=None,
                       help="DELETE the session after S seconds (default: run until closed)")
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS)
        p.add_argument("--bad-fingerprint", action="store_true",
                       help="offer a fingerprint that is not our certificate's")
        p.add_argument("--max-bundle", action="store_true",
                       help="bundle policy max-bundle (default: aiortc's balanced)")
        if name == "publish":
            p.add_argument("--video", action="store_true")
            p.add_argument("--audio", action="store_true")
            p.add_argument("--sendrecv", action="store_true",
                           help="offer sendrecv sections, as many WHIP clients do")
        else:
            p.add_argument("--frames", type=int, default=None)
    args = ap.parse_args()
    DEBUG = args.debug
    setup = setup_publish if args.cmd == "publish" else setup_subscribe
    rc = asyncio.run(peer_main(args, setup))
    sys.stdout.flush()
    # Skip interpreter teardown: a urllib call stuck in the executor or a
    # lingering codec thread must never keep a test waiting.
    os._exit(rc)


if __name__ == "__main__":
    main()
