#!/usr/bin/python3
"""WHIP/WHEP test peer on GStreamer's webrtcbin, for kep's integration tests.

An independent WebRTC stack beside aiortc (libnice for ICE, GStreamer's own DTLS, RTP and
codecs), set up as GStreamer WHIP clients are: bundle policy max-bundle, sendrecv
transceivers (webrtcbin's default for a sending pad), the offer sent at once and each
candidate trickled after it by PATCH (application/trickle-ice-sdpfrag, RFC 8840).

Subcommands publish and subscribe, with media_peer.py's options and JSON-line events.
Runs on Debian's python3 (python3-gi, gir1.2-gst-plugins-bad-1.0, gir1.2-nice-0.1).
ICE gathers on 127.0.0.1 only: no traffic leaves lo.
"""
import argparse
import json
import os
import signal
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstSdp", "1.0")
gi.require_version("GstWebRTC", "1.0")
gi.require_version("Nice", "0.1")
from gi.repository import GLib, Gst, GstSdp, GstWebRTC, Nice  # noqa: E402

# PyGObject resolves a class's attributes on first use, and two threads doing so at once
# may fail (a subscriber's video and audio streaming threads once saw `Gst.PadProbeType`
# without `BUFFER`): what the callbacks of streaming threads use is resolved here, once,
# in the main thread.
SRC_PAD = Gst.PadDirection.SRC
BUFFER_PROBE = Gst.PadProbeType.BUFFER
PROBE_OK = Gst.PadProbeReturn.OK
make_element = Gst.ElementFactory.make
CONNECTED = GstWebRTC.WebRTCPeerConnectionState.CONNECTED
ENDED = (GstWebRTC.WebRTCPeerConnectionState.FAILED, GstWebRTC.WebRTCPeerConnectionState.CLOSED)

# Each video codec: its encoder and payloader, and the RTP caps of its stream (a
# subscriber offers them all; a publisher's level is the one its encoder chose).
VIDEO = {
    "vp8": ("vp8enc deadline=1 keyframe-max-dist=30 ! rtpvp8pay pt=96",
            "application/x-rtp,media=video,encoding-name=VP8,payload=96,clock-rate=90000"),
    "h264": ("x264enc tune=zerolatency speed-preset=ultrafast key-int-max=30"
             " ! video/x-h264,profile=constrained-baseline"
             " ! rtph264pay pt=102 config-interval=-1 aggregate-mode=zero-latency",
             "application/x-rtp,media=video,encoding-name=H264,payload=102,clock-rate=90000,"
             "packetization-mode=(string)1"),
}
H264_LEVEL = ",profile-level-id=(string)42e01f"
# Opus is opus/48000/2 in SDP (RFC 7587): the channels are the caps' encoding-params.
OPUS = ("application/x-rtp,media=audio,encoding-name=OPUS,payload=111,clock-rate=48000,"
        "encoding-params=(string)2")


def emit(event, **fields):
    print(json.dumps({"event": event, **fields}), flush=True)


_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # ignore *_proxy


