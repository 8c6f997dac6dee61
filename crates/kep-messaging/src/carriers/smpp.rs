//! An SMPP 3.4 carrier: kep binds to the carrier's SMSC as an ESME (`kep_smpp::Esme`), in
//! `binds` sessions that take submits in turn.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kep_core::retry::Backoff;
use kep_smpp::{Esme, EsmeConfig, SessionState, SubmitError};
use tokio::sync::mpsc;

use kep_api::messaging::CarrierStatus;

use crate::carriers::{CarrierReceipt, CarrierSettings, Outgoing, Submitted};

pub struct Smpp {
    binds: Vec<Esme>,
    /// The bind the next submit tries first.
    next: AtomicUsize,
    /// The SMSC account its receipts are matched in ([`account`]).
    account: Arc<str>,
    source_addr: String,
}

/// The SMSC account of a carrier bound as `system_id` to `host:port`: an SMSC may deliver a
/// receipt on any session of the account (SMPP 3.4), so the carriers bound to it share
/// their receipts.
fn account(host: &str, port: u16, system_id: &str) -> String {
    format!("smpp://{system_id}@{host}:{port}")
}

impl Smpp {
    /// Starts the sessions; receipts go to `receipts`, named after the carrier and its
    /// account.
    pub fn start(
        s: &CarrierSettings,
        receipts: mpsc::UnboundedSender<CarrierReceipt>,
    ) -> anyhow::Result<Smpp> {
        let host = s.required("host", s.host.as_deref())?;
        let port = s.port.ok_or_else(|| {
            anyhow::anyhow!(
                "messaging.carriers {:?}: an smpp carrier needs `port`",
                s.name
            )
        })?;
        let system_id = s.required("system_id", s.system_id.as_deref())?;
        s.at_least_one("window", s.window)?;
        s.at_least_one("binds", s.binds)?;
        let config = EsmeConfig {
            name: s.name.clone(),
            host: host.to_owned(),
            port,
            system_id: system_id.to_owned(),
            password: s.password.clone().unwrap_or_default(),
            system_type: s.system_type.clone(),
            bind: s.bind,
            window: s.window,
            enquire_link: Duration::from_secs(s.enquire_link_s.max(1)),
            max_rate_per_s: s.max_rate_per_s,
            data_coding: s.data_coding,
            long_text: s.long_text,
            reconnect: Backoff {
                first: Duration::from_millis(200),
                max: Duration::from_secs(10),
            },
            response_timeout: Duration::from_secs(10),
        };
        let (tx, mut rx) = mpsc::unbounded_channel();
        let binds = Esme::start_binds(&config, s.binds, &tx);
        let name: Arc<str> = Arc::from(s.name.as_str());
        let account: Arc<str> = Arc::from(account(host, port, system_id));
        let receipts_account = Arc::clone(&account);
        tokio::spawn(async move {
            while let Some(r) = rx.recv().await {
                let receipt = CarrierReceipt {
                    carrier: Arc::clone(&name),
                    account: Arc::clone(&receipts_account),
                    message_id: r.message_id,
                    state: r.state,
                };
                if receipts.send(receipt).is_err() {
                    break;
                }
            }
        });
        Ok(Smpp {
            binds,
            next: AtomicUsize::new(0),
            account,
            source_addr: s.source_addr.clone(),
        })
    }

    /// Its SMSC account ([`account`]).
    pub fn account(&self) -> &Arc<str> {
        &self.account
    }

    /// Tries the binds in turn, from the one after the last submit's; one that is not bound
    /// fails at once. `Err` when the carrier cannot be reached now (no bind is up, or each
    /// lost its connection before it answered).
    pub async fn submit(&self, o: &Outgoing<'_>) -> Result<Submitted, String> {
        let source = o.source.unwrap_or(&self.source_addr);
        let first = self.next.fetch_add(1, Ordering::Relaxed);
        let mut why = String::new();
        for i in 0..self.binds.len() {
            let esme = &self.binds[(first + i) % self.binds.len()];
            match esme.submit(source, o.phone_number, &o.text).await {
                Ok(ids) => {
                    return Ok(Submitted::Receipts {
                        account: Arc::clone(&self.account),
                        ids,
                    });
                }
                Err(SubmitError::Unavailable(e)) => why = e,
                Err(e @ (SubmitError::Rejected { .. } | SubmitError::Encoding(_))) => {
                    return Ok(Submitted::Refused(e.to_string()));
                }
            }
        }
        Err(why)
    }

    /// Up while any bind is; the window in use and the counters of all of them.
    pub fn fill(&self, state: &mut CarrierStatus) {
        let all: Vec<_> = self.binds.iter().map(Esme::stats).collect();
        let any = |s: SessionState| all.iter().any(|b| b.state == s);
        state.state = if any(SessionState::Bound) {
            "up"
        } else if any(SessionState::Connecting) {
            "connecting"
        } else {
            "stopped"
        }
        .to_owned();
        state.window_in_use = all.iter().map(|b| b.window_in_use as u64).sum();
        state.reconnects = all.iter().map(|b| b.reconnects).sum();
        state.throttled = all.iter().map(|b| b.throttled).sum();
        state.last_error = all.into_iter().find_map(|b| b.last_error);
    }

    pub fn observe(&self, name: &str) {
        let all: Vec<_> = self.binds.iter().map(Esme::stats).collect();
        let carrier = name.to_owned();
        let window: usize = all.iter().map(|b| b.window_in_use).sum();
        let bound = all
            .iter()
            .filter(|b| b.state == SessionState::Bound)
            .count();
        metrics::gauge!("kep_messaging_carrier_window_in_use", "carrier" => carrier.clone())
            .set(window as f64);
        metrics::gauge!("kep_messaging_carrier_bound", "carrier" => carrier.clone())
            .set(bound as f64);
        metrics::counter!("kep_messaging_carrier_reconnects_total", "carrier" => carrier)
            .absolute(all.iter().map(|b| b.reconnects).sum());
    }

    /// Unbinds every bind at once.
    pub async fn stop(&self) {
        let mut stops = tokio::task::JoinSet::new();
        for esme in &self.binds {
            let esme = esme.clone();
            stops.spawn(async move { esme.stop().await });
        }
        stops.join_all().await;
    }
}
