//! The carriers messages leave through (CONTRACT §4 "Carriers"): the built-in simulator, an
//! SMPP 3.4 ESME and the HTTP sending API of common SMS gateways, and the routing that picks
//! one for a hand-over. A carrier either decides at once (the simulator) or acknowledges the
//! hand-over with ids whose delivery receipts decide later ([`Submitted`]).

pub mod http;
mod settings;
mod simulator;
mod smpp;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kep_api::messaging::CarrierStatus;
pub use kep_smpp::MessageState;
use tokio::sync::mpsc;

use crate::kinds::{CarrierCode, MessageType, Route};
pub use settings::{CarrierKind, CarrierSettings};

/// What the carrier made of one hand-over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CarrierOutcome {
    Delivered,
    /// Failed but can be resent (520).
    Resendable,
    /// Failed (510).
    Failed,
    /// The number has no RCS.
    NoRcs,
}

impl CarrierOutcome {
    pub(crate) fn code(self) -> CarrierCode {
        match self {
            CarrierOutcome::Delivered => CarrierCode::Delivered,
            CarrierOutcome::Failed | CarrierOutcome::NoRcs => CarrierCode::Failed,
            CarrierOutcome::Resendable => CarrierCode::Resendable,
        }
    }
}

/// What a carrier is handed: one route of one message.
pub struct Outgoing<'a> {
    pub route: Route,
    /// The type it goes as (a fallback goes as SM or LM).
    pub message_type: MessageType,
    pub phone_number: &'a str,
    /// The message's sender number, if it has one.
    pub source: Option<&'a str>,
    pub text: String,
}

/// What a carrier made of a hand-over it took.
#[derive(Debug)]
pub enum Submitted {
    /// Decided at once.
    Final(CarrierOutcome),
    /// Refused for good (510), with the carrier's reason.
    Refused(String),
    /// Acknowledged: the id of each submitted part, whose receipts decide, and the account
    /// they come back on: an SMPP carrier's SMSC account, which every carrier bound to it
    /// shares; an HTTP carrier's own name.
    Receipts { account: Arc<str>, ids: Vec<String> },
}

/// A delivery receipt, from whichever carrier it came. It answers a part by the carrier's
/// id within its account ([`Submitted::Receipts`]), whichever carrier of that account
/// brought it.
#[derive(Debug, Clone)]
pub struct CarrierReceipt {
    /// The carrier that brought it.
    pub carrier: Arc<str>,
    pub account: Arc<str>,
    pub message_id: String,
    pub state: MessageState,
}

/// What a receipt's state means for the message: `None` while it is not final.
pub fn receipt_outcome(state: MessageState) -> Option<CarrierOutcome> {
    Some(match state {
        MessageState::Enroute => return None,
        // ACCEPTD: a carrier that reports no later state (CONTRACT §4).
        MessageState::Delivered | MessageState::Accepted => CarrierOutcome::Delivered,
        MessageState::Undeliverable
        | MessageState::Rejected
        | MessageState::Expired
        | MessageState::Deleted => CarrierOutcome::Failed,
        // A carrier that does not know what became of it: temporary, may be resent.
        MessageState::Unknown => CarrierOutcome::Resendable,
    })
}

enum Connector {
    Simulator(simulator::Simulator),
    Smpp(smpp::Smpp),
    Http(http::HttpCarrier),
}

struct Carrier {
    name: Arc<str>,
    kind: CarrierKind,
    /// Empty: every type the kind carries.
    types: Vec<MessageType>,
    /// Empty: any number.
    prefixes: Vec<String>,
    connector: Connector,
    submitted: AtomicU64,
    acknowledged: AtomicU64,
}

impl Carrier {
    fn new(
        name: &str,
        kind: CarrierKind,
        types: Vec<MessageType>,
        prefixes: Vec<String>,
        connector: Connector,
    ) -> Self {
        Carrier {
            name: Arc::from(name),
            kind,
            types,
            prefixes,
            connector,
            submitted: AtomicU64::new(0),
            acknowledged: AtomicU64::new(0),
        }
    }

    fn takes(&self, o: &Outgoing<'_>) -> bool {
        (self.types.is_empty() || self.types.contains(&o.message_type))
            && (self.prefixes.is_empty()
                || self
                    .prefixes
                    .iter()
                    .any(|p| o.phone_number.starts_with(p.as_str())))
            && (self.kind == CarrierKind::Simulator || !o.message_type.is_rcs())
    }
}

/// The configured carriers in order, and the simulator for what none of them takes.
pub struct Carriers {
    list: Vec<Carrier>,
    default: Carrier,
}