def http(method, url, token, body=None, content_type=None):
    req = urllib.request.Request(url, data=body, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    if content_type:
        req.add_header("Content-Type", content_type)
    try:
        with _opener.open(req, timeout=10) as resp:
            return resp.status, resp.headers, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read().decode(errors="replace")
    except urllib.error.URLError as err:
        return 0, {}, str(err.reason)


def directions(sdp):
    names = ("sendrecv", "sendonly", "recvonly", "inactive")
    return [next((l[2:] for l in section.split("\r\n") if l[2:] in names), "sendrecv")
            for section in sdp.split("\r\nm=")[1:]]


class Peer:
    def __init__(self, args, pipeline):
        self.args = args
        self.loop = GLib.MainLoop()
        self.pipe = Gst.Pipeline.new()
        # The elements a subscriber adds as its streams come go in this bin, beside
        # webrtcbin: a pad links only within its bin.
        self.bin = Gst.parse_bin_from_description(pipeline, False)
        self.pipe.add(self.bin)
        self.webrtc = self.bin.get_by_name("w")
        self.webrtc.set_property("bundle-policy", GstWebRTC.WebRTCBundlePolicy.MAX_BUNDLE)
        # Held until the process exits: PyGObject drops one reference too many on the
        # object a property hands it, and webrtcbin's ICE agent must outlive us.
        self.ice_agent = self.webrtc.get_property("ice-agent")
        loopback = Nice.Address.new()
        loopback.set_from_string("127.0.0.1")
        self.ice_agent.get_property("agent").add_local_address(loopback)
        self.lock = threading.Lock()
        self.location = None
        self.ice = None  # (ufrag, pwd) of our offer, for the sdpfrags
        self.early = []  # candidates gathered before the POST was answered
        self.stopping = False
        self.negotiated = False
        self.counts = {}
        self.size = {}  # the decoded video's width and height
        self.webrtc.connect("on-negotiation-needed", self.on_negotiation_needed)
        self.webrtc.connect("on-ice-candidate", self.on_ice_candidate)
        self.webrtc.connect("notify::connection-state", self.on_state)
        bus = self.pipe.get_bus()
        bus.add_signal_watch()
        bus.connect("message::error", self.on_error)

    def run(self):
        self.pipe.set_state(Gst.State.PLAYING)
        if self.args.seconds:
            GLib.timeout_add(int(self.args.seconds * 1000), self.delete)
        for sig in (signal.SIGTERM, signal.SIGINT):
            GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, sig, self.terminated)
        self.loop.run()
        self.pipe.set_state(Gst.State.NULL)
        return self.rc

    rc = 0

    def quit(self, rc=0):
        self.rc = rc
        self.loop.quit()

    def terminated(self):
        emit("terminated")
        self.quit()

    def on_error(self, _bus, message):
        err, _ = message.parse_error()
        emit("error", message=f"{message.src.get_name()}: {err.message}")
        self.quit(2)

    def delete(self):
        self.stopping = True
        status = None
        if self.location:
            status, _, _ = http("DELETE", self.location, self.args.token)
        emit("deleted", status=status)
        self.quit()

    def on_state(self, *_):
        state = self.webrtc.get_property("connection-state")
        if state == CONNECTED:
            emit("connected")
        elif state in ENDED:
            if not self.stopping:
                emit("closed", state=state.value_nick)
                GLib.idle_add(self.quit)

    def on_negotiation_needed(self, _webrtc):
        # Once: WHIP and WHEP have no renegotiation, and webrtcbin asks again as the
        # answer's transceivers settle.
        if self.negotiated:
            return
        self.negotiated = True
        promise = Gst.Promise.new_with_change_func(self.on_offer)
        self.webrtc.emit("create-offer", None, promise)

    def on_offer(self, promise):
        reply = promise.get_reply()
        offer = reply.get_value("offer")
        if offer is None:
            emit("error", message=f"no offer: {reply.to_string()}")
            GLib.idle_add(self.quit, 2)
            return
        self.webrtc.emit("set-local-description", offer, Gst.Promise.new())
        sdp = offer.sdp.as_text()
        # Sent at once, without candidates: they follow by PATCH.
        for line in sdp.split("\r\n"):
            if line.startswith("a=ice-ufrag:"):
                ufrag = line.split(":", 1)[1]
            elif line.startswith("a=ice-pwd:"):
                pwd = line.split(":", 1)[1]
        status, headers, body = http("POST", self.args.url, self.args.token, sdp.encode(),
                                     "application/sdp")
        if status != 201:
            emit("refused", status=status, body=body)
            GLib.idle_add(self.quit, 3)
            return
        loc = headers.get("Location")
        emit("answered", location=loc, stream_id=headers.get("Kep-Stream-Id"),
             directions=directions(body))
        _, answer = GstSdp.SDPMessage.new_from_text(body)
        desc = GstWebRTC.WebRTCSessionDescription.new(GstWebRTC.WebRTCSDPType.ANSWER, answer)
        self.webrtc.emit("set-remote-description", desc, Gst.Promise.new())
        with self.lock:
            self.location = urllib.parse.urljoin(self.args.url, loc)
            self.ice = (ufrag, pwd)
            early, self.early = self.early, None
        for candidate in early:
            self.trickle(*candidate)

    def on_ice_candidate(self, _webrtc, mline, candidate):
        with self.lock:
            if self.early is not None:
                self.early.append((mline, candidate))
                return
        self.trickle(mline, candidate)

    def trickle(self, mline, candidate):
        ufrag, pwd = self.ice
        frag = (f"a=ice-ufrag:{ufrag}\r\na=ice-pwd:{pwd}\r\n"
                f"m=audio 9 UDP/TLS/RTP/SAVPF 0\r\na=mid:{mline}\r\na={candidate}\r\n")
        status, _, body = http("PATCH", self.location, self.args.token, frag.encode(),
                               "application/trickle-ice-sdpfrag")
        emit("trickled", status=status, **({"body": body} if status != 204 else {}))

    def count(self, kind, info):
        """A probe on a decoded pad: one buffer is one frame."""
        n = self.counts[kind] = self.counts.get(kind, 0) + 1
        every = 10 if kind == "video" else 50
        if n == 1 or n % every == 0:
            emit("frame", kind=kind, count=n, **(self.size if kind == "video" else {}))
        if kind == "video" and self.args.frames and n == self.args.frames:
            emit("enough", count=n)
        return PROBE_OK


