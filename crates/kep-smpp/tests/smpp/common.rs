//! What the ESME tests share: configs, the SMSC on a free port, and a scripted peer for
//! what the SMSC never does (stay silent, unbind, nack).

use std::{net::SocketAddr, time::Duration};

use futures_util::{SinkExt as _, StreamExt as _};
use kep_core::retry::Backoff;
use kep_smpp::{DeliveryReceipt, Esme, EsmeConfig, Smsc, SmscBehaviour};
use rusmpp::{
    Command, CommandId, CommandStatus, Pdu, pdus::BindTransceiverResp, tokio_codec::CommandCodec,
    types::COctetString,
};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::mpsc,
    time::timeout,
};
use tokio_util::codec::Framed;

pub const WAIT: Duration = Duration::from_secs(10);

pub fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

pub fn config(port: u16) -> EsmeConfig {
    EsmeConfig {
        name: "test-carrier".into(),
        port,
        system_id: "kep".into(),
        password: "secret".into(),
        response_timeout: Duration::from_secs(2),
        reconnect: Backoff {
            first: Duration::from_millis(50),
            max: Duration::from_millis(200),
        },
        ..EsmeConfig::default()
    }
}

pub async fn smsc(behaviour: SmscBehaviour) -> Smsc {
    Smsc::start(local(0), behaviour).await.expect("SMSC starts")
}

/// An ESME started and bound.
pub async fn bound(config: EsmeConfig) -> (Esme, mpsc::UnboundedReceiver<DeliveryReceipt>) {
    let (receipts, incoming) = mpsc::unbounded_channel();
    let esme = Esme::start(config, receipts);
    assert!(esme.wait_bound(WAIT).await, "not bound: {:?}", esme.stats());
    (esme, incoming)
}

pub async fn next_receipt(
    receipts: &mut mpsc::UnboundedReceiver<DeliveryReceipt>,
) -> DeliveryReceipt {
    timeout(WAIT, receipts.recv())
        .await
        .expect("a receipt in time")
        .expect("the receipt channel is open")
}

/// A free port, nobody listening on it.
pub async fn free_port() -> u16 {
    let listener = TcpListener::bind(local(0)).await.unwrap();
    listener.local_addr().unwrap().port()
}

pub type Peer = Framed<TcpStream, CommandCodec>;

/// Accepts the ESME's connection and grants its bind_transceiver.
pub async fn accept_bound(listener: &TcpListener) -> Peer {
    let (stream, _) = timeout(WAIT, listener.accept()).await.unwrap().unwrap();
    let mut peer = Framed::new(stream, CommandCodec::new());
    let bind = next_pdu(&mut peer).await;
    assert_eq!(bind.id(), CommandId::BindTransceiver);
    let Some(Pdu::BindTransceiver(body)) = bind.pdu() else {
        panic!("{bind:?}")
    };
    assert_eq!(u8::from(body.interface_version), 0x34);
    let resp = BindTransceiverResp::new(COctetString::from_string("peer".into()).unwrap(), None);
    send(
        &mut peer,
        Command::new(CommandStatus::EsmeRok, bind.sequence_number(), resp),
    )
    .await;
    peer
}

pub async fn next_pdu(peer: &mut Peer) -> Command {
    timeout(WAIT, peer.next())
        .await
        .expect("a PDU in time")
        .expect("the connection is open")
        .expect("a PDU that decodes")
}

pub async fn send(peer: &mut Peer, command: Command) {
    peer.send(command).await.expect("the ESME reads");
}