impl Carriers {
    /// Starts every configured carrier (an SMPP one binds in the background); receipts go
    /// to `receipts`; HTTP gateways' come back as `dlr` says.
    pub fn start(
        settings: &[CarrierSettings],
        simulator_delay: Duration,
        dlr: &http::DlrSettings,
        receipts: &mpsc::UnboundedSender<CarrierReceipt>,
    ) -> anyhow::Result<Carriers> {
        let simulator = || {
            Connector::Simulator(simulator::Simulator {
                delay: simulator_delay,
            })
        };
        let mut list = Vec::with_capacity(settings.len());
        for s in settings {
            let types = s.types()?;
            let connector = match s.kind {
                CarrierKind::Simulator => simulator(),
                CarrierKind::Smpp => Connector::Smpp(smpp::Smpp::start(s, receipts.clone())?),
                CarrierKind::Http => Connector::Http(http::HttpCarrier::new(s, dlr)?),
            };
            list.push(Carrier::new(
                &s.name,
                s.kind,
                types,
                s.prefixes.clone(),
                connector,
            ));
        }
        let default = Carrier::new(
            "simulator",
            CarrierKind::Simulator,
            Vec::new(),
            Vec::new(),
            simulator(),
        );
        Ok(Carriers { list, default })
    }

    /// Hands `o` to the first carrier that takes it and is up; one that cannot be reached
    /// passes it to the next. `Err`: none could be reached (the message waits and is tried
    /// again). A message no configured carrier takes goes to the simulator.
    pub async fn hand_over(&self, o: &Outgoing<'_>) -> Result<(Arc<str>, Submitted), String> {
        let mut takers = Vec::new();
        for c in &self.list {
            if c.takes(o) {
                takers.push(c);
            }
        }
        if takers.is_empty() {
            takers.push(&self.default);
        }
        let mut why = Vec::new();
        for c in takers {
            match self.submit(c, o).await {
                Ok(submitted) => return Ok((Arc::clone(&c.name), submitted)),
                Err(e) => why.push(format!("{}: {e}", c.name)),
            }
        }
        Err(why.join("; "))
    }

    async fn submit(&self, c: &Carrier, o: &Outgoing<'_>) -> Result<Submitted, String> {
        let carrier = c.name.to_string();
        c.submitted.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("kep_messaging_carrier_submitted_total", "carrier" => carrier.clone())
            .increment(1);
        let result = match &c.connector {
            Connector::Simulator(s) => Ok(s.submit(o).await),
            Connector::Smpp(s) => s.submit(o).await,
            Connector::Http(h) => h.submit(o).await,
        };
        if result.is_ok() {
            c.acknowledged.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("kep_messaging_carrier_acknowledged_total", "carrier" => carrier)
                .increment(1);
        }
        result
    }

    /// Each SMPP carrier's name and SMSC account.
    pub fn smpp_accounts(&self) -> impl Iterator<Item = (&str, &str)> {
        self.list.iter().filter_map(|c| match &c.connector {
            Connector::Smpp(s) => Some((&*c.name, &**s.account())),
            Connector::Http(_) | Connector::Simulator(_) => None,
        })
    }

    /// The HTTP carrier named `name`, for its dlr callback.
    pub fn http(&self, name: &str) -> Option<(&Arc<str>, &http::HttpCarrier)> {
        self.list.iter().find_map(|c| match &c.connector {
            Connector::Http(h) if &*c.name == name => Some((&c.name, h)),
            _ => None,
        })
    }

    pub fn states(&self) -> Vec<CarrierStatus> {
        self.list
            .iter()
            .chain(std::iter::once(&self.default))
            .map(|c| {
                let mut state = CarrierStatus {
                    name: c.name.to_string(),
                    kind: c.kind.as_str().to_owned(),
                    state: "up".into(),
                    submitted: c.submitted.load(Ordering::Relaxed),
                    acknowledged: c.acknowledged.load(Ordering::Relaxed),
                    window_in_use: 0,
                    reconnects: 0,
                    throttled: 0,
                    last_error: None,
                };
                match &c.connector {
                    Connector::Smpp(s) => s.fill(&mut state),
                    Connector::Http(_) | Connector::Simulator(_) => {}
                }
                state
            })
            .collect()
    }

    /// Sets each SMPP carrier's gauges (at each scrape of `/metrics`).
    pub fn observe(&self) {
        for c in &self.list {
            if let Connector::Smpp(s) = &c.connector {
                s.observe(&c.name);
            }
        }
    }

    /// Unbinds the SMPP carriers.
    pub async fn stop(&self) {
        for c in &self.list {
            if let Connector::Smpp(s) = &c.connector {
                s.stop().await;
            }
        }
    }
}
