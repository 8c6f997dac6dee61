//! `kep-bench media`: one WHIP publisher sending about 1 Mbit/s of VP8-framed video and
//! 64 kbit/s of Opus-sized audio, and steps of N WHEP subscribers, all str0m peers on
//! 127.0.0.1 in this process. Per step: what kep forwarded (packets and Mbit/s, per core of
//! its CPU time), loss, kep's RSS per subscriber, and join → first video frame.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use kep_api::live::JoinClaims;
use str0m::change::SdpAnswer;
use str0m::format::Codec;
use str0m::media::{Direction, MediaKind, MediaTime, Mid};
use str0m::net::{Protocol, Receive};
use str0m::{Candidate, Event, Input, Output, Rtc};
use tokio::net::UdpSocket;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

#[derive(clap::Args)]
pub struct MediaArgs {
    #[command(flatten)]
    service: crate::Service,
    /// kep's process id, whose CPU time and RSS are read from /proc.
    #[arg(long)]
    kep_pid: u32,
    /// Subscriber counts to step through; stops after the first with loss over 1%.
    #[arg(long, value_delimiter = ',', default_value = "1,10,50,100,200")]
    steps: Vec<usize>,
    /// Seconds measured per step (after 2 s to settle).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
}

/// Media datagrams (RTP of the codecs, no RTCP, RTX or probing) and their bytes that a
/// set of peers received (or sent).
#[derive(Default)]
struct Counters {
    datagrams: AtomicU64,
    bytes: AtomicU64,
    /// Frames (video and audio) written, or received whole.
    frames: AtomicU64,
}

const VIDEO_FPS: u64 = 30;
/// 1 Mbit/s at 30 frames a second.
const VIDEO_FRAME: usize = 1_000_000 / 8 / VIDEO_FPS as usize;
const AUDIO_FRAME: usize = 160;

