//! The ESME against a peer the test drives PDU by PDU: silence, an unbind, nacks, PDUs
//! of no known kind.

use std::time::Duration;

use kep_smpp::{Esme, SessionState, SubmitError};
use rusmpp::{
    Command, CommandId, CommandStatus, Pdu,
    pdus::DeliverSm,
    types::{AnyOctetString, OctetString},
    values::EsmClass,
};
use tokio::{io::AsyncWriteExt as _, net::TcpListener, sync::mpsc, time::sleep};

use crate::common::*;

async fn listener() -> (TcpListener, u16) {
    let listener = TcpListener::bind(local(0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

fn start(
    config: kep_smpp::EsmeConfig,
) -> (Esme, mpsc::UnboundedReceiver<kep_smpp::DeliveryReceipt>) {
    let (receipts, incoming) = mpsc::unbounded_channel();
    (Esme::start(config, receipts), incoming)
}

#[tokio::test]
async fn no_more_than_the_window_is_outstanding_and_a_lost_connection_fails_them_at_once() {
    let (listener, port) = listener().await;
    let mut config = config(port);
    config.window = 4;
    config.response_timeout = Duration::from_secs(30);
    let (esme, _receipts) = start(config);
    let mut peer = accept_bound(&listener).await;
    assert!(esme.wait_bound(WAIT).await);

    let submits: Vec<_> = (0..10)
        .map(|i| {
            let esme = esme.clone();
            tokio::spawn(async move { esme.submit("KEP", "821012345678", &format!("w{i}")).await })
        })
        .collect();
    for _ in 0..4 {
        assert_eq!(next_pdu(&mut peer).await.id(), CommandId::SubmitSm);
    }
    // The fifth waits for a slot, which only a resp (or the loss) frees.
    sleep(Duration::from_millis(300)).await;
    assert_eq!(esme.stats().window_in_use, 4);
    assert!(
        tokio::time::timeout(
            Duration::from_millis(100),
            futures_util::StreamExt::next(&mut peer)
        )
        .await
        .is_err()
    );

    // The carrier drops: every submit fails Unavailable long before the response timeout.
    drop(peer);
    for submit in submits {
        let error = tokio::time::timeout(Duration::from_secs(5), submit)
            .await
            .expect("failed at once")
            .unwrap()
            .unwrap_err();
        assert!(matches!(error, SubmitError::Unavailable(_)), "{error}");
    }
    assert_eq!(esme.stats().window_in_use, 0);

    // Back up: the session binds again and submits go through.
    let mut peer = accept_bound(&listener).await;
    assert!(esme.wait_bound(WAIT).await);
    let submit = tokio::spawn({
        let esme = esme.clone();
        async move { esme.submit("KEP", "821012345678", "again").await }
    });
    let pdu = next_pdu(&mut peer).await;
    let resp = rusmpp::pdus::SubmitSmResp::new("abc-1".parse().unwrap(), Vec::new());
    send(
        &mut peer,
        Command::new(CommandStatus::EsmeRok, pdu.sequence_number(), resp),
    )
    .await;
    assert_eq!(submit.await.unwrap().unwrap(), ["abc-1"]);
    drop(peer);
    esme.stop().await;
}

#[tokio::test]
async fn a_resp_that_never_comes_fails_the_submit_unavailable() {
    let (listener, port) = listener().await;
    let mut config = config(port);
    config.response_timeout = Duration::from_millis(300);
    let (esme, _receipts) = start(config);
    let mut peer = accept_bound(&listener).await;
    assert!(esme.wait_bound(WAIT).await);

    let submit = tokio::spawn({
        let esme = esme.clone();
        async move { esme.submit("KEP", "821012345678", "lost").await }
    });
    next_pdu(&mut peer).await;
    let error = submit.await.unwrap().unwrap_err();
    assert!(
        matches!(&error, SubmitError::Unavailable(why) if why.contains("submit_sm_resp")),
        "{error}"
    );
    assert_eq!(esme.stats().window_in_use, 0);
    drop(peer);
    esme.stop().await;
}

#[tokio::test]
async fn a_missing_enquire_link_resp_drops_the_connection() {
    let (listener, port) = listener().await;
    let mut config = config(port);
    config.enquire_link = Duration::from_millis(100);
    config.response_timeout = Duration::from_millis(300);
    let (esme, _receipts) = start(config);
    let mut peer = accept_bound(&listener).await;

    // Answered, the session stays.
    let enquire = next_pdu(&mut peer).await;
    assert_eq!(enquire.id(), CommandId::EnquireLink);
    send(
        &mut peer,
        bodiless(CommandId::EnquireLinkResp, enquire.sequence_number()),
    )
    .await;
    let enquire = next_pdu(&mut peer).await;
    assert_eq!(enquire.id(), CommandId::EnquireLink);
    assert_eq!(esme.stats().reconnects, 0);

    // Unanswered, it is dropped and the ESME connects again.
    let _second = accept_bound(&listener).await;
    assert!(esme.wait_bound(WAIT).await);
    assert_eq!(esme.stats().reconnects, 1);
    drop(peer);
    esme.stop().await;
}

#[tokio::test]
async fn the_esme_answers_what_the_smsc_asks() {
    let (listener, port) = listener().await;
    let (esme, mut receipts) = start(config(port));
    let mut peer = accept_bound(&listener).await;
    assert!(esme.wait_bound(WAIT).await);

    send(
        &mut peer,
        Command::new(CommandStatus::EsmeRok, 7, Pdu::EnquireLink),
    )
    .await;
    let resp = next_pdu(&mut peer).await;
    assert_eq!(
        (resp.id(), resp.sequence_number()),
        (CommandId::EnquireLinkResp, 7)
    );

    // A command id nobody knows: generic_nack ESME_RINVCMDID.
    let unknown = Pdu::Other {
        command_id: CommandId::from(0x0000_0123),
        body: AnyOctetString::empty(),
    };
    send(&mut peer, Command::new(CommandStatus::EsmeRok, 8, unknown)).await;
    let nack = next_pdu(&mut peer).await;
    assert_eq!(
        (nack.id(), nack.sequence_number()),
        (CommandId::GenericNack, 8)
    );
    assert_eq!(u32::from(nack.status()), 0x03);

    // An MO message is answered too, and is no receipt; a receipt in text form is one.
    for (seq, esm_class, text) in [
        (9, 0x00, "hello"),
        (
            10,
            0x04,
            "id:7f sub:001 dlvrd:001 submit date:2611271530 done date:2611271530 stat:DELIVRD err:000 text:",
        ),
    ] {
        let deliver = DeliverSm::builder()
            .source_addr("821012345678".parse().unwrap())
            .destination_addr("KEP".parse().unwrap())
            .esm_class(EsmClass::from(esm_class))
            .short_message(OctetString::from_vec(text.as_bytes().to_vec()).unwrap())
            .build();
        send(
            &mut peer,
            Command::new(CommandStatus::EsmeRok, seq, deliver),
        )
        .await;
        let resp = next_pdu(&mut peer).await;
        assert_eq!(
            (resp.id(), resp.sequence_number()),
            (CommandId::DeliverSmResp, seq)
        );
        assert_eq!(u32::from(resp.status()), 0);
    }
    let receipt = next_receipt(&mut receipts).await;
    assert_eq!(receipt.message_id, "7f");
    assert_eq!(esme.stats().receipts, 1);

    // A generic_nack for a submit rejects it.
    let submit = tokio::spawn({
        let esme = esme.clone();
        async move { esme.submit("KEP", "821012345678", "nacked").await }
    });
    let pdu = next_pdu(&mut peer).await;
    let nack = Command::new(
        CommandStatus::from(0x0000_0008),
        pdu.sequence_number(),
        Pdu::GenericNack,
    );
    send(&mut peer, nack).await;
    let error = submit.await.unwrap().unwrap_err();
    assert!(
        matches!(&error, SubmitError::Rejected { status: 8, name } if name == "ESME_RSYSERR"),
        "{error}"
    );

    // A generic_nack ESME_RTHROTTLED throttles: the same submit_sm comes again.
    let submit = tokio::spawn({
        let esme = esme.clone();
        async move { esme.submit("KEP", "821012345678", "throttled").await }
    });
    let first = next_pdu(&mut peer).await;
    send(
        &mut peer,
        bodiless_status(CommandId::GenericNack, 0x58, first.sequence_number()),
    )
    .await;
    let again = next_pdu(&mut peer).await;
    assert_eq!(again.id(), CommandId::SubmitSm);
    assert_ne!(again.sequence_number(), first.sequence_number());
    assert_eq!(again.pdu(), first.pdu());
    let resp = rusmpp::pdus::SubmitSmResp::new("t-1".parse().unwrap(), Vec::new());
    send(
        &mut peer,
        Command::new(CommandStatus::EsmeRok, again.sequence_number(), resp),
    )
    .await;
    assert_eq!(submit.await.unwrap().unwrap(), ["t-1"]);
    assert_eq!(esme.stats().throttled, 1);

    // A refusing submit_sm_resp, without a body as SMPP has it.
    let submit = tokio::spawn({
        let esme = esme.clone();
        async move { esme.submit("KEP", "821012345678", "refused").await }
    });
    let pdu = next_pdu(&mut peer).await;
    send(
        &mut peer,
        bodiless_status(CommandId::SubmitSmResp, 0x0B, pdu.sequence_number()),
    )
    .await;
    let error = submit.await.unwrap().unwrap_err();
    assert!(
        matches!(&error, SubmitError::Rejected { status: 0x0B, .. }),
        "{error}"
    );
    assert_eq!(esme.stats().rejected, 2);

    // The SMSC unbinds: answered, and the session binds again.
    send(
        &mut peer,
        Command::new(CommandStatus::EsmeRok, 11, Pdu::Unbind),
    )
    .await;
    let resp = next_pdu(&mut peer).await;
    assert_eq!(
        (resp.id(), resp.sequence_number()),
        (CommandId::UnbindResp, 11)
    );
    let mut peer = accept_bound(&listener).await;
    assert!(esme.wait_bound(WAIT).await);
    assert_eq!(esme.stats().reconnects, 1);

    // And our stop unbinds, waiting for the resp.
    let stop = tokio::spawn({
        let esme = esme.clone();
        async move { esme.stop().await }
    });
    let unbind = next_pdu(&mut peer).await;
    assert_eq!(unbind.id(), CommandId::Unbind);
    send(
        &mut peer,
        bodiless(CommandId::UnbindResp, unbind.sequence_number()),
    )
    .await;
    stop.await.unwrap();
    assert_eq!(esme.stats().state, SessionState::Stopped);
}

#[tokio::test]
async fn a_pdu_that_cannot_be_read_is_answered_and_the_session_stays() {
    let (listener, port) = listener().await;
    let (esme, _receipts) = start(config(port));
    let mut peer = accept_bound(&listener).await;
    assert!(esme.wait_bound(WAIT).await);

    // A deliver_sm whose source_addr is not ASCII, which rusmpp refuses.
    let body = b"\0\x01\x01\xC0\xC1\0\x01\x01123\0\x04\0\0\0\0\0\0\0\0\0";
    let mut raw = Vec::new();
    raw.extend_from_slice(&u32::try_from(16 + body.len()).unwrap().to_be_bytes());
    raw.extend_from_slice(&[0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 9]);
    raw.extend_from_slice(body);
    peer.get_mut().write_all(&raw).await.unwrap();
    let resp = next_pdu(&mut peer).await;
    assert_eq!(
        (resp.id(), resp.sequence_number()),
        (CommandId::DeliverSmResp, 9)
    );
    assert_eq!(u32::from(resp.status()), 0x65);

    // The same connection goes on.
    send(
        &mut peer,
        Command::new(CommandStatus::EsmeRok, 10, Pdu::EnquireLink),
    )
    .await;
    assert_eq!(next_pdu(&mut peer).await.id(), CommandId::EnquireLinkResp);
    assert_eq!(esme.stats().reconnects, 0);
    assert_eq!(esme.stats().state, SessionState::Bound);
    drop(peer);
    esme.stop().await;
}

fn bodiless(id: CommandId, sequence: u32) -> Command {
    bodiless_status(id, 0, sequence)
}

fn bodiless_status(id: CommandId, status: u32, sequence: u32) -> Command {
    let body = Pdu::Other {
        command_id: id,
        body: AnyOctetString::empty(),
    };
    Command::new(CommandStatus::from(status), sequence, body)
}
