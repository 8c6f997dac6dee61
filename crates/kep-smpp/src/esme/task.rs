//! The task that owns the session: connect, bind, run the bound session, and reconnect
//! with back-off until stopped.

use std::sync::{Arc, atomic::Ordering};

use futures_util::{SinkExt as _, StreamExt as _};
use rusmpp::{
    Command, CommandId, CommandStatus, Pdu,
    pdus::{BindTransceiver, BindTransmitter},
    types::COctetString,
    values::{InterfaceVersion, Npi, Ton},
};
use tokio::{
    net::TcpStream,
    sync::mpsc,
    time::{Instant, sleep_until, timeout},
};
use tokio_util::codec::Framed;
use tracing::{debug, info, warn};

use super::{
    BindMode, Outcome, Request, SessionState, Shared,
    session::{Conn, End, Session},
};
use crate::{
    receipt::DeliveryReceipt,
    wire::{self, Codec, ESME_ROK, Frame},
};

/// The session task: runs until stopped or until every `Esme` is dropped.
pub(super) async fn run(
    shared: Arc<Shared>,
    mut requests: mpsc::UnboundedReceiver<Request>,
    receipts: mpsc::UnboundedSender<DeliveryReceipt>,
) {
    let config = &shared.config;
    let name = config.name.as_str();
    let mut waits = config.reconnect.waits();
    let mut first = true;
    'sessions: loop {
        if !first {
            shared.reconnects.fetch_add(1, Ordering::Relaxed);
        }
        first = false;
        shared.state.send_replace(SessionState::Connecting);
        let bound = tokio::select! {
            biased;
            () = shared.stop.cancelled() => break 'sessions,
            bound = connect_and_bind(&shared) => bound,
        };
        match bound {
            Ok(conn) => {
                info!(carrier = name, host = %config.host, port = config.port, bind = ?config.bind, "SMPP session bound");
                *shared.last_error.lock().expect("last_error lock") = None;
                shared.state.send_replace(SessionState::Bound);
                let bound_at = Instant::now();
                let mut session = Session::new(&shared, &receipts, conn);
                let end = session.run(&mut requests).await;
                shared.state.send_replace(SessionState::Connecting);
                let reason = match &end {
                    End::Stopped => "the session is stopped".to_owned(),
                    End::Unbound => "the SMSC unbound".to_owned(),
                    End::Lost(why) => format!("connection lost: {why}"),
                };
                session.fail_all(&reason);
                match end {
                    End::Stopped => break 'sessions,
                    End::Unbound => info!(carrier = name, "the SMSC unbound; reconnecting"),
                    End::Lost(why) => {
                        warn!(carrier = name, error = %why, "SMPP session lost; reconnecting");
                    }
                }
                shared.set_error(reason);
                // A session that stayed up a while starts the back-off over; one that
                // keeps dropping right after its bind keeps backing off.
                if bound_at.elapsed() >= config.reconnect.max {
                    waits = config.reconnect.waits();
                }
            }
            Err(error) => {
                warn!(carrier = name, error = %error, "SMPP bind failed");
                shared.set_error(error);
            }
        }
        // Not bound until the next attempt: whatever comes in fails at once.
        let until = Instant::now() + waits.next_wait();
        loop {
            tokio::select! {
                biased;
                () = shared.stop.cancelled() => break 'sessions,
                () = sleep_until(until) => break,
                request = requests.recv() => match request {
                    Some(request) => {
                        let _ = request.reply.send(Outcome::Unavailable("not bound".into()));
                    }
                    None => break 'sessions,
                },
            }
        }
    }
    shared.state.send_replace(SessionState::Stopped);
    requests.close();
    while let Ok(request) = requests.try_recv() {
        let _ = request
            .reply
            .send(Outcome::Unavailable("the session is stopped".into()));
    }
    info!(carrier = name, "SMPP session stopped");
}

/// Connects and binds; the bound connection, or why not.
async fn connect_and_bind(shared: &Shared) -> Result<Conn, String> {
    let config = &shared.config;
    let addr = format!("{}:{}", config.host, config.port);
    let stream = match timeout(config.response_timeout, TcpStream::connect(&addr)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return Err(format!("connecting to {addr}: {e}")),
        Err(_) => return Err(format!("connecting to {addr} timed out")),
    };
    // Submits are small and latency-bound; batching is done above, per flush.
    let _ = stream.set_nodelay(true);
    let mut conn = Framed::new(stream, Codec::default());
    let system_id = wire::c_string(&config.system_id, "system_id")?;
    let password = wire::c_string(&config.password, "password")?;
    let system_type = wire::c_string(&config.system_type, "system_type")?;
    let version = InterfaceVersion::from(wire::INTERFACE_VERSION);
    let pdu: Pdu = match config.bind {
        BindMode::Transceiver => BindTransceiver::new(
            system_id,
            password,
            system_type,
            version,
            Ton::Unknown,
            Npi::Unknown,
            COctetString::empty(),
        )
        .into(),
        BindMode::Transmitter => BindTransmitter::new(
            system_id,
            password,
            system_type,
            version,
            Ton::Unknown,
            Npi::Unknown,
            COctetString::empty(),
        )
        .into(),
    };
    conn.send(Command::new(CommandStatus::EsmeRok, 1, pdu))
        .await
        .map_err(|e| format!("sending the bind: {e}"))?;
    let resp = timeout(config.response_timeout, async {
        loop {
            match conn.next().await {
                Some(Ok(Frame::Pdu(command))) if command.sequence_number() == 1 => {
                    return Ok((command.id(), u32::from(command.status())));
                }
                Some(Ok(Frame::Undecodable {
                    id,
                    status,
                    sequence: 1,
                    error,
                })) => {
                    if status == ESME_ROK {
                        return Err(format!("an unreadable bind_resp: {error}"));
                    }
                    return Ok((id, status));
                }
                Some(Ok(_)) => debug!(carrier = %config.name, "PDU before the bind_resp ignored"),
                Some(Err(e)) => return Err(format!("reading the bind_resp: {e}")),
                None => return Err("the SMSC closed the connection during the bind".to_owned()),
            }
        }
    })
    .await
    .map_err(|_| format!("no bind_resp within {:?}", config.response_timeout))??;
    let (id, status) = resp;
    if status != ESME_ROK
        || !matches!(
            id,
            CommandId::BindTransceiverResp | CommandId::BindTransmitterResp
        )
    {
        return Err(format!(
            "bind refused: {} (0x{status:08x}) in a {id:?}",
            wire::status_name(status),
        ));
    }
    Ok(conn)
}
