//! The media peers the tests drive: aiortc (tests/media_peer.py) and GStreamer's
//! `webrtcbin` (tests/gst_peer.py), each a process printing JSON lines, every one on
//! 127.0.0.1.

use std::process::Stdio;
use std::time::Duration;

use kep_api::live::{EventKind, JoinClaims, ServerMessage};
use kep_client::live::{Participant, join_token};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use crate::common::{TestServer, next};

/// A peer process and the JSON lines it prints.
pub struct Peer {
    /// Killed when the peer is dropped.
    _child: Child,
    lines: mpsc::UnboundedReceiver<Value>,
    what: String,
}

impl Peer {
    /// An aiortc peer (tests/media_peer.py).
    pub fn start(what: &str, args: &[&str]) -> Peer {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/media_peer.py");
        Peer::run(what, "python3", script, args)
    }

    /// A GStreamer `webrtcbin` peer (tests/gst_peer.py), on Debian's python3, where
    /// python3-gi is.
    pub fn gst(what: &str, args: &[&str]) -> Peer {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/gst_peer.py");
        Peer::run(what, "/usr/bin/python3", script, args)
    }

    fn run(what: &str, python: &str, script: &str, args: &[&str]) -> Peer {
        let mut child = Command::new(python)
            .arg(script)
            .args(args)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{python} {script}: {e} (the test command installs it)"));
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if let Ok(v) = serde_json::from_str(&line) {
                    let _ = tx.send(v);
                }
            }
        });
        Peer {
            _child: child,
            lines,
            what: what.to_owned(),
        }
    }

    /// How kep refused the peer's offer (the `refused` line, with the HTTP status).
    pub async fn refused(&mut self) -> Value {
        let wait = async {
            while let Some(line) = self.lines.recv().await {
                if line["event"] == "refused" {
                    return line;
                }
            }
            panic!("{}: ended unrefused", self.what);
        };
        tokio::time::timeout(Duration::from_secs(30), wait)
            .await
            .unwrap_or_else(|_| panic!("{}: not refused within 30 s", self.what))
    }

    /// The next line whose `event` is `event`, within 30 s; the lines before it are passed.
    pub async fn until(&mut self, event: &str) -> Value {
        self.until_kind(event, None).await
    }

    /// The first line of each of `events`, in `events`' order, whatever order they came
    /// in, within 30 s.
    pub async fn until_each(&mut self, events: &[&str]) -> Vec<Value> {
        let mut seen: Vec<Option<Value>> = vec![None; events.len()];
        let wait = async {
            while seen.iter().any(Option::is_none) {
                let Some(line) = self.lines.recv().await else {
                    panic!("{}: ended before {events:?}", self.what);
                };
                if line["event"] == "error" || line["event"] == "refused" {
                    panic!("{}: {line}", self.what);
                }
                if let Some(i) = events.iter().position(|e| line["event"] == *e) {
                    seen[i].get_or_insert(line);
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(30), wait)
            .await
            .unwrap_or_else(|_| panic!("{}: not all of {events:?} within 30 s", self.what));
        seen.into_iter().flatten().collect()
    }

    /// [`Peer::until`] a line of that `kind` too (`video`, `audio`), if given.
    pub async fn until_kind(&mut self, event: &str, kind: Option<&str>) -> Value {
        let wait = async {
            while let Some(line) = self.lines.recv().await {
                if line["event"] == event && kind.is_none_or(|k| line["kind"] == k) {
                    return line;
                }
                if line["event"] == "error" || line["event"] == "refused" {
                    panic!("{}: {line}", self.what);
                }
            }
            panic!("{}: ended before {event}", self.what);
        };
        tokio::time::timeout(Duration::from_secs(30), wait)
            .await
            .unwrap_or_else(|_| panic!("{}: no {event} within 30 s", self.what))
    }
}

pub fn token(srv: &TestServer, secret: &str, room: &str, who: &str) -> String {
    let claims = JoinClaims {
        iss: "svc".into(),
        room: room.into(),
        sub: who.into(),
        exp: srv.clock.unix_s() + 600,
        publish: None,
        subscribe: None,
    };
    join_token("svc", secret, &claims)
}

/// The next event of `kind` the participant gets, the others passed over.
pub async fn until_event(p: &mut Participant, kind: EventKind) -> kep_api::live::Event {
    loop {
        match next(p).await {
            Ok(ServerMessage::Event(e)) if e.event == kind => return e,
            Ok(_) => {}
            Err(closed) => panic!("closed waiting for {kind:?}: {closed:?}"),
        }
    }
}
