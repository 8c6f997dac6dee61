//! Readiness and liveness probes: HTTP GET (a 2xx or 3xx status is healthy) or a TCP
//! connection, run on their own task at the probe's interval.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::task::AbortOnDropHandle;

use crate::deployment::{Probe, TcpProbe};

/// When a deployment sets no readiness probe, an instance is ready once its port accepts.
pub const DEFAULT_INTERVAL_S: f64 = 1.0;
pub const DEFAULT_TIMEOUT_S: f64 = 1.0;
pub const DEFAULT_FAILURE_THRESHOLD: u32 = 3;

#[derive(Debug, Clone)]
pub enum Check {
    Http(String),
    Tcp,
}

/// A probe with its defaults filled in.
#[derive(Debug, Clone)]
pub struct ProbeSpec {
    pub check: Check,
    pub interval: Duration,
    pub timeout: Duration,
    pub failure_threshold: u32,
    pub initial_delay: Duration,
}

impl ProbeSpec {
    /// An HTTP GET of `path` every half second: how the platform probes its model servers.
    pub fn http(path: String) -> Self {
        ProbeSpec {
            check: Check::Http(path),
            interval: Duration::from_millis(500),
            timeout: Duration::from_secs_f64(DEFAULT_TIMEOUT_S),
            failure_threshold: DEFAULT_FAILURE_THRESHOLD,
            initial_delay: Duration::ZERO,
        }
    }

    pub fn tcp() -> Self {
        ProbeSpec::from(&Probe {
            http: None,
            tcp: Some(TcpProbe {}),
            interval_s: None,
            timeout_s: None,
            failure_threshold: None,
            initial_delay_s: None,
        })
    }
}

impl From<&Probe> for ProbeSpec {
    fn from(p: &Probe) -> Self {
        let secs = |v: Option<f64>, d: f64| Duration::from_secs_f64(v.unwrap_or(d));
        ProbeSpec {
            check: match &p.http {
                Some(h) => Check::Http(h.path.clone()),
                None => Check::Tcp,
            },
            interval: secs(p.interval_s, DEFAULT_INTERVAL_S),
            timeout: secs(p.timeout_s, DEFAULT_TIMEOUT_S),
            failure_threshold: p.failure_threshold.unwrap_or(DEFAULT_FAILURE_THRESHOLD),
            initial_delay: secs(p.initial_delay_s, 0.0),
        }
    }
}

/// Probes `port` until the handle is dropped; each outcome arrives on the receiver.
pub fn spawn(
    spec: ProbeSpec,
    port: u16,
    http: reqwest::Client,
) -> (AbortOnDropHandle<()>, mpsc::Receiver<Result<(), String>>) {
    let (tx, rx) = mpsc::channel(4);
    let task = tokio::spawn(async move {
        tokio::time::sleep(spec.initial_delay).await;
        let mut tick = tokio::time::interval(spec.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let outcome =
                match tokio::time::timeout(spec.timeout, check(&spec.check, port, &http)).await {
                    Ok(r) => r,
                    Err(_) => Err(format!("no answer within {:?}", spec.timeout)),
                };
            if tx.send(outcome).await.is_err() {
                return;
            }
        }
    });
    (AbortOnDropHandle::new(task), rx)
}

async fn check(check: &Check, port: u16, http: &reqwest::Client) -> Result<(), String> {
    match check {
        Check::Tcp => tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .map(drop)
            .map_err(|e| format!("TCP connect: {e}")),
        Check::Http(path) => {
            let res = http
                .get(format!("http://127.0.0.1:{port}{path}"))
                .send()
                .await
                .map_err(|e| format!("HTTP GET {path}: {}", root_cause(&e)))?;
            let status = res.status();
            if status.is_success() || status.is_redirection() {
                Ok(())
            } else {
                Err(format!("HTTP GET {path}: status {}", status.as_u16()))
            }
        }
    }
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// The probes' HTTP client: a fresh connection per probe, as a kubelet makes, and redirects
/// counted as healthy answers rather than followed. Each probe is bounded by its own timeout.
pub fn http_client() -> reqwest::Client {
    kep_core::outbound::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("building the probe client")
}
