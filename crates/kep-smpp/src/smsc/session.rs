//! One ESME's session with the SMSC.

use std::{
    sync::{Arc, atomic::Ordering},
    time::{SystemTime, UNIX_EPOCH},
};

use futures_util::{FutureExt as _, SinkExt as _, StreamExt as _};
use rusmpp::{
    Command, CommandId, CommandStatus, Pdu,
    pdus::{
        BindReceiverResp, BindTransceiverResp, BindTransmitterResp, DeliverSm, SubmitSm,
        SubmitSmResp,
    },
    tlvs::{MessageDeliveryRequestTlvValue, TlvValue},
    types::{COctetString, OctetString},
    values::{EsmClass, InterfaceVersion, MessageState as WireState},
};
use tokio::{net::TcpStream, sync::mpsc};
use tokio_util::{codec::Framed, sync::CancellationToken};
use tracing::debug;

use super::{ReceivedSubmit, Shared};
use crate::{
    receipt::MessageState,
    wire::{
        self, Codec, ESME_RINVBNDSTS, ESME_RINVCMDID, ESME_RINVPASWD, ESME_ROK, ESME_RSYSERR,
        ESME_RTHROTTLED, Frame,
    },
};

/// PDUs handled between two flushes at most.
const BATCH: usize = 256;

/// ESME_RALYBND: a second bind on a bound session.
const ESME_RALYBND: u32 = 0x05;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Transmitter,
    Receiver,
    Transceiver,
}

struct Session {
    shared: Arc<Shared>,
    conn: Framed<TcpStream, Codec>,
    id: u64,
    bound: Option<(String, Mode)>,
    sequence: u32,
    routed: mpsc::UnboundedSender<DeliverSm>,
}

/// Serves one connection until the ESME unbinds or leaves, or the SMSC stops.
pub(super) async fn serve(stream: TcpStream, shared: Arc<Shared>, stop: CancellationToken) {
    let _ = stream.set_nodelay(true);
    let (routed, mut incoming) = mpsc::unbounded_channel();
    let id = shared.sessions.fetch_add(1, Ordering::Relaxed);
    let mut session = Session {
        shared,
        conn: Framed::new(stream, Codec::default()),
        id,
        bound: None,
        sequence: 0,
        routed,
    };
    loop {
        let go_on = tokio::select! {
            biased;
            () = stop.cancelled() => break,
            frame = session.conn.next() => session.on_frame(frame).await,
            Some(receipt) = incoming.recv() => session.deliver(receipt).await,
        };
        if !go_on {
            break;
        }
        let mut go_on = true;
        for _ in 0..BATCH {
            if let Ok(receipt) = incoming.try_recv() {
                go_on = session.deliver(receipt).await;
            } else if let Some(frame) = session.conn.next().now_or_never() {
                go_on = session.on_frame(frame).await;
            } else {
                break;
            }
            if !go_on {
                break;
            }
        }
        if session.conn.flush().await.is_err() || !go_on {
            break;
        }
    }
    session.unregister();
}

impl Session {
    fn next_sequence(&mut self) -> u32 {
        self.sequence = if self.sequence >= 0x7FFF_FFFF {
            1
        } else {
            self.sequence + 1
        };
        self.sequence
    }

    async fn feed(&mut self, command: Command) -> bool {
        self.conn.feed(command).await.is_ok()
    }

    async fn deliver(&mut self, receipt: DeliverSm) -> bool {
        let sequence = self.next_sequence();
        self.feed(Command::new(CommandStatus::EsmeRok, sequence, receipt))
            .await
    }

