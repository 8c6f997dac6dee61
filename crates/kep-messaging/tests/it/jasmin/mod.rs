//! Jasmin 0.11.0, a real SMS gateway (Python: an SMPP server and an HTTP API), as the carrier
//! the messaging connectors' tests talk to. `./test` installs it (`jasmind.py` on `PATH`) with
//! Debian's RabbitMQ and Redis, which it needs.
//!
//! What runs, all on free loopback ports, as the user running the tests:
//! - RabbitMQ (with its own `epmd`), once per test process and shared: each Jasmin gets a
//!   virtual host of its own, so their queues never meet. It stops, and its directory goes,
//!   when the test process ends, however it ends (`setpriv --pdeathsig`).
//! - per [`Jasmin`]: a Redis, and `jasmind.py --enable-dlr-lookup --enable-dlr-thrower`
//!   (SMPP server, HTTP API, jCli), its configuration and logs in a temp dir.
//!
//! What it is set up with (over jCli, then `persist`ed, so a restart loads it again): the user
//! `kep` (group `kep`) that a test binds or calls `/send` as; an SMPP client connector `loop`
//! that binds back to Jasmin's own SMPP server as the user `loop` (group `loop`); the MT routes
//! "group `loop` → connector `void`" (order 10) and "everyone else → `loop`" (the default
//! route). `void` is never started, and its queue drops what it gets (a RabbitMQ policy,
//! `message-ttl` 0), so the loop ends there, however many messages go round. So a submit from
//! `kep` is accepted, routed out through `loop`, accepted by Jasmin's server as the loop user's,
//! and `kep` gets one receipt, `stat:ACCEPTD` (`[dlr] smpp_receipt_on_success_submit_sm_resp`:
//! Jasmin's receipt for a successful `submit_sm_resp` from `loop`'s "carrier"); an HTTP
//! `/send` gets its level-1 DLR (`message_status=ESME_ROK`), never a level-2 one. With
//! [`JasminOptions::terminal_receipts`] the loop user's messages go on through a second such
//! connector, `sink` (user and group `sink`, whose own messages go to `void`): the loop user then
//! gets a receipt from its carrier too, which Jasmin relays back along `loop`, so an SMPP submit
//! gets a second receipt (`stat:ACCEPTD err:099`) and an HTTP one a level-2 DLR.
//!
//! What Jasmin sent on for every message, the exact PDUs, is in [`Jasmin::received`].

#![allow(
    dead_code,
    reason = "the fixture's API serves the connectors' tests; each uses a part"
)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;

use broker::{BROKER, broker};
use daemon::{UNLOCKED_JASMIND, jasmin_cfg};
use jcli::JCli;
use pdu::parse_loop_log;
use process::{blocking, command, find_on_path, free_ports, python_of, spawn, terminate};

mod broker;
mod daemon;
mod jcli;
mod pdu;
mod peer;
mod process;
#[cfg(test)]
mod tests;

pub use pdu::{Concat, SubmitSm, decode};
pub use peer::{dlr_listener, esme_submit, field, http_send, ucs2};

/// The Jasmin user a test binds (SMPP) or calls `/send` (HTTP) as.
pub const USERNAME: &str = "kep";
/// Its password: SMPP's bind carries at most 8 characters of one.
pub const PASSWORD: &str = "kepsecr8";

const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How to set Jasmin up.
#[derive(Clone, Copy, Debug, Default)]
pub struct JasminOptions {
    /// Send the loop user's messages on through `sink` (see the module) rather than
    /// straight to `void`: every message then also gets a receipt from the `loop`
    /// connector's "carrier", relayed by Jasmin: a second SMPP receipt (`stat:ACCEPTD
    /// err:099`), and an HTTP DLR of level 2 (`message_status=ACCEPTD`, `id_smsc`, `sub`,
    /// `dlvrd`, `subdate`, `donedate`, `err`, `text`; its `connector` is the receipt's id, a
    /// quirk of Jasmin's).
    pub terminal_receipts: bool,
}

/// A running Jasmin: its own Redis and `jasmind`, on the shared RabbitMQ.
pub struct Jasmin {
    /// Jasmin's SMPP server.
    pub smpp_port: u16,
    /// Jasmin's HTTP API (`/send`, `/balance`, ...).
    pub http_port: u16,
    /// jCli, Jasmin's telnet console ([`Jasmin::jcli`]).
    pub jcli_port: u16,
    /// [`USERNAME`].
    pub username: String,
    /// [`PASSWORD`].
    pub password: String,
    options: JasminOptions,
    python: PathBuf,
    jasmind: PathBuf,
    redis: Option<Child>,
    redis_port: u16,
    /// Its RabbitMQ virtual host.
    vhost: String,
    daemon: Option<Child>,
    dir: tempfile::TempDir,
}