pub async fn media(args: MediaArgs) -> anyhow::Result<()> {
    let svc = &args.service;
    let token = |who: &str| {
        let claims = JoinClaims {
            iss: svc.service_id.clone(),
            room: "media".into(),
            sub: who.into(),
            exp: jiff_now() + 3600,
            publish: None,
            subscribe: None,
        };
        kep_client::live::join_token(&svc.service_id, &svc.service_secret, &claims)
    };
    let sent = Arc::new(Counters::default());
    let stop = CancellationToken::new();
    let whip = format!("{}/api/whip/media", svc.live);
    let (publisher, answer) =
        Peer::connect(&whip, &token("publisher"), Direction::SendOnly).await?;
    let stream_id = answer.stream_id.context("no Kep-Stream-Id")?;
    tokio::spawn(publisher.run(Role::Publish(Arc::clone(&sent)), stop.clone()));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let baseline_rss = rss_kib(args.kep_pid)?;
    let whep = format!("{}/api/whep/media/{stream_id}", svc.live);
    for (step, &n) in args.steps.iter().enumerate() {
        let received = Arc::new(Counters::default());
        let step_stop = stop.child_token();
        let mut firsts = Vec::new();
        let mut joins = Vec::new();
        for i in 0..n {
            let (url, t) = (whep.clone(), token(&format!("s{step}-{i}")));
            let (received, step_stop) = (Arc::clone(&received), step_stop.clone());
            joins.push(tokio::spawn(async move {
                let started = Instant::now();
                let (peer, answered) = Peer::connect(&url, &t, Direction::RecvOnly).await?;
                let (first_tx, first_rx) = oneshot::channel();
                tokio::spawn(peer.run(Role::Subscribe(received, Some(first_tx)), step_stop));
                anyhow::Ok((started, first_rx, (answered.location, t)))
            }));
        }
        let mut sessions = Vec::new();
        for j in joins {
            let (started, first, session) = j.await??;
            firsts.push((started, first));
            sessions.push(session);
        }
        let mut first_frame = Vec::new();
        for (started, first) in firsts {
            if let Ok(Ok(at)) = tokio::time::timeout(Duration::from_secs(10), first).await {
                first_frame.push(at.duration_since(started));
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (cpu0, sent0, got0) = (cpu_s(args.kep_pid)?, snapshot(&sent), snapshot(&received));
        let t0 = Instant::now();
        tokio::time::sleep(Duration::from_secs(args.seconds)).await;
        let elapsed = t0.elapsed().as_secs_f64();
        let (cpu1, sent1, got1) = (cpu_s(args.kep_pid)?, snapshot(&sent), snapshot(&received));
        let rss = rss_kib(args.kep_pid)?;
        step_stop.cancel();
        // The step's subscribers leave, as clients do, so the next step starts clean.
        let http = reqwest::Client::new();
        futures_util::future::join_all(
            sessions
                .iter()
                .map(|(location, t)| http.delete(location).bearer_auth(t).send()),
        )
        .await;
        let packets = (got1.0 - got0.0) as f64;
        let mbits = (got1.1 - got0.1) as f64 * 8.0 / 1e6;
        let cores = (cpu1 - cpu0) / elapsed;
        // Loss in frames: kep packetizes again for each subscriber, so its packets need not
        // be the publisher's one for one.
        let expected = (sent1.2 - sent0.2) as f64 * n as f64;
        first_frame.sort();
        let pct = |p: f64| {
            first_frame
                .get(((first_frame.len() as f64 * p).ceil() as usize).saturating_sub(1))
                .map(|d| d.as_secs_f64() * 1000.0)
        };
        let loss = (1.0 - (got1.2 - got0.2) as f64 / expected).max(0.0);
        let report = serde_json::json!({
            "subscribers": n,
            "forwarded_packets_per_s": (packets / elapsed).round(),
            "forwarded_mbit_per_s": (mbits / elapsed * 10.0).round() / 10.0,
            "kep_cores": (cores * 100.0).round() / 100.0,
            "packets_per_s_per_core": (packets / elapsed / cores).round(),
            "mbit_per_s_per_core": (mbits / elapsed / cores * 10.0).round() / 10.0,
            "cpu_ms_per_forwarded_mbit": ((cpu1 - cpu0) * 1000.0 / mbits * 100.0).round() / 100.0,
            "loss": (loss * 10_000.0).round() / 10_000.0,
            "rss_kib_per_subscriber": (rss.saturating_sub(baseline_rss)) / n.max(1) as u64,
            "first_frame_ms_p50": pct(0.5),
            "first_frame_ms_p99": pct(0.99),
            "first_frames": first_frame.len(),
        });
        println!("{report}");
        // Their sessions end when kep's ICE consent for them runs out: give it the time.
        tokio::time::sleep(Duration::from_secs(3)).await;
        if loss > 0.01 {
            break;
        }
    }
    stop.cancel();
    Ok(())
}

fn jiff_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

fn snapshot(c: &Counters) -> (u64, u64, u64) {
    (
        c.datagrams.load(Ordering::Relaxed),
        c.bytes.load(Ordering::Relaxed),
        c.frames.load(Ordering::Relaxed),
    )
}

/// CPU seconds the process has used, user and system.
fn cpu_s(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')').context("/proc stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>()? + fields[12].parse::<f64>()?;
    Ok(ticks / clock_ticks())
}

fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .context("VmRSS")?;
    Ok(line.split_whitespace().nth(1).context("VmRSS")?.parse()?)
}

enum Role {
    Publish(Arc<Counters>),
    Subscribe(Arc<Counters>, Option<oneshot::Sender<Instant>>),
}

struct Answered {
    stream_id: Option<i64>,
    /// The session, to `DELETE`.
    location: String,
}

/// A str0m peer on its own UDP socket, connected to kep by WHIP or WHEP.
struct Peer {
    rtc: Rtc,
    socket: UdpSocket,
    local: SocketAddr,
    video: Mid,
    audio: Mid,
    /// The payload types of its codecs: a datagram of media, not RTCP, RTX or probing.
    media_pts: Vec<u8>,
}

impl Peer {
    async fn connect(url: &str, token: &str, dir: Direction) -> anyhow::Result<(Peer, Answered)> {
        let socket = UdpSocket::bind("127.0.0.1:0").await?;
        let local = socket.local_addr()?;
        let mut rtc = Rtc::builder()
            .clear_codecs()
            .enable_vp8(true)
            .enable_opus(true, false)
            .build(Instant::now());
        rtc.add_local_candidate(Candidate::host(local, "udp")?);
        let mut change = rtc.sdp_api();
        let video = change.add_media(MediaKind::Video, dir, None, None, None);
        let audio = change.add_media(MediaKind::Audio, dir, None, None, None);
        let (offer, pending) = change.apply().context("an offer")?;
        let res = reqwest::Client::new()
            .post(url)
            .bearer_auth(token)
            .header("content-type", "application/sdp")
            .body(offer.to_sdp_string())
            .send()
            .await?;
        anyhow::ensure!(res.status() == 201, "{url}: {}", res.status());
        let location = res
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .context("no Location")?;
        let location = reqwest::Url::parse(url)?.join(location)?.to_string();
        let stream_id = res
            .headers()
            .get("kep-stream-id")
            .and_then(|v| v.to_str().ok()?.parse().ok());
        let answer = SdpAnswer::from_sdp_string(&res.text().await?)?;
        rtc.sdp_api().accept_answer(pending, answer)?;
        let media_pts = rtc
            .codec_config()
            .params()
            .iter()
            .map(|p| *p.pt())
            .collect();
        let peer = Peer {
            rtc,
            socket,
            local,
            video,
            audio,
            media_pts,
        };
        Ok((
            peer,
            Answered {
                stream_id,
                location,
            },
        ))
    }

    /// An RTP datagram (version 2) of one of its codecs' payload types (RTCP's packet
    /// types, 200–206, read as 72–78 there, which no codec has).
    fn is_media(&self, datagram: &[u8]) -> bool {
        match datagram {
            [first, second, ..] => first >> 6 == 2 && self.media_pts.contains(&(second & 0x7f)),
            _ => false,
        }
    }

    async fn run(mut self, mut role: Role, stop: CancellationToken) {
        let mut buf = vec![0u8; 2048];
        let start = Instant::now();
        let mut ticker = tokio::time::interval(Duration::from_millis(10));
        let (mut video_sent, mut audio_sent) = (0u64, 0u64);
        let mut connected = false;
        loop {
            let deadline = loop {
                match self.rtc.poll_output() {
                    Ok(Output::Transmit(t)) => {
                        if let Role::Publish(sent) = &role
                            && self.is_media(&t.contents)
                        {
                            sent.datagrams.fetch_add(1, Ordering::Relaxed);
                            sent.bytes
                                .fetch_add(t.contents.len() as u64, Ordering::Relaxed);
                        }
                        let _ = self.socket.send_to(&t.contents, t.destination).await;
                    }
                    Ok(Output::Timeout(t)) => break t,
                    Ok(Output::Event(Event::Connected)) => connected = true,
                    Ok(Output::Event(Event::MediaData(d))) => {
                        if let Role::Subscribe(got, first) = &mut role {
                            got.frames.fetch_add(1, Ordering::Relaxed);
                            if d.mid == self.video
                                && let Some(first) = first.take()
                            {
                                let _ = first.send(Instant::now());
                            }
                        }
                    }
                    Ok(_) => {}
                    Err(_) => return,
                }
            };
            tokio::select! {
                received = self.socket.recv_from(&mut buf) => {
                    let Ok((n, source)) = received else { continue };
                    if let Role::Subscribe(got, _) = &role
                        && self.is_media(&buf[..n])
                    {
                        got.datagrams.fetch_add(1, Ordering::Relaxed);
                        got.bytes.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    if let Ok(r) = Receive::new(Protocol::Udp, source, self.local, &buf[..n]) {
                        let _ = self.rtc.handle_input(Input::Receive(Instant::now(), r));
                    }
                }
                _ = tokio::time::sleep_until(deadline.into()) => {
                    let _ = self.rtc.handle_input(Input::Timeout(Instant::now()));
                }
                _ = ticker.tick(), if connected && matches!(role, Role::Publish(_)) => {
                    // Frames due by now: video at 30/s (a keyframe every 2 s), audio at 50/s.
                    let elapsed = start.elapsed();
                    let mut written = 0;
                    while video_sent * 1000 / VIDEO_FPS <= elapsed.as_millis() as u64 {
                        let key = video_sent % (2 * VIDEO_FPS) == 0;
                        self.write(self.video, Codec::Vp8, MediaTime::from_90khz(video_sent * 3000), vp8_frame(key));
                        video_sent += 1;
                        written += 1;
                    }
                    while audio_sent * 20 <= elapsed.as_millis() as u64 {
                        self.write(self.audio, Codec::Opus, MediaTime::new(audio_sent * 960, str0m::media::Frequency::FORTY_EIGHT_KHZ), vec![0xfc; AUDIO_FRAME]);
                        audio_sent += 1;
                        written += 1;
                    }
                    if let Role::Publish(sent) = &role {
                        sent.frames.fetch_add(written, Ordering::Relaxed);
                    }
                }
                () = stop.cancelled() => return,
            }
        }
    }

    fn write(&mut self, mid: Mid, codec: Codec, time: MediaTime, data: Vec<u8>) {
        let Some(writer) = self.rtc.writer(mid) else {
            return;
        };
        let Some(pt) = writer
            .payload_params()
            .find(|p| p.spec().codec == codec)
            .map(|p| p.pt())
        else {
            return;
        };
        let _ = writer.write(pt, Instant::now(), time, data);
    }
}

/// A VP8 frame's bytes: the first byte says key frame (its P bit clear) or not; the rest
/// is filler kep forwards without looking at it.
fn vp8_frame(key: bool) -> Vec<u8> {
    let mut frame = vec![0x55u8; VIDEO_FRAME];
    frame[0] = if key { 0x10 } else { 0x11 };
    frame
}