    /// Handles one PDU; false when the session is over.
    async fn on_frame(&mut self, frame: Option<std::io::Result<Frame>>) -> bool {
        let command = match frame {
            Some(Ok(Frame::Pdu(command))) => command,
            Some(Ok(Frame::Undecodable { id, sequence, .. })) if id.is_operation() => {
                let nack = wire::bodiless(CommandId::GenericNack, ESME_RSYSERR, sequence);
                return self.feed(nack).await;
            }
            Some(Ok(Frame::Undecodable { .. })) => return true,
            Some(Err(_)) | None => return false,
        };
        let sequence = command.sequence_number();
        debug!(id = ?command.id(), seq = sequence, "SMSC PDU in");
        match (command.id(), command.pdu()) {
            (CommandId::BindTransmitter, Some(Pdu::BindTransmitter(b))) => {
                self.bind(
                    sequence,
                    Mode::Transmitter,
                    b.system_id.as_str(),
                    b.password.as_str(),
                )
                .await
            }
            (CommandId::BindReceiver, Some(Pdu::BindReceiver(b))) => {
                self.bind(
                    sequence,
                    Mode::Receiver,
                    b.system_id.as_str(),
                    b.password.as_str(),
                )
                .await
            }
            (CommandId::BindTransceiver, Some(Pdu::BindTransceiver(b))) => {
                self.bind(
                    sequence,
                    Mode::Transceiver,
                    b.system_id.as_str(),
                    b.password.as_str(),
                )
                .await
            }
            (CommandId::SubmitSm, Some(Pdu::SubmitSm(submit))) => {
                self.submit(sequence, submit).await
            }
            (CommandId::EnquireLink, _) => {
                self.feed(wire::bodiless(
                    CommandId::EnquireLinkResp,
                    ESME_ROK,
                    sequence,
                ))
                .await
            }
            (CommandId::Unbind, _) => {
                self.shared.unbinds.fetch_add(1, Ordering::Relaxed);
                let _ = self
                    .feed(wire::bodiless(CommandId::UnbindResp, ESME_ROK, sequence))
                    .await;
                false
            }
            (id, _) if id.is_operation() => {
                self.feed(wire::bodiless(
                    CommandId::GenericNack,
                    ESME_RINVCMDID,
                    sequence,
                ))
                .await
            }
            // deliver_sm_resp, generic_nack and other responses need nothing.
            _ => true,
        }
    }

    async fn bind(&mut self, sequence: u32, mode: Mode, system_id: &str, password: &str) -> bool {
        let resp_id = match mode {
            Mode::Transmitter => CommandId::BindTransmitterResp,
            Mode::Receiver => CommandId::BindReceiverResp,
            Mode::Transceiver => CommandId::BindTransceiverResp,
        };
        if self.bound.is_some() {
            return self
                .feed(wire::bodiless(resp_id, ESME_RALYBND, sequence))
                .await;
        }
        let behaviour = &self.shared.behaviour;
        if system_id != behaviour.system_id || password != behaviour.password {
            return self
                .feed(wire::bodiless(resp_id, ESME_RINVPASWD, sequence))
                .await;
        }
        self.shared.binds.fetch_add(1, Ordering::Relaxed);
        self.bound = Some((system_id.to_owned(), mode));
        if mode != Mode::Transmitter {
            let mut receivers = self.shared.receivers.lock().expect("receivers lock");
            receivers
                .entry(system_id.to_owned())
                .or_default()
                .push((self.id, self.routed.clone()));
        }
        let name = COctetString::from_static_slice(b"kep-smsc\0").expect("a valid system_id");
        let version = Some(InterfaceVersion::Smpp3_4);
        let pdu: Pdu = match mode {
            Mode::Transmitter => BindTransmitterResp::new(name, version).into(),
            Mode::Receiver => BindReceiverResp::new(name, version).into(),
            Mode::Transceiver => BindTransceiverResp::new(name, version).into(),
        };
        self.feed(Command::new(CommandStatus::EsmeRok, sequence, pdu))
            .await
    }