/// One message Jasmin sent on through the `loop` connector, as its carrier saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JasminSubmit {
    /// Jasmin's id for the message: the `message_id` of its `submit_sm_resp` to the SMPP
    /// client, or the id in the HTTP API's `Success "…"` answer. The receipts name it too.
    pub message_id: String,
    /// The `submit_sm` PDUs, in order: one, or one per part where Jasmin split the message
    /// (a long HTTP `/send`). An SMPP client's parts are messages of their own.
    pub pdus: Vec<SubmitSm>,
}

impl Jasmin {
    /// A Jasmin set up as the module says, ready for binds and `/send`s. Panics, with the
    /// logs, if anything fails; and, saying to run `./test`, if `jasmind.py` is not on `PATH`.
    pub async fn start() -> Jasmin {
        Self::start_with(JasminOptions::default()).await
    }

    pub async fn start_with(options: JasminOptions) -> Jasmin {
        let jasmind = find_on_path("jasmind.py").unwrap_or_else(|| {
            panic!(
                "jasmind.py is not on PATH: Jasmin 0.11.0 is a test peer that `./test` (README) \
                 installs, with rabbitmq-server and redis-server; run `./test -p kep-messaging`, \
                 or put the bin/ of a virtual environment with `pip install jasmin==0.11.0` first \
                 on PATH"
            )
        });
        let python = python_of(&jasmind);
        let redis_server = find_on_path("redis-server").unwrap_or_else(|| {
            panic!("redis-server is not installed: run `./test` (README), which installs it")
        });
        let vhost = blocking(|| broker().vhost()).await;
        let dir = tempfile::Builder::new()
            .prefix("kep-jasmin-")
            .tempdir()
            .expect("a temp dir for Jasmin");
        let [smpp, http, jcli, redis] = free_ports();
        for sub in ["store", "root"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        let path = dir.path();
        std::fs::write(path.join("jasmind-unlocked.py"), UNLOCKED_JASMIND).unwrap();

        let mut redis_cmd = command(&redis_server);
        redis_cmd
            .args([
                "--port",
                &redis.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(["--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(path)
            .arg("--logfile")
            .arg(path.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut jasmin = Jasmin {
            smpp_port: smpp,
            http_port: http,
            jcli_port: jcli,
            username: USERNAME.to_owned(),
            password: PASSWORD.to_owned(),
            options,
            python,
            jasmind,
            redis: Some(spawn(redis_cmd).expect("redis-server starts")),
            redis_port: redis,
            vhost,
            daemon: None,
            dir,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        jasmin.wait_port(redis, deadline, "redis").await;
        jasmin.configure(smpp, http, jcli);
        jasmin.spawn_daemon();
        jasmin.wait_port(jcli, deadline, "jCli").await;
        jasmin.set_up().await;
        jasmin.wait_ready(deadline).await;
        jasmin
    }

    /// Stops `jasmind` (SIGTERM, as an operator would; SIGKILL after 10 s), keeping its
    /// configuration, Redis, its RabbitMQ queues and logs: [`Jasmin::restart`] brings it back.
    pub async fn stop(&mut self) {
        if let Some(child) = self.daemon.take() {
            blocking(move || terminate(child, Duration::from_secs(10))).await;
        }
    }

    /// Kills `jasmind` at once (SIGKILL), as a crash would.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.daemon.take() {
            let _ = child.kill();
            blocking(move || {
                let _ = child.wait();
            })
            .await;
        }
    }

    /// Writes jasmin.cfg for these ports (its internal ones drawn anew).
    fn configure(&mut self, smpp: u16, http: u16, jcli: u16) {
        let [smpp_pb, cm, router] = free_ports();
        let ports = [smpp, smpp_pb, cm, router, http, jcli, self.redis_port];
        let cfg = jasmin_cfg(self.dir.path(), ports, broker(), &self.vhost);
        std::fs::write(self.dir.path().join("jasmin.cfg"), cfg).unwrap();
        (self.http_port, self.jcli_port) = (http, jcli);
    }

    /// Starts `jasmind` again (stopping it first if it runs) on the same SMPP port, with the
    /// configuration it persisted; returns once the `loop` connector is bound again. Its other
    /// ports are drawn anew: while it was down, a test running beside it may have taken one.
    pub async fn restart(&mut self) {
        self.stop().await;
        let deadline = Instant::now() + START_TIMEOUT;
        let [http, jcli] = free_ports();
        self.configure(self.smpp_port, http, jcli);
        self.spawn_daemon();
        self.wait_port(self.jcli_port, deadline, "jCli").await;
        self.wait_ready(deadline).await;
    }

    /// Whether `jasmind` runs (it has not been stopped, and has not died).
    pub fn is_running(&mut self) -> bool {
        self.daemon
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// `http://127.0.0.1:<http_port>`, the HTTP API's base.
    pub fn http_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    /// Adds another user in `kep`'s group (same routes and rights) and persists it.
    pub async fn add_user(&self, username: &str, password: &str) {
        assert!(
            password.len() <= 8,
            "SMPP carries passwords of 8 characters at most"
        );
        let lines = [
            "user -a".to_owned(),
            format!("username {username}"),
            format!("password {password}"),
            format!("uid {username}"),
            "gid kep".to_owned(),
            "ok".to_owned(),
            "persist".to_owned(),
        ];
        let out = self
            .jcli(&lines.iter().map(String::as_str).collect::<Vec<_>>())
            .await;
        if !out.contains("Successfully added User") {
            panic!("jCli did not add {username}:\n{out}\n{}", self.logs());
        }
    }

    /// Runs jCli commands in one session (as `jcliadmin`) and returns the transcript. Each
    /// line waits for the prompt that follows it.
    pub async fn jcli(&self, lines: &[&str]) -> String {
        let run = async {
            let mut session = JCli::connect(self.jcli_port).await?;
            for line in lines {
                session.send(line).await?;
            }
            let _ = session.stream.write_all(b"quit\r\n").await;
            Ok::<_, String>(session.transcript)
        };
        match run.await {
            Ok(transcript) => transcript,
            Err(e) => panic!("jCli: {e}\n{}", self.logs()),
        }
    }

    /// Every message Jasmin has sent on (across restarts), in the order it sent them: what
    /// it received, after its routing (an SMPP client's PDU passes unchanged; an HTTP `/send`
    /// is encoded and split here).
    pub fn received(&self) -> Vec<JasminSubmit> {
        let log = std::fs::read_to_string(self.dir.path().join("loop.log")).unwrap_or_default();
        parse_loop_log(&log)
    }

    /// Waits (up to 20 s) until a message that `matches` has been sent on, and returns it.
    pub async fn wait_received(&self, matches: impl Fn(&JasminSubmit) -> bool) -> JasminSubmit {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(s) = self.received().into_iter().find(|s| matches(s)) {
                return s;
            }
            if Instant::now() > deadline {
                panic!(
                    "Jasmin sent no such message on; it sent {:#?}\n{}",
                    self.received(),
                    self.logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (up to 20 s) for the message Jasmin calls `message_id`, every part of it: a
    /// long one's parts are submitted one by one.
    pub async fn wait_message(&self, message_id: &str) -> JasminSubmit {
        self.wait_received(|s| {
            let parts = s
                .pdus
                .first()
                .and_then(|p| p.concat())
                .map_or(1, |c| c.total as usize);
            s.message_id == message_id && s.pdus.len() >= parts
        })
        .await
    }

    /// The temp dir with Jasmin's configuration and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The tail of every log, for a failing test's message.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        let mut names: Vec<PathBuf> = std::fs::read_dir(self.dir.path())
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        names.retain(|p| p.extension().is_some_and(|e| e == "log" || e == "out"));
        names.sort();
        if let Some(b) = BROKER.get().and_then(|b| b.as_ref().ok()) {
            names.push(b.dir.join("rabbitmq.out"));
        }
        for path in names {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(40)..];
            let _ = writeln!(out, "==> {} <==\n{}", path.display(), tail.join("\n"));
        }
        out
    }
}

impl Drop for Jasmin {
    fn drop(&mut self) {
        if let Some(child) = self.daemon.take() {
            terminate(child, Duration::from_secs(5));
        }
        if let Some(child) = self.redis.take() {
            terminate(child, Duration::from_secs(5));
        }
    }
}

impl JasminSubmit {
    pub fn destination(&self) -> &str {
        &self.pdus[0].destination_addr
    }

    pub fn data_coding(&self) -> u8 {
        self.pdus[0].data_coding
    }

    /// The content: every part's payload (its UDH left out), concatenated.
    pub fn content(&self) -> Vec<u8> {
        self.pdus
            .iter()
            .flat_map(|p| p.payload().to_vec())
            .collect()
    }

    /// [`JasminSubmit::content`] decoded by its `data_coding`.
    pub fn text(&self) -> String {
        decode(self.data_coding(), &self.content())
    }
}
