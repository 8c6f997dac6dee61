//! One bound connection: submits out, resps, receipts and enquire_links in, until it is
//! lost or stopped.

use std::{collections::HashMap, sync::atomic::Ordering, time::Duration};

use futures_util::{FutureExt as _, SinkExt as _, StreamExt as _};
use rusmpp::{Command, CommandId, CommandStatus, Pdu, pdus::DeliverSmResp, types::COctetString};
use tokio::{
    net::TcpStream,
    sync::{OwnedSemaphorePermit, mpsc, oneshot},
    time::{Instant, MissedTickBehavior, sleep_until},
};
use tokio_util::codec::Framed;
use tracing::{debug, info, warn};

use super::{Outcome, Request, Shared};
use crate::{
    receipt::{DeliveryReceipt, parse_receipt},
    wire::{
        self, Codec, ESME_RINVCMDID, ESME_RMSGQFUL, ESME_ROK, ESME_RSYSERR, ESME_RTHROTTLED,
        ESME_RX_P_APPN, Frame,
    },
};

pub(super) type Conn = Framed<TcpStream, Codec>;

/// How long a stop waits for the SMSC's unbind_resp.
const UNBIND_WAIT: Duration = Duration::from_secs(1);

/// PDUs handled between two flushes at most, so that a flood on one side cannot starve
/// the other of its writes.
const BATCH: usize = 256;

/// Why a bound session ended.
pub(super) enum End {
    Stopped,
    /// The SMSC unbound (and was answered).
    Unbound,
    Lost(String),
}

/// A submit_sm sent and awaiting its resp; its window slot is freed when it is dropped.
struct Pending {
    reply: oneshot::Sender<Outcome>,
    deadline: Instant,
    _permit: OwnedSemaphorePermit,
}

/// One bound connection.
pub(super) struct Session<'a> {
    shared: &'a Shared,
    receipts: &'a mpsc::UnboundedSender<DeliveryReceipt>,
    conn: Conn,
    pending: HashMap<u32, Pending>,
    sequence: u32,
    last_heard: Instant,
    /// The enquire_link awaiting its resp: its sequence number and when it went.
    enquiring: Option<(u32, Instant)>,
}

impl<'a> Session<'a> {
    pub(super) fn new(
        shared: &'a Shared,
        receipts: &'a mpsc::UnboundedSender<DeliveryReceipt>,
        conn: Conn,
    ) -> Self {
        Session {
            shared,
            receipts,
            conn,
            pending: HashMap::with_capacity(shared.config.window),
            // 1 was the bind.
            sequence: 1,
            last_heard: Instant::now(),
            enquiring: None,
        }
    }

    /// The next sequence number: 1 to 0x7FFFFFFF, then 1 again.
    fn next_sequence(&mut self) -> u32 {
        self.sequence = if self.sequence >= 0x7FFF_FFFF {
            1
        } else {
            self.sequence + 1
        };
        self.sequence
    }