    async fn submit(&mut self, sequence: u32, submit: &SubmitSm) -> bool {
        let Some((system_id, mode)) = self
            .bound
            .clone()
            .filter(|(_, mode)| *mode != Mode::Receiver)
        else {
            return self
                .feed(wire::bodiless(
                    CommandId::SubmitSmResp,
                    ESME_RINVBNDSTS,
                    sequence,
                ))
                .await;
        };
        let shared = self.shared.clone();
        shared.submits.fetch_add(1, Ordering::Relaxed);
        let throttled = shared
            .throttle_left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(1)
            })
            .is_ok();
        if throttled {
            return self
                .feed(wire::bodiless(
                    CommandId::SubmitSmResp,
                    ESME_RTHROTTLED,
                    sequence,
                ))
                .await;
        }
        let message_id = (shared.message_ids.fetch_add(1, Ordering::Relaxed) + 1).to_string();
        let resp = SubmitSmResp::new(
            COctetString::from_string(message_id.clone()).expect("digits fit a message_id"),
            Vec::new(),
        );
        if !self
            .feed(Command::new(CommandStatus::EsmeRok, sequence, resp))
            .await
        {
            return false;
        }
        let watcher = shared.watcher.get();
        if shared.behaviour.record || watcher.is_some() {
            let received = received(submit);
            if let Some(watcher) = watcher {
                // Nobody watching any more is no reason to stop serving.
                let _ = watcher.send((message_id.clone(), received.clone()));
            }
            if shared.behaviour.record {
                shared
                    .received
                    .lock()
                    .expect("received lock")
                    .push(received);
            }
        }
        let Some(state) = (shared.behaviour.receipt)(submit.destination_addr.as_str()) else {
            return true;
        };
        let receipt = receipt(submit, &message_id, state);
        let elsewhere = shared.receipts_elsewhere.load(Ordering::Relaxed);
        if mode == Mode::Transceiver && !elsewhere {
            // After the submit_sm_resp, in the same write: the ESME knows the id first.
            return self.deliver(receipt).await;
        }
        // A transmitter takes no deliver_sm: a receiver of the same system_id does, if any;
        // a transceiver's receipt asked elsewhere stays on it when the account has no other.
        match shared.route(&system_id, self.id, receipt) {
            Some(receipt) if mode == Mode::Transceiver => self.deliver(receipt).await,
            _ => true,
        }
    }

    fn unregister(&self) {
        if let Some((system_id, Mode::Receiver | Mode::Transceiver)) = &self.bound {
            let mut receivers = self.shared.receivers.lock().expect("receivers lock");
            if let Some(sessions) = receivers.get_mut(system_id) {
                sessions.retain(|(id, _)| *id != self.id);
            }
        }
    }
}

fn received(submit: &SubmitSm) -> ReceivedSubmit {
    let message_payload = submit.tlvs().iter().find_map(|tlv| match tlv.value() {
        Some(TlvValue::MessagePayload(payload)) => Some(payload.value.as_ref().to_vec()),
        _ => None,
    });
    ReceivedSubmit {
        source: submit.source_addr.as_str().to_owned(),
        destination: submit.destination_addr.as_str().to_owned(),
        data_coding: u8::from(submit.data_coding),
        esm_class: u8::from(submit.esm_class),
        short_message: submit.short_message().as_ref().to_vec(),
        message_payload,
        registered_delivery: u8::from(submit.registered_delivery),
    }
}

/// The delivery receipt of a submit: both the TLVs and the receipt text, so that either
/// way of reading one is exercised.
fn receipt(submit: &SubmitSm, message_id: &str, state: MessageState) -> DeliverSm {
    let delivered = state == MessageState::Delivered;
    let date = now_yymmddhhmm();
    let text = format!(
        "id:{message_id} sub:001 dlvrd:{} submit date:{date} done date:{date} stat:{} err:{} text:",
        if delivered { "001" } else { "000" },
        state.stat(),
        if matches!(
            state,
            MessageState::Delivered | MessageState::Accepted | MessageState::Enroute
        ) {
            "000"
        } else {
            "001"
        },
    );
    DeliverSm::builder()
        .source_addr_ton(submit.dest_addr_ton)
        .source_addr_npi(submit.dest_addr_npi)
        .source_addr(submit.destination_addr.clone())
        .dest_addr_ton(submit.source_addr_ton)
        .dest_addr_npi(submit.source_addr_npi)
        .destination_addr(submit.source_addr.clone())
        .esm_class(EsmClass::from(0x04))
        .short_message(OctetString::from_vec(text.into_bytes()).expect("a receipt text fits"))
        .tlvs(vec![
            MessageDeliveryRequestTlvValue::ReceiptedMessageId(
                COctetString::from_string(message_id.to_owned()).expect("digits fit a message_id"),
            ),
            MessageDeliveryRequestTlvValue::MessageState(WireState::from(state.tlv())),
        ])
        .build()
}

/// The UTC time now as a receipt's dates write it.
fn now_yymmddhhmm() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days, for days since 1970-01-01.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{:02}{month:02}{day:02}{:02}{:02}",
        year % 100,
        rem / 3600,
        rem % 3600 / 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn receipt_dates_are_ten_digits() {
        let date = super::now_yymmddhhmm();
        assert_eq!(date.len(), 10);
        assert!(date.bytes().all(|b| b.is_ascii_digit()));
        assert!(date[2..4].parse::<u32>().unwrap() <= 12);
    }
}
