//! A small SMSC, for tests and benchmarks: a real TCP server speaking SMPP 3.4. It binds
//! ESMEs that give its credentials, answers every submit_sm with a fresh message_id and,
//! when the behaviour says so, sends a delivery receipt for it.

mod session;

use std::{
    collections::HashMap,
    fmt,
    net::SocketAddr,
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use rusmpp::pdus::DeliverSm;
use tokio::{net::TcpListener, sync::mpsc};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::warn;

use crate::receipt::MessageState;
use crate::text;

/// The receipt state for a submit to a destination; None: no receipt.
pub type ReceiptFor = Arc<dyn Fn(&str) -> Option<MessageState> + Send + Sync>;

/// Sessions that take deliver_sm, by system_id: each session's id and its inbox.
type Receivers = HashMap<String, Vec<(u64, mpsc::UnboundedSender<DeliverSm>)>>;

/// How the SMSC answers.
#[derive(Clone)]
pub struct SmscBehaviour {
    /// The receipt sent for a submit to this destination; None: no receipt.
    pub receipt: ReceiptFor,
    /// The first `throttle_first` submit_sm get ESME_RTHROTTLED.
    pub throttle_first: usize,
    /// A bind with other credentials is refused ESME_RINVPASWD.
    pub system_id: String,
    pub password: String,
    /// Keep every submit received (tests); off in benchmarks.
    pub record: bool,
}

impl Default for SmscBehaviour {
    /// Every submit delivered, nothing throttled, credentials `kep` / `secret`, recorded.
    fn default() -> Self {
        SmscBehaviour {
            receipt: Arc::new(|_| Some(MessageState::Delivered)),
            throttle_first: 0,
            system_id: "kep".into(),
            password: "secret".into(),
            record: true,
        }
    }
}

impl fmt::Debug for SmscBehaviour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmscBehaviour")
            .field("throttle_first", &self.throttle_first)
            .field("system_id", &self.system_id)
            .field("record", &self.record)
            .finish_non_exhaustive()
    }
}

/// A submit_sm as the SMSC received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedSubmit {
    pub source: String,
    pub destination: String,
    pub data_coding: u8,
    pub esm_class: u8,
    pub short_message: Vec<u8>,
    pub message_payload: Option<Vec<u8>>,
    pub registered_delivery: u8,
}

impl ReceivedSubmit {
    /// The text it carries (its `message_payload`, else its `short_message` without the
    /// UDH of a concatenated part), when its data coding is one kep encodes.
    pub fn text(&self) -> Option<String> {
        let octets = match &self.message_payload {
            Some(payload) => payload.as_slice(),
            // esm_class 0x40: the short_message starts with a UDH, its length first.
            None if self.esm_class & 0x40 != 0 => {
                let udh = usize::from(self.short_message.first().copied().unwrap_or(0)) + 1;
                self.short_message.get(udh..).unwrap_or_default()
            }
            None => self.short_message.as_slice(),
        };
        text::decode(octets, self.data_coding)
    }
}

/// A submit_sm the SMSC acknowledged, and the message_id it answered.
pub type TakenSubmit = (String, ReceivedSubmit);

/// What every session of one SMSC shares.
struct Shared {
    behaviour: SmscBehaviour,
    throttle_left: AtomicUsize,
    submits: AtomicU64,
    binds: AtomicU64,
    unbinds: AtomicU64,
    message_ids: AtomicU64,
    sessions: AtomicU64,
    received: Mutex<Vec<ReceivedSubmit>>,
    /// Where each acknowledged submit goes as it is taken, once [`Smsc::watch`] was called.
    watcher: OnceLock<mpsc::UnboundedSender<TakenSubmit>>,
    /// The sessions that take deliver_sm (receivers and transceivers) by system_id, for the
    /// receipts of submits that came over a transmitter, or that go elsewhere.
    receivers: Mutex<Receivers>,
    /// Each receipt goes on another session of the account than its submit's.
    receipts_elsewhere: AtomicBool,
    /// Receipts sent elsewhere so far: they go to the account's other sessions in turn.
    elsewhere: AtomicUsize,
}