    pub(super) async fn run(&mut self, requests: &mut mpsc::UnboundedReceiver<Request>) -> End {
        let config = &self.shared.config;
        let period = (config.enquire_link.min(config.response_timeout) / 4)
            .clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            let step = tokio::select! {
                biased;
                () = self.shared.stop.cancelled() => return self.unbind().await,
                // Before the PDUs: a steady flow of them must not hold off timeouts.
                _ = tick.tick() => self.on_tick().await,
                frame = self.conn.next() => self.on_frame(frame).await,
                request = requests.recv() => match request {
                    Some(request) => self.send_submit(request).await,
                    None => return self.unbind().await,
                },
            };
            if let Err(end) = step {
                return end;
            }
            // Whatever else is ready goes into the same write.
            for _ in 0..BATCH {
                if let Ok(request) = requests.try_recv() {
                    if let Err(end) = self.send_submit(request).await {
                        return end;
                    }
                } else if let Some(frame) = self.conn.next().now_or_never() {
                    if let Err(end) = self.on_frame(frame).await {
                        return end;
                    }
                } else {
                    break;
                }
            }
            if let Err(e) = self.conn.flush().await {
                return End::Lost(format!("writing: {e}"));
            }
        }
    }

    async fn feed(&mut self, command: Command) -> Result<(), End> {
        debug!(carrier = %self.shared.config.name, id = ?command.id(), seq = command.sequence_number(), status = ?command.status(), "PDU out");
        self.conn
            .feed(command)
            .await
            .map_err(|e| End::Lost(format!("writing: {e}")))
    }

    async fn send_submit(&mut self, request: Request) -> Result<(), End> {
        if request.reply.is_closed() {
            // Its caller is gone: nobody would read the resp.
            return Ok(());
        }
        let sequence = self.next_sequence();
        let deadline = Instant::now() + self.shared.config.response_timeout;
        self.pending.insert(
            sequence,
            Pending {
                reply: request.reply,
                deadline,
                _permit: request.permit,
            },
        );
        self.shared.submitted.fetch_add(1, Ordering::Relaxed);
        self.feed(Command::new(
            CommandStatus::EsmeRok,
            sequence,
            request.submit,
        ))
        .await
    }

    /// Completes the submit of `sequence` with its submit_sm_resp: the status and, for
    /// ESME_ROK, the message_id (or why it could not be read).
    fn on_submit_resp(&mut self, sequence: u32, status: u32, message_id: Result<String, String>) {
        let shared = self.shared;
        let Some(pending) = self.pending.remove(&sequence) else {
            debug!(carrier = %shared.config.name, seq = sequence, "submit_sm_resp for no pending submit");
            return;
        };
        let outcome = if status == ESME_ROK {
            match message_id {
                Ok(id) => {
                    shared.acknowledged.fetch_add(1, Ordering::Relaxed);
                    shared.accepted();
                    Outcome::Accepted(id)
                }
                // Taken, perhaps, but with no id to match its receipt: try again.
                Err(why) => Outcome::Unavailable(format!("an unreadable submit_sm_resp: {why}")),
            }
        } else if status == ESME_RTHROTTLED || status == ESME_RMSGQFUL {
            shared.throttled.fetch_add(1, Ordering::Relaxed);
            shared.throttle();
            Outcome::Refused(status)
        } else {
            shared.rejected.fetch_add(1, Ordering::Relaxed);
            Outcome::Refused(status)
        };
        let _ = pending.reply.send(outcome);
    }

    async fn on_frame(&mut self, frame: Option<std::io::Result<Frame>>) -> Result<(), End> {
        let command = match frame {
            Some(Ok(Frame::Pdu(command))) => command,
            Some(Ok(Frame::Undecodable {
                id,
                status,
                sequence,
                error,
            })) => return self.on_undecodable(id, status, sequence, error).await,
            Some(Err(e)) => return Err(End::Lost(format!("reading: {e}"))),
            None => return Err(End::Lost("the SMSC closed the connection".into())),
        };
        self.last_heard = Instant::now();
        let sequence = command.sequence_number();
        let status = u32::from(command.status());
        debug!(carrier = %self.shared.config.name, id = ?command.id(), seq = sequence, status = ?command.status(), "PDU in");
        let shared = self.shared;
        match command.id() {
            CommandId::SubmitSmResp => {
                let id = match command.pdu() {
                    Some(Pdu::SubmitSmResp(resp)) => resp.message_id().as_str().to_owned(),
                    _ => String::new(),
                };
                self.on_submit_resp(sequence, status, Ok(id));
            }
            // Some SMSCs throttle with a generic_nack.
            CommandId::GenericNack if status == ESME_RTHROTTLED || status == ESME_RMSGQFUL => {
                self.on_submit_resp(sequence, status, Ok(String::new()));
            }
            CommandId::GenericNack => {
                if let Some(pending) = self.pending.remove(&sequence) {
                    shared.rejected.fetch_add(1, Ordering::Relaxed);
                    let _ = pending.reply.send(Outcome::Nacked(status));
                } else {
                    warn!(carrier = %shared.config.name, seq = sequence, status = %wire::status_name(status), "generic_nack from the SMSC");
                }
            }
            CommandId::DeliverSm => {
                let resp = DeliverSmResp::new(COctetString::empty(), Vec::new());
                self.feed(Command::new(CommandStatus::EsmeRok, sequence, resp))
                    .await?;
                if let Some(Pdu::DeliverSm(deliver)) = command.pdu() {
                    match parse_receipt(deliver) {
                        Some(receipt) => {
                            shared.receipts.fetch_add(1, Ordering::Relaxed);
                            let _ = self.receipts.send(receipt);
                        }
                        None => {
                            debug!(carrier = %shared.config.name, "deliver_sm that is no receipt")
                        }
                    }
                }
            }
            CommandId::EnquireLink => {
                self.feed(wire::bodiless(
                    CommandId::EnquireLinkResp,
                    ESME_ROK,
                    sequence,
                ))
                .await?;
            }
            CommandId::EnquireLinkResp
                if self.enquiring.is_some_and(|(seq, _)| seq == sequence) =>
            {
                self.enquiring = None;
            }
            CommandId::Unbind => {
                self.feed(wire::bodiless(CommandId::UnbindResp, ESME_ROK, sequence))
                    .await?;
                let _ = self.conn.flush().await;
                return Err(End::Unbound);
            }
            // An operation with no response, and responses to nothing we sent.
            CommandId::AlertNotification => {}
            id if id.is_operation() => {
                self.feed(wire::bodiless(
                    CommandId::GenericNack,
                    ESME_RINVCMDID,
                    sequence,
                ))
                .await?;
            }
            _ => {}
        }
        Ok(())
    }

    /// A PDU rusmpp cannot read: answered from its header, so the SMSC does not wait.
    async fn on_undecodable(
        &mut self,
        id: CommandId,
        status: u32,
        sequence: u32,
        error: String,
    ) -> Result<(), End> {
        self.last_heard = Instant::now();
        warn!(carrier = %self.shared.config.name, ?id, seq = sequence, %error, "a PDU from the SMSC that cannot be read");
        match id {
            CommandId::SubmitSmResp => self.on_submit_resp(sequence, status, Err(error)),
            CommandId::DeliverSm => {
                let resp = wire::bodiless(CommandId::DeliverSmResp, ESME_RX_P_APPN, sequence);
                self.feed(resp).await?;
            }
            id if id.is_operation() => {
                self.feed(wire::bodiless(
                    CommandId::GenericNack,
                    ESME_RSYSERR,
                    sequence,
                ))
                .await?;
            }
            _ => {}
        }
        Ok(())
    }

    async fn on_tick(&mut self) -> Result<(), End> {
        let now = Instant::now();
        let config = &self.shared.config;
        for (_, pending) in self
            .pending
            .extract_if(|_, pending| pending.deadline <= now)
        {
            let why = format!("no submit_sm_resp within {:?}", config.response_timeout);
            let _ = pending.reply.send(Outcome::Unavailable(why));
        }
        match self.enquiring {
            Some((_, sent)) if now - sent >= config.response_timeout => Err(End::Lost(format!(
                "no enquire_link_resp within {:?}",
                config.response_timeout
            ))),
            Some(_) => Ok(()),
            None if now - self.last_heard >= config.enquire_link => {
                let sequence = self.next_sequence();
                self.enquiring = Some((sequence, now));
                self.feed(Command::new(
                    CommandStatus::EsmeRok,
                    sequence,
                    Pdu::EnquireLink,
                ))
                .await
            }
            None => Ok(()),
        }
    }

    /// Sends unbind and waits a little for its resp, still handling what comes meanwhile.
    async fn unbind(&mut self) -> End {
        let sequence = self.next_sequence();
        if self
            .feed(Command::new(CommandStatus::EsmeRok, sequence, Pdu::Unbind))
            .await
            .is_err()
            || self.conn.flush().await.is_err()
        {
            return End::Stopped;
        }
        let deadline = Instant::now() + UNBIND_WAIT;
        loop {
            let frame = tokio::select! {
                () = sleep_until(deadline) => break,
                frame = self.conn.next() => frame,
            };
            if let Some(Ok(Frame::Pdu(command))) = &frame
                && command.id() == CommandId::UnbindResp
            {
                info!(carrier = %self.shared.config.name, "SMPP session unbound");
                break;
            }
            if self.on_frame(frame).await.is_err() || self.conn.flush().await.is_err() {
                break;
            }
        }
        End::Stopped
    }

    /// Fails every submit awaiting its resp.
    pub(super) fn fail_all(&mut self, why: &str) {
        for (_, pending) in self.pending.drain() {
            let _ = pending.reply.send(Outcome::Unavailable(why.to_owned()));
        }
    }
}
