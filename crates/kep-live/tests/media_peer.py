#!/usr/bin/env python3
"""WHIP/WHEP test peer for kep's integration tests (aiortc based).

Subcommands: publish, subscribe, selftest. Events are JSON lines on stdout.
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
from aiortc import (RTCConfiguration, RTCPeerConnection, RTCRtpSender,
                    RTCSessionDescription)
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


# --- one WHIP/WHEP session -------------------------------------------------------
class Session:
    def __init__(self, args):
        self.args = args
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
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
        debug_candidates("offer", offer)
        status, headers, body = await http("POST", self.args.url, self.args.token, offer.encode())
        if status != 201:
            emit("refused", status=status, body=body)
            return False
        loc = headers.get("Location")
        self.location = urllib.parse.urljoin(self.args.url, loc) if loc else None
        emit("answered", location=loc, stream_id=headers.get("Kep-Stream-Id"))
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
    if args.video:
        t = pc.addTransceiver(ColorVideoTrack(), direction="sendonly")
        codecs = RTCRtpSender.getCapabilities("video").codecs
        t.setCodecPreferences(sorted(codecs, key=lambda c: c.mimeType != "video/VP8"))
    if args.audio:
        pc.addTransceiver(ToneAudioTrack(), direction="sendonly")
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


# --- selftest: tiny WHIP/WHEP server built from aiortc + asyncio streams ---------
class MiniServer:
    def __init__(self, token):
        from aiortc.contrib.media import MediaRelay
        self.token, self.relay = token, MediaRelay()
        self.sources, self.sessions = {}, {}  # kind -> track, id -> (pc, is_whip)
        self.bad_candidates = []
        self.next_id = 0

    def check_sdp(self, sdp):
        for line in sdp.splitlines():
            if line.startswith("a=candidate"):
                debug_candidates("server-seen", line)
                if line.split()[4] != "127.0.0.1":
                    self.bad_candidates.append(line)

    async def answer(self, offer, whip):
        self.check_sdp(offer)
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        if whip:
            @pc.on("track")
            def on_track(track):
                self.sources[track.kind] = track
                track.on("ended", lambda: self.sources.get(track.kind) is track
                         and self.sources.pop(track.kind))
                # Drain the source so frames do not pile up while nobody watches.
                sink = self.relay.subscribe(track)
                asyncio.ensure_future(self.drain(sink))
        await pc.setRemoteDescription(RTCSessionDescription(sdp=offer, type="offer"))
        if not whip:
            for t in pc.getTransceivers():
                if t.kind in self.sources:
                    pc.addTrack(self.relay.subscribe(self.sources[t.kind]))
        await pc.setLocalDescription(await pc.createAnswer())
        self.check_sdp(pc.localDescription.sdp)
        self.next_id += 1
        sid = f"s{self.next_id}"
        self.sessions[sid] = (pc, whip)
        return sid, pc.localDescription.sdp

    @staticmethod
    async def drain(track):
        try:
            while True:
                await track.recv()
        except MediaStreamError:
            pass

    async def kick(self, whip, silently=False):
        """End sessions server-side: pc.close() sends DTLS close_notify (+BYE
        for our senders); `silently` just closes the sockets, like a crash."""
        for sid, (pc, is_whip) in list(self.sessions.items()):
            if is_whip == whip:
                del self.sessions[sid]
                if silently:
                    for t in pc.getTransceivers():
                        for proto in t.receiver.transport.transport.iceGatherer._connection._protocols:
                            proto.transport.close()
                else:
                    await pc.close()

    async def handle(self, reader, writer):
        method, path, _ = (await reader.readline()).decode().split(" ", 2)
        headers = {}
        while (line := (await reader.readline()).decode().strip()):
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", 0)))
        extra, out = {}, b""
        if headers.get("authorization") != f"Bearer {self.token}":
            status, out = "401 Unauthorized", b"bad token"
        elif method == "POST" and path in ("/whip", "/whep"):
            sid, answer = await self.answer(body.decode(), path == "/whip")
            status, out = "201 Created", answer.encode()
            extra = {"Location": f"/session/{sid}", "Content-Type": "application/sdp",
                     "Kep-Stream-Id": "selftest"}
        elif method == "DELETE" and path.startswith("/session/"):
            sid = path.rsplit("/", 1)[1]
            pc, _ = self.sessions.pop(sid, (None, None))
            status = "200 OK" if pc else "404 Not Found"
            if pc:
                await pc.close()
        else:
            status = "404 Not Found"
        head = f"HTTP/1.1 {status}\r\nContent-Length: {len(out)}\r\nConnection: close\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in extra.items())
        writer.write(head.encode() + b"\r\n" + out)
        await writer.drain()
        writer.close()


class Child:
    """A publish/subscribe subprocess whose JSON events we can wait for."""

    def __init__(self, name, proc):
        self.name, self.proc, self.events = name, proc, []
        self.changed = asyncio.Event()
        asyncio.ensure_future(self.pump())

    async def pump(self):
        async for line in self.proc.stdout:
            ev = json.loads(line)
            print(f"  {self.name}: {line.decode().strip()}", flush=True)
            self.events.append(ev)
            self.changed.set()

    async def expect(self, event, timeout, **match):
        """Wait until an event like this has been printed (at any time so far)."""
        deadline = time.monotonic() + timeout
        while True:
            for ev in self.events:
                if ev["event"] == event and all(ev.get(k) == v for k, v in match.items()):
                    return ev
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), deadline - time.monotonic())
            except (asyncio.TimeoutError, ValueError):
                raise AssertionError(f"{self.name}: no {event} {match or ''} within {timeout}s")

    async def exit_code(self, timeout):
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout)
        except asyncio.TimeoutError:
            raise AssertionError(f"{self.name}: did not exit within {timeout}s")


async def selftest(args):
    server = MiniServer("secret")
    srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}"
    extra = ["--debug"] if args.debug else []

    async def spawn(name, *argv):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, os.path.abspath(__file__), *extra, *argv,
            stdout=asyncio.subprocess.PIPE)
        return Child(name, proc)

    def step(msg):
        print(f"selftest: {msg}", flush=True)

    children = []
    try:
        step("wrong token is refused with exit 3")
        bad = await spawn("pub-bad", "publish", "--url", base + "/whip", "--token", "nope")
        await bad.expect("refused", 15, status=401)
        assert await bad.exit_code(5) == 3, "refused publisher must exit 3"

        step("publisher connects")
        t0 = time.monotonic()
        pub = await spawn("pub", "publish", "--url", base + "/whip", "--token", "secret")
        children.append(pub)
        await pub.expect("answered", 15, stream_id="selftest")
        t1 = time.monotonic()
        await pub.expect("connected", 15)
        step(f"offer+answer {t1 - t0:.2f}s (incl. python start), ICE+DTLS {time.monotonic() - t1:.2f}s")

        step("subscriber receives 30 video frames")
        sub = await spawn("sub", "subscribe", "--url", base + "/whep", "--token", "secret",
                          "--frames", "30")
        children.append(sub)
        await sub.expect("enough", 30)
        assert any(e["event"] == "frame" and e["kind"] == "video" and e["count"] >= 30
                   and (e["width"], e["height"]) == (320, 240) for e in sub.events)
        await sub.expect("frame", 5, kind="audio")

        step("server ends the publisher session -> publisher closed+exit 0, subscriber stalls")
        t2 = time.monotonic()
        await server.kick(whip=True)
        await pub.expect("closed", 15)
        step(f"publisher noticed after {time.monotonic() - t2:.2f}s")
        assert await pub.exit_code(10) == 0
        await sub.expect("stalled", 5, kind="video")

        step("server ends the subscriber session -> tracks ended, closed, exit 0")
        await server.kick(whip=False)
        await sub.expect("closed", 10)
        await sub.expect("ended", 10, kind="video")
        assert await sub.exit_code(10) == 0

        step("new publisher (video only, --seconds 4) + subscriber; SIGTERM ends subscriber")
        pub2 = await spawn("pub2", "publish", "--url", base + "/whip", "--token", "secret",
                           "--video", "--seconds", "4")
        children.append(pub2)
        await pub2.expect("connected", 15)
        sub2 = await spawn("sub2", "subscribe", "--url", base + "/whep", "--token", "secret")
        children.append(sub2)
        await sub2.expect("frame", 15, kind="video", count=10)
        sub2.proc.send_signal(signal.SIGTERM)
        assert await sub2.exit_code(10) == 0
        assert not any(e["event"] == "frame" and e["kind"] == "audio" for e in sub2.events)

        step("publisher DELETEs its session after --seconds")
        await pub2.expect("deleted", 20, status=200)
        assert await pub2.exit_code(10) == 0

        assert not server.bad_candidates, f"non-loopback candidates: {server.bad_candidates}"
        step("server vanishes without DTLS close -> publisher closed via consent expiry")
        pub3 = await spawn("pub3", "publish", "--url", base + "/whip", "--token", "secret")
        children.append(pub3)
        await pub3.expect("connected", 15)
        t3 = time.monotonic()
        await server.kick(whip=True, silently=True)
        await pub3.expect("closed", 20)
        step(f"publisher noticed after {time.monotonic() - t3:.2f}s")
        assert await pub3.exit_code(10) == 0

        step("all SDP candidates were 127.0.0.1")
        print("SELFTEST PASSED", flush=True)
        return 0
    except AssertionError as exc:
        print(f"SELFTEST FAILED: {exc}", flush=True)
        return 1
    finally:
        for child in children:
            if child.proc.returncode is None:
                child.proc.kill()
                await child.proc.wait()
        await server.kick(True)
        await server.kick(False)
        srv.close()


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
        if name == "publish":
            p.add_argument("--video", action="store_true")
            p.add_argument("--audio", action="store_true")
        else:
            p.add_argument("--frames", type=int, default=None)
    st = sub.add_parser("selftest")
    st.add_argument("--debug", action="store_true", default=argparse.SUPPRESS)
    args = ap.parse_args()
    DEBUG = args.debug
    if args.cmd == "selftest":
        rc = asyncio.run(selftest(args))
    else:
        setup = setup_publish if args.cmd == "publish" else setup_subscribe
        rc = asyncio.run(peer_main(args, setup))
    sys.stdout.flush()
    # Skip interpreter teardown: a urllib call stuck in the executor or a
    # lingering codec thread must never keep a test waiting.
    os._exit(rc)


if __name__ == "__main__":
    main()
