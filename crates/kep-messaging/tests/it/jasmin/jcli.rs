use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{Jasmin, PASSWORD, USERNAME};

const JCLI_USERNAME: &str = "jcliadmin";
const JCLI_PASSWORD: &str = "jclipwd";

/// A jCli session: telnet (every option refused) with a terminal's escapes; `Authentication
/// required.`, then the prompts `Password: ` and `jcli : ` (`> ` while adding or updating
/// something).
pub(super) struct JCli {
    pub(super) stream: TcpStream,
    pub(super) transcript: String,
    telnet: Vec<u8>,
}

impl JCli {
    pub(super) async fn connect(port: u16) -> Result<JCli, String> {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| e.to_string())?;
        let mut s = JCli {
            stream,
            transcript: String::new(),
            telnet: Vec::new(),
        };
        // No prompt for the username: jCli asks for it with a line.
        s.until(&["Authentication required."]).await?;
        s.write(JCLI_USERNAME).await?;
        s.until(&["Password:"]).await?;
        s.write(JCLI_PASSWORD).await?;
        s.until(&["jcli :"]).await?;
        Ok(s)
    }

    /// Sends a line and returns what came back up to the next prompt.
    pub(super) async fn send(&mut self, line: &str) -> Result<String, String> {
        self.write(line).await?;
        self.until(&["jcli :", ">"]).await
    }

    async fn write(&mut self, line: &str) -> Result<(), String> {
        self.stream
            .write_all(format!("{line}\r\n").as_bytes())
            .await
            .map_err(|e| e.to_string())
    }

    async fn until(&mut self, prompts: &[&str]) -> Result<String, String> {
        let mut text = String::new();
        let mut buf = [0u8; 4096];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            // A prompt ends with its space (a line with its newline).
            let end = text.trim_end();
            if prompts.iter().any(|p| end.ends_with(p)) && text.ends_with([' ', '\n']) {
                self.transcript.push_str(&text);
                return Ok(text);
            }
            let n = tokio::time::timeout_at(deadline, self.stream.read(&mut buf))
                .await
                .map_err(|_| format!("no prompt after {:?}", self.transcript.clone() + &text))?
                .map_err(|e| e.to_string())?;
            if n == 0 {
                return Err(format!(
                    "jCli closed after {:?}",
                    self.transcript.clone() + &text
                ));
            }
            let (data, reply) = self.untelnet(&buf[..n]);
            if !reply.is_empty() {
                self.stream
                    .write_all(&reply)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            text.push_str(&strip_escapes(&String::from_utf8_lossy(&data)));
        }
    }

    /// Takes the telnet commands out (carried over between reads), refusing every option.
    fn untelnet(&mut self, input: &[u8]) -> (Vec<u8>, Vec<u8>) {
        const IAC: u8 = 255;
        let mut bytes = std::mem::take(&mut self.telnet);
        bytes.extend_from_slice(input);
        let (mut data, mut reply) = (Vec::new(), Vec::new());
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] != IAC {
                data.push(bytes[i]);
                i += 1;
                continue;
            }
            let Some(&cmd) = bytes.get(i + 1) else { break };
            match cmd {
                IAC => {
                    data.push(IAC);
                    i += 2;
                }
                251..=254 => {
                    let Some(&opt) = bytes.get(i + 2) else { break };
                    // WILL → DONT, DO → WONT; WONT and DONT need no answer.
                    match cmd {
                        251 => reply.extend_from_slice(&[IAC, 254, opt]),
                        253 => reply.extend_from_slice(&[IAC, 252, opt]),
                        _ => {}
                    }
                    i += 3;
                }
                250 => {
                    // Subnegotiation: up to IAC SE.
                    match bytes[i..].windows(2).position(|w| w == [IAC, 240]) {
                        Some(p) => i += p + 2,
                        None => break,
                    }
                }
                _ => i += 2,
            }
        }
        self.telnet = bytes[i..].to_vec();
        (data, reply)
    }
}

fn strip_escapes(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            if c != '\r' {
                out.push(c);
            }
            continue;
        }
        if chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        } else {
            chars.next();
        }
    }
    out
}

