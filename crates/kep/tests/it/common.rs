//! What the tests of the real `kep` binary share: `kep serve` on port 0, the CLI and plain
//! HTTP calls to it.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const KEP: &str = env!("CARGO_BIN_EXE_kep");

pub struct Server {
    pub child: Child,
    pub data_dir: PathBuf,
    pub admin: String,
    pub live: String,
    pub stdout: String,
    /// `urls.json`: every listener's URL (`https` where it speaks TLS).
    urls: Value,
}

impl Server {
    /// What it logged so far (its stderr, which goes to `kep.log` in its data dir: a pipe
    /// nobody reads would stop it once full).
    pub fn logs(&self) -> String {
        std::fs::read_to_string(self.data_dir.join("kep.log")).unwrap_or_default()
    }

    /// The base URL of a listener: `admin`, `live`, `adapter`, `messaging` or `gateway`.
    pub fn url(&self, listener: &str) -> String {
        self.urls[listener].as_str().unwrap().to_owned()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn serve(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
    serve_with(Command::new(KEP), data_dir, extra, env)
}

/// `kep serve` expected to refuse to start: what it wrote to stderr.
pub fn serve_refused(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> String {
    let mut child = Command::new(KEP)
        .args(["serve", "--data-dir"])
        .arg(data_dir)
        .args(extra)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = eventually_blocking(Duration::from_secs(30), "kep serve refuses", || {
        child.try_wait().unwrap().ok_or("still running")
    });
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!status.success(), "{err}");
    err
}

/// [`serve`] with `kep` started by `cmd` (`kep` itself, or a shell that runs it), which
/// gets `serve --data-dir …` as its arguments.
pub fn serve_with(
    mut cmd: Command,
    data_dir: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Server {
    let _ = std::fs::remove_file(data_dir.join("addresses.json"));
    cmd.args(["serve", "--data-dir"]).arg(data_dir).args(extra);
    for (k, v) in env {
        cmd.env(k, v);
    }
    std::fs::create_dir_all(data_dir).unwrap();
    let log = std::fs::File::options()
        .create(true)
        .append(true)
        .open(data_dir.join("kep.log"))
        .unwrap();
    let mut child = cmd.stdout(Stdio::piped()).stderr(log).spawn().unwrap();
    let urls = eventually_blocking(Duration::from_secs(30), "kep serve starts", || {
        // Written before addresses.json.
        if std::fs::exists(data_dir.join("addresses.json")).unwrap() {
            let urls = std::fs::read(data_dir.join("urls.json")).unwrap();
            return Ok(serde_json::from_slice::<Value>(&urls).unwrap());
        }
        if let Some(status) = child.try_wait().unwrap() {
            let err = std::fs::read_to_string(data_dir.join("kep.log")).unwrap_or_default();
            panic!("kep serve exited with {status}: {err}");
        }
        Err("no addresses.json yet")
    });
    // Whatever the server printed before it listened (the operator token line, if any).
    let stdout = child.stdout.take().unwrap();
    let printed = read_available(stdout);
    Server {
        child,
        data_dir: data_dir.to_owned(),
        admin: urls["admin"].as_str().unwrap().to_owned(),
        live: urls["live"].as_str().unwrap().to_owned(),
        stdout: printed,
        urls,
    }
}

/// Lines already written to `out`, without waiting for more than a moment.
fn read_available(out: ChildStdout) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut text = String::new();
    while let Ok(line) = rx.recv_timeout(Duration::from_millis(300)) {
        text.push_str(&line);
        text.push('\n');
    }
    text
}

/// A free port on 127.0.0.1, for a test's own server (an agent, a receiver, a container's
/// published port).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Every listener on a free port (`addresses.json` says which).
pub fn port0() -> Vec<&'static str> {
    vec!["--port-base", "0"]
}

/// Runs a CLI command against the server; its stdout parsed as JSON.
/// An API client made with the CLI (`kep msg client`), whose token `kep msg token` then
/// keeps for the other `kep msg` commands, as a user starts; the token's answer.
pub fn msg_client(srv: &Server, name: &str) -> Value {
    let client = cli(srv, &["msg", "client", "--name", name]);
    cli(
        srv,
        &[
            "msg",
            "token",
            "--client-id",
            client["client_id"].as_str().unwrap(),
            "--client-secret",
            client["client_secret"].as_str().unwrap(),
        ],
    )
}

/// A live service made with the CLI (`kep live service create`) and provisioned
/// (`kep live provision`, whose token the other `kep live` commands then use); its secrets.
pub fn live_service(srv: &Server, id: &str) -> Value {
    let svc = cli(srv, &["live", "service", "create", "--id", id]);
    let admin_secret = svc["adminSecret"].as_str().unwrap();
    cli(
        srv,
        &[
            "live",
            "provision",
            "--service-id",
            id,
            "--admin-secret",
            admin_secret,
        ],
    );
    svc
}

/// An SMS sent with the CLI (`kep msg send-xms`, the kept token) to 821012345678 from
/// 0212345678; its answer.
pub fn msg_send(srv: &Server, cid: &str, text: &str) -> Value {
    let (to, from) = ("821012345678", "0212345678");
    cli(
        srv,
        &[
            "msg", "send-xms", "--to", to, "--from", from, "--text", text, "--cid", cid,
        ],
    )
}

pub fn cli(srv: &Server, args: &[&str]) -> Value {
    let data_dir = srv.data_dir.display().to_string();
    cli_with(&[("KEP_DATA_DIR", data_dir)], args)
}

/// `kep ARGS` with `env` added (the data dir, or the URLs and token of a server elsewhere),
/// which must succeed: its answer as JSON.
pub fn cli_with(env: &[(&str, String)], args: &[&str]) -> Value {
    let out = Command::new(KEP)
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kep {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "kep {args:?}: {e}: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

pub fn http(method: &str, url: &str, token: Option<&str>, body: Option<&str>) -> (u16, Value) {
    let client = reqwest::blocking::Client::new();
    let mut req = client.request(method.parse().unwrap(), url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req
            .header("content-type", "application/json")
            .body(b.to_owned());
    }
    let res = req.send().unwrap();
    (res.status().as_u16(), res.json().unwrap_or(Value::Null))
}

/// Waits with the CLI (as a user would) until the deployment is Available: up to three
/// minutes, as an instance that loads TensorFlow or torch while the other tests load theirs
/// on the same 2 cores has taken over one.
pub fn wait_available(srv: &Server, endpoint: &str, deployment: &str) {
    let waited = cli(
        srv,
        &[
            "serving",
            "deployment",
            "wait",
            endpoint,
            deployment,
            "--timeout-s",
            "180",
        ],
    );
    assert_eq!(waited["state"], "Available", "{endpoint}/{deployment}");
}

/// Stops `kep serve` with SIGTERM when dropped, so that it stops the instance processes it
/// started (they run in their own process groups, and would outlive a SIGKILL).
pub struct StopsGracefully(pub Server);

impl Drop for StopsGracefully {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.child.id().to_string()])
            .status();
        // Polls for the exit, for up to 15 s; no `eventually`, which panics (a drop may run
        // while a failed test unwinds).
        let deadline = Instant::now() + Duration::from_secs(15);
        while matches!(self.0.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A long-running CLI process (`kep live join`, `kep adapter agent`), read line by line.
pub struct Joiner {
    pub child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Joiner {
    pub fn start(srv: &Server, args: &[&str]) -> Self {
        Self::command(srv, &[&["live", "join"], args].concat())
    }

    pub fn command(srv: &Server, args: &[&str]) -> Self {
        let mut child = Command::new(KEP)
            .args(args)
            .env("KEP_DATA_DIR", &srv.data_dir)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Joiner { child, lines }
    }

    pub fn next(&self) -> Value {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(30))
            .expect("a line from the CLI within 30 s");
        serde_json::from_str(&line).unwrap()
    }

    pub fn exits(mut self) {
        eventually_blocking(Duration::from_secs(30), "the CLI exits", || {
            match self.child.try_wait().unwrap() {
                Some(_) => Ok(()),
                None => Err("still running"),
            }
        });
    }
}

/// Runs a CLI command expected to fail; its stderr.
pub fn cli_fails(srv: &Server, args: &[&str]) -> String {
    let out = Command::new(KEP)
        .args(args)
        .env("KEP_DATA_DIR", &srv.data_dir)
        .output()
        .unwrap();
    assert!(!out.status.success(), "kep {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub use kep_testkit::eventually;

/// [`eventually`] for the tests that block: retries `check` until it is `Ok`, waiting as
/// `eventually` does; past `timeout`, panics with `what` and the last `Err`.
pub fn eventually_blocking<T, E: std::fmt::Display>(
    timeout: Duration,
    what: &str,
    mut check: impl FnMut() -> Result<T, E>,
) -> T {
    let (deadline, mut pause) = (Instant::now() + timeout, Duration::from_millis(10));
    loop {
        match check() {
            Ok(done) => return done,
            Err(last) if Instant::now() >= deadline => {
                panic!("{what}: not within {timeout:?}; last seen: {last}")
            }
            Err(_) => std::thread::sleep(pause),
        }
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

/// A webhook receiver on `listener`: each request's `Kep-Signature` and body, answered
/// 204.
pub fn receive_webhooks(listener: TcpListener, taken: Arc<Mutex<Vec<(String, String)>>>) {
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            let mut reader = BufReader::new(conn);
            let (mut signature, mut length) = (String::new(), 0);
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                let (name, value) = line.split_once(':').unwrap_or((&line, ""));
                match name.to_ascii_lowercase().as_str() {
                    "kep-signature" => signature = value.trim().to_owned(),
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    _ => {}
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_err() {
                continue;
            }
            taken
                .lock()
                .unwrap()
                .push((signature, String::from_utf8(body).unwrap()));
            let _ = reader.get_mut().write_all(
                b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
        }
    });
}
