//! The ESME: kep's session to a carrier's SMSC. One task owns the connection (`task`
//! connects and binds, `session` runs it while bound); `submit` callers reach it through a
//! channel and wait for their own submit_sm_resp.

mod session;
mod submit;
mod task;

use std::{
    fmt,
    num::NonZeroU32,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU8, AtomicU64, Ordering},
    },
    time::Duration,
};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use kep_core::retry::Backoff;
use serde::{Deserialize, Serialize};
use tokio::{
    sync::{Semaphore, mpsc, oneshot, watch},
    task::JoinHandle,
    time::Instant,
};
use tokio_util::sync::CancellationToken;

use crate::{receipt::DeliveryReceipt, text::DataCoding};

/// How kep binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BindMode {
    /// bind_transceiver: submits out, receipts back on the same session.
    #[default]
    Transceiver,
    /// bind_transmitter: submits only (the SMSC sends receipts elsewhere, if at all).
    Transmitter,
}

/// How a text longer than one short_message is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LongText {
    /// Concatenated parts, each with a 6-octet UDH.
    #[default]
    Udh,
    /// One submit_sm with the whole text in the message_payload TLV.
    Payload,
}

/// One carrier's SMPP session settings.
#[derive(Clone)]
pub struct EsmeConfig {
    /// The carrier's name, for logs.
    pub name: String,
    pub host: String,
    pub port: u16,
    pub system_id: String,
    pub password: String,
    pub system_type: String,
    pub bind: BindMode,
    /// The most submit_sm awaiting their resp at once.
    pub window: usize,
    /// An enquire_link goes out after this long without a PDU from the SMSC.
    pub enquire_link: Duration,
    /// submit_sm PDUs a second at most; 0: no limit.
    pub max_rate_per_s: u32,
    pub data_coding: DataCoding,
    pub long_text: LongText,
    /// The waits between connection attempts.
    pub reconnect: Backoff,
    /// How long a bind_resp, submit_sm_resp or enquire_link_resp may take.
    pub response_timeout: Duration,
}

impl Default for EsmeConfig {
    /// The contract's defaults, for an SMSC on 127.0.0.1:2775.
    fn default() -> Self {
        EsmeConfig {
            name: "smpp".into(),
            host: "127.0.0.1".into(),
            port: 2775,
            system_id: String::new(),
            password: String::new(),
            system_type: String::new(),
            bind: BindMode::Transceiver,
            window: 64,
            enquire_link: Duration::from_secs(30),
            max_rate_per_s: 0,
            data_coding: DataCoding::Ucs2,
            long_text: LongText::Udh,
            reconnect: Backoff {
                first: Duration::from_millis(200),
                max: Duration::from_secs(10),
            },
            response_timeout: Duration::from_secs(10),
        }
    }
}

impl fmt::Debug for EsmeConfig {
    // Without the password: configs end up in logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EsmeConfig")
            .field("name", &self.name)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("system_id", &self.system_id)
            .field("system_type", &self.system_type)
            .field("bind", &self.bind)
            .field("window", &self.window)
            .field("enquire_link", &self.enquire_link)
            .field("max_rate_per_s", &self.max_rate_per_s)
            .field("data_coding", &self.data_coding)
            .field("long_text", &self.long_text)
            .field("reconnect", &self.reconnect)
            .field("response_timeout", &self.response_timeout)
            .finish_non_exhaustive()
    }
}

/// Why a submit failed.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// Not bound, the connection dropped before the resp, or a resp timed out: try again
    /// later (the message may have gone: at-least-once).
    #[error("carrier unavailable: {0}")]
    Unavailable(String),
    /// The SMSC refused the submit for good (any other non-zero command_status, or
    /// generic_nack).
    #[error("carrier refused the message: {name} (0x{status:08x})")]
    Rejected { status: u32, name: String },
    /// The text (or an address) cannot be put in a submit_sm: a character the data coding
    /// lacks, an address longer than SMPP allows...
    #[error("cannot encode the text: {0}")]
    Encoding(String),
}

/// Where the session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionState {
    /// Connecting, binding, or waiting before the next attempt.
    Connecting,
    Bound,
    Stopped,
}