impl Jasmin {
    pub(super) async fn set_up(&self) {
        let smpp = self.smpp_port.to_string();
        let dir = self.dir.path().display().to_string();
        let mut lines: Vec<String> = Vec::new();
        let mut add = |block: &[&str]| lines.extend(block.iter().map(|s| s.to_string()));
        for gid in ["kep", "loop", "sink"] {
            add(&["group -a", &format!("gid {gid}"), "ok"]);
        }
        for (user, password, gid) in [
            (USERNAME, PASSWORD, "kep"),
            ("loop", "looppwd", "loop"),
            ("sink", "sinkpwd", "sink"),
        ] {
            add(&[
                "user -a",
                &format!("username {user}"),
                &format!("password {password}"),
                &format!("uid {user}"),
                &format!("gid {gid}"),
                "ok",
            ]);
        }
        // `loop` and `sink` bind back to this Jasmin; `void` is never started.
        for (cid, user, password) in [
            ("loop", "loop", "looppwd"),
            ("sink", "sink", "sinkpwd"),
            ("void", "void", "void"),
        ] {
            add(&[
                "smppccm -a",
                &format!("cid {cid}"),
                "host 127.0.0.1",
                &format!("port {smpp}"),
                &format!("username {user}"),
                &format!("password {password}"),
                "submit_throughput 0",
                "con_fail_delay 1",
                "con_loss_delay 1",
                "requeue_delay 1",
                "loglevel 10",
                "logrotate D",
                &format!("logfile {dir}/{cid}.log"),
                "ok",
            ]);
        }
        for gid in ["loop", "sink"] {
            add(&[
                "filter -a",
                &format!("fid {gid}"),
                "type GroupFilter",
                &format!("gid {gid}"),
                "ok",
            ]);
        }
        // The loop user's messages go to `void` (or to `sink`, whose user's go to `void`).
        let loop_to = if self.options.terminal_receipts {
            "sink"
        } else {
            "void"
        };
        for (order, fid, to) in [("20", "sink", "void"), ("10", "loop", loop_to)] {
            let (filters, connector) = (format!("filters {fid}"), format!("connector smppc({to})"));
            add(&[
                "mtrouter -a",
                "type StaticMTRoute",
                &format!("order {order}"),
                &filters,
            ]);
            add(&[&connector, "rate 0", "ok"]);
        }
        add(&[
            "mtrouter -a",
            "type DefaultRoute",
            "connector smppc(loop)",
            "rate 0",
            "ok",
        ]);
        add(&["smppccm -1 loop"]);
        if self.options.terminal_receipts {
            add(&["smppccm -1 sink"]);
        }
        add(&["persist"]);

        let run = async {
            let mut session = JCli::connect(self.jcli_port).await?;
            let mut i = 0;
            let mut block_start = 0;
            let mut retries = 0;
            while let Some(line) = lines.get(i) {
                if line.ends_with(" -a") {
                    block_start = i;
                }
                let answer = session.send(line).await?;
                // Just after start, jasmind may take jCli before its connector manager has
                // its AMQP channel: that block is cancelled (`ko`) and sent again.
                if line == "ok" && answer.contains("Failed adding connector") && retries < 20 {
                    session.send("ko").await?;
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    (i, retries) = (block_start, retries + 1);
                    continue;
                }
                i += 1;
                let failed = if line == "ok" {
                    !answer.contains("Successfully")
                } else if line.starts_with("smppccm -1") {
                    !answer.contains("Successfully started")
                } else if line == "persist" {
                    answer.contains("Failed") || !answer.contains("persisted")
                } else {
                    ["Unknown", "Invalid", "Error", "error", "Failed"]
                        .iter()
                        .any(|w| answer.contains(w))
                };
                if failed {
                    return Err(format!("`{line}` was answered {answer:?}"));
                }
            }
            let _ = session.stream.write_all(b"quit\r\n").await;
            Ok::<_, String>(())
        };
        if let Err(e) = run.await {
            panic!("Jasmin's setup over jCli failed: {e}\n{}", self.logs());
        }
    }

    /// Until the connectors that should be are bound, and the users are there (after a
    /// restart jasmind loads its persisted configuration on its own, a moment after jCli
    /// listens).
    pub(super) async fn wait_ready(&mut self, deadline: Instant) {
        let mut connectors = vec!["loop"];
        if self.options.terminal_receipts {
            connectors.push("sink");
        }
        let mut last = String::new();
        loop {
            if let Ok(mut session) = JCli::connect(self.jcli_port).await {
                let listed = async {
                    let c = session.send("smppccm -l").await?;
                    let u = session.send("user -l").await?;
                    let _ = session.stream.write_all(b"quit\r\n").await;
                    Ok::<_, String>((c, u))
                };
                if let Ok((c, u)) = listed.await {
                    let bound = connectors.iter().all(|cid| {
                        c.lines().any(|l| {
                            let mut w = l.split_whitespace();
                            w.next() == Some(&format!("#{cid}"))
                                && w.next() == Some("started")
                                && w.next() == Some("BOUND_TRX")
                        })
                    });
                    let users = u.lines().any(|l| l.starts_with(&format!("#{USERNAME} ")));
                    if bound && users {
                        return;
                    }
                    last = format!("{c}\n{u}");
                }
            }
            if !self.is_running() || Instant::now() > deadline {
                panic!("Jasmin's connectors did not bind:\n{last}\n{}", self.logs());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