def publish(args):
    encode, caps = VIDEO[args.codec]
    pipeline = (
        "webrtcbin name=w "
        "videotestsrc is-live=true pattern=ball ! video/x-raw,width=320,height=240,framerate=30/1"
        f" ! videoconvert ! queue ! {encode} ! {caps} ! w. "
        "audiotestsrc is-live=true wave=sine freq=450 ! audioconvert ! audioresample"
        f" ! queue ! opusenc ! rtpopuspay pt=111 ! {OPUS} ! w. "
    )
    return Peer(args, pipeline).run()


def subscribe(args):
    peer = Peer(args, "webrtcbin name=w")
    video = f"{VIDEO['vp8'][1]}; {VIDEO['h264'][1]}{H264_LEVEL}"
    recvonly = GstWebRTC.WebRTCRTPTransceiverDirection.RECVONLY
    peer.webrtc.emit("add-transceiver", recvonly, Gst.Caps.from_string(video))
    peer.webrtc.emit("add-transceiver", recvonly, Gst.Caps.from_string(OPUS))

    def on_pad(_webrtc, pad):
        if pad.get_direction() != SRC_PAD:
            return
        decode = make_element("decodebin")
        decode.connect("pad-added", on_decoded)
        peer.bin.add(decode)
        decode.sync_state_with_parent()
        pad.link(decode.get_static_pad("sink"))

    def on_decoded(_decode, pad):
        name = pad.get_current_caps().get_structure(0).get_name()
        kind = "video" if name.startswith("video") else "audio"
        if kind == "video":
            s = pad.get_current_caps().get_structure(0)
            peer.size = {"width": s.get_value("width"), "height": s.get_value("height")}
        sink = make_element("fakesink")
        sink.set_property("sync", False)
        peer.bin.add(sink)
        sink.sync_state_with_parent()
        pad.link(sink.get_static_pad("sink"))
        pad.add_probe(BUFFER_PROBE, lambda _p, info: peer.count(kind, info))

    peer.webrtc.connect("pad-added", on_pad)
    return peer.run()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("publish", "subscribe"):
        p = sub.add_parser(name)
        p.add_argument("--url", required=True)
        p.add_argument("--token", required=True)
        p.add_argument("--seconds", type=float, default=None,
                       help="DELETE the session after S seconds (default: run until closed)")
        if name == "publish":
            p.add_argument("--codec", choices=sorted(VIDEO), default="vp8")
        else:
            p.add_argument("--frames", type=int, default=None)
    args = ap.parse_args()
    Gst.init(None)
    rc = (publish if args.cmd == "publish" else subscribe)(args)
    sys.stdout.flush()
    os._exit(rc)


if __name__ == "__main__":
    main()
