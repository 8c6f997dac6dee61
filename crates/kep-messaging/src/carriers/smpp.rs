//! An SMPP 3.4 carrier: kep binds to the carrier's SMSC as an ESME (`kep_smpp::Esme`).

use std::sync::Arc;
use std::time::Duration;

use kep_core::retry::Backoff;
use kep_smpp::{Esme, EsmeConfig, SessionState, SubmitError};
use tokio::sync::mpsc;

use kep_api::messaging::CarrierStatus;

use crate::carriers::{CarrierReceipt, CarrierSettings, Outgoing, Submitted};

pub struct Smpp {
    esme: Esme,
    source_addr: String,
}

impl Smpp {
    /// Starts the session; receipts go to `receipts`, named after the carrier.
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
        if s.window == 0 {
            anyhow::bail!(
                "messaging.carriers {:?}: `window` must be at least 1",
                s.name
            );
        }
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
        let esme = Esme::start(config, tx);
        let name: Arc<str> = Arc::from(s.name.as_str());
        tokio::spawn(async move {
            while let Some(r) = rx.recv().await {
                let receipt = CarrierReceipt {
                    carrier: Arc::clone(&name),
                    message_id: r.message_id,
                    state: r.state,
                };
                if receipts.send(receipt).is_err() {
                    break;
                }
            }
        });
        Ok(Smpp {
            esme,
            source_addr: s.source_addr.clone(),
        })
    }

    /// `Err` when the carrier cannot be reached now (not bound, or the bind was lost before
    /// it answered).
    pub async fn submit(&self, o: &Outgoing<'_>) -> Result<Submitted, String> {
        let source = o.source.unwrap_or(&self.source_addr);
        match self.esme.submit(source, o.phone_number, &o.text).await {
            Ok(ids) => Ok(Submitted::Receipts(ids)),
            Err(SubmitError::Unavailable(why)) => Err(why),
            Err(e @ (SubmitError::Rejected { .. } | SubmitError::Encoding(_))) => {
                Ok(Submitted::Refused(e.to_string()))
            }
        }
    }

    pub fn fill(&self, state: &mut CarrierStatus) {
        let stats = self.esme.stats();
        state.state = match stats.state {
            SessionState::Bound => "up",
            SessionState::Connecting => "connecting",
            SessionState::Stopped => "stopped",
        }
        .to_owned();
        state.window_in_use = stats.window_in_use as u64;
        state.reconnects = stats.reconnects;
        state.throttled = stats.throttled;
        state.last_error = stats.last_error;
    }

    pub fn observe(&self, name: &str) {
        let stats = self.esme.stats();
        let carrier = name.to_owned();
        metrics::gauge!("kep_messaging_carrier_window_in_use", "carrier" => carrier.clone())
            .set(stats.window_in_use as f64);
        metrics::gauge!("kep_messaging_carrier_bound", "carrier" => carrier.clone())
            .set(f64::from(u8::from(stats.state == SessionState::Bound)));
        metrics::counter!("kep_messaging_carrier_reconnects_total", "carrier" => carrier)
            .absolute(stats.reconnects);
    }

    pub async fn stop(&self) {
        self.esme.stop().await;
    }
}