/// The session's counters since start.
#[derive(Debug, Clone, Serialize)]
pub struct EsmeStats {
    pub state: SessionState,
    /// submit_sm sent whose resp has not come.
    pub window_in_use: usize,
    /// submit_sm PDUs sent (a resend after a throttle counts again).
    pub submitted: u64,
    /// submit_sm_resp with ESME_ROK.
    pub acknowledged: u64,
    /// submit_sm_resp with another status than ESME_ROK or a throttle, and generic_nack.
    pub rejected: u64,
    /// submit_sm_resp with ESME_RTHROTTLED or ESME_RMSGQFUL.
    pub throttled: u64,
    /// Connection attempts after the first.
    pub reconnects: u64,
    /// Delivery receipts received.
    pub receipts: u64,
    /// The last reason the session was not bound (a refused bind, a lost connection);
    /// cleared by a bind.
    pub last_error: Option<String>,
}

/// A submit_sm handed to the session task, with the window slot it holds until its resp.
struct Request {
    submit: rusmpp::pdus::SubmitSm,
    permit: tokio::sync::OwnedSemaphorePermit,
    reply: oneshot::Sender<Outcome>,
}

/// What became of one submit_sm.
#[derive(Debug)]
enum Outcome {
    Accepted(String),
    /// A submit_sm_resp with this non-zero status.
    Refused(u32),
    /// A generic_nack with this status.
    Nacked(u32),
    Unavailable(String),
}

/// What the caller side and the session task share.
struct Shared {
    config: EsmeConfig,
    state: watch::Sender<SessionState>,
    window: Arc<Semaphore>,
    /// Shared by the binds of one carrier: `max_rate_per_s` is the carrier's.
    limiter: Option<Arc<DefaultDirectRateLimiter>>,
    stop: CancellationToken,
    submitted: AtomicU64,
    acknowledged: AtomicU64,
    rejected: AtomicU64,
    throttled: AtomicU64,
    reconnects: AtomicU64,
    receipts: AtomicU64,
    last_error: Mutex<Option<String>>,
    pause: Mutex<Pause>,
    udh_reference: AtomicU8,
}

/// A pause of submits after the SMSC throttled: starts at [`PAUSE_FIRST`] and doubles, up
/// to [`PAUSE_MAX`], for each throttle that comes after the previous pause ended; an
/// accepted submit starts it over.
#[derive(Default)]
struct Pause {
    until: Option<Instant>,
    level: u32,
}

const PAUSE_FIRST: Duration = Duration::from_millis(250);
const PAUSE_MAX: Duration = Duration::from_secs(2);

impl Shared {
    fn set_error(&self, error: impl Into<String>) {
        *self.last_error.lock().expect("last_error lock") = Some(error.into());
    }

    fn throttle(&self) {
        let now = Instant::now();
        let mut pause = self.pause.lock().expect("pause lock");
        // Throttles of submits sent before the pause began do not lengthen it.
        if pause.until.is_some_and(|until| until > now) {
            return;
        }
        let wait = PAUSE_FIRST
            .saturating_mul(1 << pause.level.min(8))
            .min(PAUSE_MAX);
        pause.level += 1;
        pause.until = Some(now + wait);
    }

    fn accepted(&self) {
        let mut pause = self.pause.lock().expect("pause lock");
        pause.level = 0;
    }

    fn paused_until(&self) -> Option<Instant> {
        let pause = self.pause.lock().expect("pause lock");
        pause.until.filter(|until| *until > Instant::now())
    }
}

/// `max_rate_per_s` submit_sm a second, evenly spread; 0: none.
fn rate_limiter(max_rate_per_s: u32) -> Option<Arc<DefaultDirectRateLimiter>> {
    NonZeroU32::new(max_rate_per_s).map(|rate| {
        // A burst of a twentieth of a second: evenly spread, as carriers count per
        // second over sliding windows, without a timer wake-up per PDU at high rates.
        let burst = NonZeroU32::new(rate.get() / 20).unwrap_or(NonZeroU32::MIN);
        Arc::new(RateLimiter::direct(
            Quota::per_second(rate).allow_burst(burst),
        ))
    })
}

