// kep live: the browser client of a kep live room (an ES module; no bundler needed).
//
//   import { Room } from "/sdk/kep-live.js";
//   const room = await Room.join({ token });            // a join token from your server
//   room.addEventListener("streampublished", async (e) => {
//     const { stream } = await room.subscribe(e.detail.streamId);
//     videoElement.srcObject = stream;
//   });
//   const camera = await navigator.mediaDevices.getUserMedia({ video: true, audio: true });
//   const published = await room.publish(camera);       // { streamId, stop() }
//   // or room.publish(camera, { simulcast: true }): video in three layers, of which kep
//   // gives each subscriber the best its bandwidth allows.
//
// Events (CustomEvent, the server's message as `detail`): joined, participantjoined,
// participantleft, streampublished, streamunpublished, kicked, roomdestroyed,
// inactivatedstream, and closed ({ code, reason }) when the socket ends.

/** The claims of a join token (it names the room and the participant). */
export function claims(token) {
  const part = token.split(".")[1] || "";
  const base64 = part.replace(/-/g, "+").replace(/_/g, "/");
  return JSON.parse(atob(base64 + "=".repeat((4 - (base64.length % 4)) % 4)));
}

/** The simulcast layers of a published video: a quarter, half and whole of its size. */
const LAYERS = [
  { rid: "l", scaleResolutionDownBy: 4, maxBitrate: 150_000 },
  { rid: "m", scaleResolutionDownBy: 2, maxBitrate: 500_000 },
  { rid: "h", maxBitrate: 1_500_000 },
];

/** Every section on one transport, as RFC 9725 §4.2 asks of WHIP clients. */
const PC_CONFIG = { bundlePolicy: "max-bundle" };

/** One WebRTC session with kep (WHIP or WHEP): an offer POSTed, its answer applied. */
async function negotiate(url, token, pc) {
  await pc.setLocalDescription(await pc.createOffer());
  const res = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/sdp", Authorization: `Bearer ${token}` },
    body: pc.localDescription.sdp,
  });
  if (res.status !== 201) {
    const body = await res.json().catch(() => ({}));
    throw new Error(`${res.status}: ${body.error?.data?.reason ?? body.error?.message ?? res.statusText}`);
  }
  await pc.setRemoteDescription({ type: "answer", sdp: await res.text() });
  const location = new URL(res.headers.get("Location"), url).href;
  const stop = async () => {
    pc.close();
    await fetch(location, { method: "DELETE", headers: { Authorization: `Bearer ${token}` } });
  };
  return { res, stop };
}

export class Room extends EventTarget {
  /** Joins the room of `token` over the socket; `url` is the live listener (default: this page's origin). */
  static async join({ token, url = location.origin }) {
    const room = new Room(token, url);
    await room.#open();
    return room;
  }

  #socket;

  constructor(token, url) {
    super();
    const c = claims(token);
    this.token = token;
    this.url = url.replace(/\/$/, "");
    this.roomId = c.room;
    this.participantId = c.sub;
    /** The room as the `joined` message showed it: [{ participantId, streams: [{ streamId }] }]. */
    this.participants = [];
  }

  #open() {
    return new Promise((resolve, reject) => {
      const socket = new WebSocket(this.url.replace(/^http/, "ws") + "/api/ws");
      this.#socket = socket;
      socket.onmessage = (m) => {
        const msg = JSON.parse(m.data);
        if (msg.type === "challenge") {
          socket.send(JSON.stringify({ type: "join", token: this.token }));
        } else if (msg.type === "joined") {
          this.participants = msg.participants;
          this.dispatchEvent(new CustomEvent("joined", { detail: msg }));
          resolve();
        } else if (msg.type === "error") {
          reject(new Error(`${msg.code}: ${msg.data?.reason ?? msg.message}`));
        } else if (msg.type === "event") {
          this.dispatchEvent(new CustomEvent(msg.event.toLowerCase(), { detail: msg }));
        }
      };
      socket.onclose = (e) => {
        this.dispatchEvent(new CustomEvent("closed", { detail: { code: e.code, reason: e.reason } }));
        reject(new Error(`closed: ${e.code} ${e.reason}`));
      };
    });
  }

  /**
   * Publishes the tracks of `mediaStream` (WHIP): { streamId, pc, stop() }. With
   * `simulcast`, its video goes in three layers (see LAYERS).
   */
  async publish(mediaStream, { simulcast = false } = {}) {
    const pc = new RTCPeerConnection(PC_CONFIG);
    for (const track of mediaStream.getTracks()) {
      const layers = simulcast && track.kind === "video" ? { sendEncodings: LAYERS } : {};
      pc.addTransceiver(track, { direction: "sendonly", streams: [mediaStream], ...layers });
    }
    const { res, stop } = await negotiate(`${this.url}/api/whip/${encodeURIComponent(this.roomId)}`, this.token, pc);
    return { streamId: Number(res.headers.get("Kep-Stream-Id")), pc, stop };
  }

  /** Subscribes to a stream of the room (WHEP): { stream: MediaStream, pc, stop() }. */
  async subscribe(streamId) {
    const pc = new RTCPeerConnection(PC_CONFIG);
    const stream = new MediaStream();
    pc.ontrack = (e) => stream.addTrack(e.track);
    pc.addTransceiver("video", { direction: "recvonly" });
    pc.addTransceiver("audio", { direction: "recvonly" });
    const room = encodeURIComponent(this.roomId);
    const { stop } = await negotiate(`${this.url}/api/whep/${room}/${streamId}`, this.token, pc);
    return { stream, pc, stop };
  }

  /** Leaves the room (its media sessions are the caller's to stop). */
  leave() {
    this.#socket?.send(JSON.stringify({ type: "leave" }));
  }
}