impl Shared {
    /// Hands a receipt to a session of `system_id` that takes them, other than `except`:
    /// the first, or the next in turn when receipts go elsewhere. The receipt back if none
    /// took it.
    fn route(&self, system_id: &str, except: u64, receipt: DeliverSm) -> Option<DeliverSm> {
        let receivers = self.receivers.lock().expect("receivers lock");
        let others: Vec<_> = receivers
            .get(system_id)
            .into_iter()
            .flatten()
            .filter(|(id, _)| *id != except)
            .collect();
        if others.is_empty() {
            return Some(receipt);
        }
        let turn = if self.receipts_elsewhere.load(Ordering::Relaxed) {
            self.elsewhere.fetch_add(1, Ordering::Relaxed) % others.len()
        } else {
            0
        };
        others[turn].1.send(receipt).err().map(|e| e.0)
    }
}

/// A running SMSC. Dropping it stops it too, without waiting.
pub struct Smsc {
    shared: Arc<Shared>,
    port: u16,
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl fmt::Debug for Smsc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Smsc")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl Smsc {
    /// Listens on `addr` (`127.0.0.1:0` for any free port) and serves every session.
    pub async fn start(addr: SocketAddr, behaviour: SmscBehaviour) -> std::io::Result<Smsc> {
        let listener = TcpListener::bind(addr).await?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared {
            throttle_left: AtomicUsize::new(behaviour.throttle_first),
            behaviour,
            submits: AtomicU64::new(0),
            binds: AtomicU64::new(0),
            unbinds: AtomicU64::new(0),
            message_ids: AtomicU64::new(0),
            sessions: AtomicU64::new(0),
            received: Mutex::new(Vec::new()),
            watcher: OnceLock::new(),
            receivers: Mutex::new(HashMap::new()),
            receipts_elsewhere: AtomicBool::new(false),
            elsewhere: AtomicUsize::new(0),
        });
        let stop = CancellationToken::new();
        let tasks = TaskTracker::new();
        tasks.spawn(accept(
            listener,
            shared.clone(),
            stop.clone(),
            tasks.clone(),
        ));
        Ok(Smsc {
            shared,
            port,
            stop,
            tasks,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// From now on, each receipt goes on another session of the submit's system_id than the
    /// submit's (the account's other receivers and transceivers in turn), when it has
    /// another: SMPP 3.4 lets an SMSC deliver on any of them.
    pub fn deliver_receipts_elsewhere(&self) {
        self.shared
            .receipts_elsewhere
            .store(true, Ordering::Relaxed);
    }

    /// Every submit_sm received, in order (empty unless `record`).
    pub fn received(&self) -> Vec<ReceivedSubmit> {
        self.shared.received.lock().expect("received lock").clone()
    }

    /// Each submit_sm acknowledged from now on, with the message_id it was answered, as it
    /// is taken (whether or not `record`); None when it is already watched.
    pub fn watch(&self) -> Option<mpsc::UnboundedReceiver<TakenSubmit>> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.shared.watcher.set(tx).ok()?;
        Some(rx)
    }

    /// submit_sm received, throttled ones included.
    pub fn submits(&self) -> u64 {
        self.shared.submits.load(Ordering::Relaxed)
    }

    /// Successful binds.
    pub fn binds(&self) -> u64 {
        self.shared.binds.load(Ordering::Relaxed)
    }

    /// unbind received.
    pub fn unbinds(&self) -> u64 {
        self.shared.unbinds.load(Ordering::Relaxed)
    }

    /// Closes the listener and every session, abruptly, as a carrier going down would.
    pub async fn stop(self) {
        self.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

impl Drop for Smsc {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn accept(
    listener: TcpListener,
    shared: Arc<Shared>,
    stop: CancellationToken,
    tasks: TaskTracker,
) {
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _)) => {
                tasks.spawn(session::serve(stream, shared.clone(), stop.clone()));
            }
            Err(e) => {
                // Out of descriptors and the like: wait a little rather than spin.
                warn!(error = %e, "SMSC accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