/// kep's session to one carrier's SMSC. Cheap to clone; the session ends at [`Esme::stop`]
/// or when the last clone is dropped.
#[derive(Clone)]
pub struct Esme {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    requests: mpsc::UnboundedSender<Request>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl fmt::Debug for Esme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Esme")
            .field("name", &self.inner.shared.config.name)
            .field("state", &*self.inner.shared.state.borrow())
            .finish_non_exhaustive()
    }
}

impl Esme {
    /// Spawns the session (on the current tokio runtime): connect, bind, keep bound
    /// (enquire_link after `enquire_link` of silence; no enquire_link_resp within
    /// `response_timeout` drops the connection), and reconnect with back-off until
    /// [`Esme::stop`]. Delivery receipts go to `receipts`; every deliver_sm is answered
    /// ESME_ROK.
    pub fn start(config: EsmeConfig, receipts: mpsc::UnboundedSender<DeliveryReceipt>) -> Esme {
        let limiter = rate_limiter(config.max_rate_per_s);
        Esme::start_with(config, limiter, receipts)
    }

    /// Spawns `binds` sessions (at least one) with the same settings, as [`Esme::start`]
    /// does one: each has its own window, and `max_rate_per_s` holds for them together.
    /// Their receipts all go to `receipts`.
    pub fn start_binds(
        config: &EsmeConfig,
        binds: usize,
        receipts: &mpsc::UnboundedSender<DeliveryReceipt>,
    ) -> Vec<Esme> {
        let limiter = rate_limiter(config.max_rate_per_s);
        (0..binds.max(1))
            .map(|_| Esme::start_with(config.clone(), limiter.clone(), receipts.clone()))
            .collect()
    }

    fn start_with(
        config: EsmeConfig,
        limiter: Option<Arc<DefaultDirectRateLimiter>>,
        receipts: mpsc::UnboundedSender<DeliveryReceipt>,
    ) -> Esme {
        let window = config.window.max(1);
        let shared = Arc::new(Shared {
            state: watch::Sender::new(SessionState::Connecting),
            window: Arc::new(Semaphore::new(window)),
            limiter,
            stop: CancellationToken::new(),
            submitted: AtomicU64::new(0),
            acknowledged: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            throttled: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
            receipts: AtomicU64::new(0),
            last_error: Mutex::new(None),
            pause: Mutex::new(Pause::default()),
            udh_reference: AtomicU8::new(0),
            config,
        });
        let (requests, incoming) = mpsc::unbounded_channel();
        let task = tokio::spawn(task::run(shared.clone(), incoming, receipts));
        Esme {
            inner: Arc::new(Inner {
                shared,
                requests,
                task: Mutex::new(Some(task)),
            }),
        }
    }

    /// The counters and state now.
    pub fn stats(&self) -> EsmeStats {
        let shared = &self.inner.shared;
        let window = shared.config.window.max(1);
        EsmeStats {
            state: *shared.state.borrow(),
            window_in_use: window.saturating_sub(shared.window.available_permits()),
            submitted: shared.submitted.load(Ordering::Relaxed),
            acknowledged: shared.acknowledged.load(Ordering::Relaxed),
            rejected: shared.rejected.load(Ordering::Relaxed),
            throttled: shared.throttled.load(Ordering::Relaxed),
            reconnects: shared.reconnects.load(Ordering::Relaxed),
            receipts: shared.receipts.load(Ordering::Relaxed),
            last_error: shared.last_error.lock().expect("last_error lock").clone(),
        }
    }

    /// Waits until the session is bound, up to `timeout`; whether it is.
    pub async fn wait_bound(&self, timeout: Duration) -> bool {
        let mut state = self.inner.shared.state.subscribe();
        let bound = state.wait_for(|s| *s != SessionState::Connecting);
        matches!(
            tokio::time::timeout(timeout, bound).await,
            Ok(Ok(s)) if *s == SessionState::Bound
        )
    }

    /// Unbinds (waiting up to a second for the unbind_resp) and ends the session; submits
    /// still waiting fail [`SubmitError::Unavailable`].
    pub async fn stop(&self) {
        let shared = &self.inner.shared;
        shared.stop.cancel();
        shared.window.close();
        let task = self.inner.task.lock().expect("task lock").take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}
