//! The ESME against the crate's SMSC over TCP.

use std::{sync::Arc, time::Duration};

use kep_smpp::{
    BindMode, DataCoding, LongText, MessageState, SessionState, SmscBehaviour, SubmitError,
    text::encode,
};
use tokio::time::{Instant, sleep, timeout};

use crate::common::*;

#[tokio::test]
async fn a_submit_is_acknowledged_and_its_receipt_arrives() {
    let smsc = smsc(SmscBehaviour {
        receipt: Arc::new(|destination: &str| {
            Some(if destination.ends_with('9') {
                MessageState::Undeliverable
            } else {
                MessageState::Delivered
            })
        }),
        ..SmscBehaviour::default()
    })
    .await;
    let (esme, mut receipts) = bound(config(smsc.port())).await;

    let ids = esme
        .submit("KEP", "+821012345678", "안녕하세요")
        .await
        .unwrap();
    assert_eq!(ids.len(), 1);
    let receipt = next_receipt(&mut receipts).await;
    assert_eq!(receipt.message_id, ids[0]);
    assert_eq!(receipt.state, MessageState::Delivered);
    assert_eq!(receipt.error.as_deref(), Some("000"));

    let ids = esme
        .submit("0212345678", "821012345679", "x")
        .await
        .unwrap();
    let receipt = next_receipt(&mut receipts).await;
    assert_eq!(
        (receipt.message_id.as_str(), receipt.state),
        (ids[0].as_str(), MessageState::Undeliverable)
    );

    let received = smsc.received();
    assert_eq!(received.len(), 2);
    assert_eq!(received[0].source, "KEP");
    assert_eq!(received[0].destination, "821012345678");
    assert_eq!(received[0].data_coding, 0x08);
    assert_eq!(received[0].esm_class, 0);
    assert_eq!(received[0].registered_delivery, 1);
    assert_eq!(
        received[0].short_message,
        encode("안녕하세요", DataCoding::Ucs2).unwrap()
    );
    assert_eq!(received[0].message_payload, None);
    assert_eq!(received[1].source, "0212345678");

    let stats = esme.stats();
    assert_eq!(stats.state, SessionState::Bound);
    assert_eq!(
        (stats.submitted, stats.acknowledged, stats.rejected),
        (2, 2, 0)
    );
    assert_eq!(stats.receipts, 2);
    assert_eq!(stats.window_in_use, 0);
    assert_eq!(smsc.binds(), 1);
    esme.stop().await;
    smsc.stop().await;
}

#[tokio::test]
async fn a_long_text_goes_as_udh_parts() {
    let smsc = smsc(SmscBehaviour::default()).await;
    let (esme, mut receipts) = bound(config(smsc.port())).await;
    let text = "한".repeat(200);

    let ids = esme.submit("KEP", "821012345678", &text).await.unwrap();
    assert_eq!(ids.len(), 3);
    let received = smsc.received();
    assert_eq!(received.len(), 3);
    let reference = received[0].short_message[3];
    let mut body = Vec::new();
    for (seq, part) in (1..=3).zip(&received) {
        assert_eq!(part.esm_class, 0x40);
        assert_eq!(part.registered_delivery, 1);
        assert_eq!(
            part.short_message[..6],
            [0x05, 0x00, 0x03, reference, 3, seq]
        );
        assert!(part.short_message.len() <= 140);
        body.extend_from_slice(&part.short_message[6..]);
    }
    assert_eq!(body, encode(&text, DataCoding::Ucs2).unwrap());
    for _ in 0..3 {
        let receipt = next_receipt(&mut receipts).await;
        assert!(ids.contains(&receipt.message_id));
    }

    // The next long text has another reference.
    esme.submit("KEP", "821012345678", &text).await.unwrap();
    assert_ne!(smsc.received()[3].short_message[3], reference);
    esme.stop().await;
}

#[tokio::test]
async fn a_watcher_sees_each_submit_with_its_id_and_text_as_it_is_taken() {
    let smsc = smsc(SmscBehaviour {
        record: false,
        ..SmscBehaviour::default()
    })
    .await;
    let mut taken = smsc.watch().expect("the first watcher");
    assert!(smsc.watch().is_none(), "one watcher at a time");
    let (esme, _receipts) = bound(config(smsc.port())).await;
    let text = "한".repeat(100);

    let ids = esme.submit("KEP", "821012345678", &text).await.unwrap();
    assert_eq!(ids.len(), 2);
    let mut parts = String::new();
    for id in &ids {
        let (message_id, submit) = taken.recv().await.unwrap();
        assert_eq!(&message_id, id);
        assert_eq!(submit.destination, "821012345678");
        parts += &submit.text().expect("UCS-2 decodes");
    }
    assert_eq!(parts, text);
    assert!(smsc.received().is_empty(), "watching records nothing");
    esme.stop().await;
    smsc.stop().await;
}

#[tokio::test]
async fn payload_mode_sends_one_submit_with_the_whole_text() {
    let smsc = smsc(SmscBehaviour::default()).await;
    let mut config = config(smsc.port());
    config.long_text = LongText::Payload;
    config.data_coding = DataCoding::Ksc5601;
    let (esme, _receipts) = bound(config).await;
    let text = "가".repeat(200);

    let ids = esme.submit("KEP", "821012345678", &text).await.unwrap();
    assert_eq!(ids.len(), 1);
    let received = smsc.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].data_coding, 0x0E);
    assert_eq!(received[0].esm_class, 0);
    assert!(received[0].short_message.is_empty());
    assert_eq!(
        received[0].message_payload.as_deref(),
        Some(encode(&text, DataCoding::Ksc5601).unwrap().as_slice())
    );

    // A short text is a plain short_message in either mode.
    esme.submit("KEP", "821012345678", "안녕").await.unwrap();
    assert_eq!(
        smsc.received()[1].short_message,
        encode("안녕", DataCoding::Ksc5601).unwrap()
    );
    assert_eq!(smsc.received()[1].message_payload, None);

    // What KS C 5601 lacks is refused before anything is sent.
    let error = esme
        .submit("KEP", "821012345678", "hi 😀")
        .await
        .unwrap_err();
    assert!(
        matches!(&error, SubmitError::Encoding(why) if why.contains("U+1F600")),
        "{error}"
    );
    let error = esme.submit("KEP", &"1".repeat(21), "hi").await.unwrap_err();
    assert!(matches!(error, SubmitError::Encoding(_)), "{error}");
    assert_eq!(smsc.submits(), 2);
    esme.stop().await;
}

#[tokio::test]
async fn a_transmitter_binds_and_its_receipts_go_to_a_transceiver_of_the_same_system_id() {
    let smsc = smsc(SmscBehaviour::default()).await;
    let mut transmitter_config = config(smsc.port());
    transmitter_config.bind = BindMode::Transmitter;
    let (transmitter, mut transmitter_receipts) = bound(transmitter_config).await;

    // No session takes its receipts yet: they are dropped.
    transmitter
        .submit("KEP", "821012345678", "one")
        .await
        .unwrap();
    let (transceiver, mut receipts) = bound(config(smsc.port())).await;
    let ids = transmitter
        .submit("KEP", "821012345678", "two")
        .await
        .unwrap();
    let receipt = next_receipt(&mut receipts).await;
    assert_eq!(receipt.message_id, ids[0]);
    assert!(transmitter_receipts.try_recv().is_err());
    assert_eq!(smsc.binds(), 2);
    transmitter.stop().await;
    transceiver.stop().await;
}

#[tokio::test]
async fn a_receipt_may_come_on_another_session_of_the_account() {
    let smsc = smsc(SmscBehaviour::default()).await;
    smsc.deliver_receipts_elsewhere();
    let (a, mut a_receipts) = bound(config(smsc.port())).await;
    let (b, mut b_receipts) = bound(config(smsc.port())).await;
    let ids = a.submit("KEP", "821012345678", "one").await.unwrap();
    assert_eq!(next_receipt(&mut b_receipts).await.message_id, ids[0]);
    let ids = b.submit("KEP", "821012345678", "two").await.unwrap();
    assert_eq!(next_receipt(&mut a_receipts).await.message_id, ids[0]);
    assert!(a_receipts.try_recv().is_err() && b_receipts.try_recv().is_err());
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn binds_of_one_carrier_bring_each_others_receipts_to_one_inbox() {
    let smsc = smsc(SmscBehaviour::default()).await;
    smsc.deliver_receipts_elsewhere();
    let (tx, mut receipts) = tokio::sync::mpsc::unbounded_channel();
    let binds = kep_smpp::Esme::start_binds(&config(smsc.port()), 3, &tx);
    for esme in &binds {
        assert!(esme.wait_bound(WAIT).await, "{:?}", esme.stats());
    }
    let mut sent = Vec::new();
    for esme in &binds {
        sent.extend(esme.submit("KEP", "821012345678", "hi").await.unwrap());
    }
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(next_receipt(&mut receipts).await.message_id);
    }
    got.sort();
    sent.sort();
    assert_eq!((got, smsc.binds()), (sent, 3));
    // Each session had another's receipt.
    for esme in &binds {
        assert_eq!(esme.stats().receipts, 1);
        esme.stop().await;
    }
}

#[tokio::test]
async fn a_wrong_password_leaves_the_session_connecting_and_submits_unavailable() {
    let smsc = smsc(SmscBehaviour::default()).await;
    let mut config = config(smsc.port());
    config.password = "wrong".into();
    let (receipts, _incoming) = tokio::sync::mpsc::unbounded_channel();
    let esme = kep_smpp::Esme::start(config, receipts);

    assert!(!esme.wait_bound(Duration::from_millis(500)).await);
    let stats = esme.stats();
    assert_eq!(stats.state, SessionState::Connecting);
    let error = stats.last_error.clone().unwrap_or_default();
    assert!(error.contains("ESME_RINVPASWD"), "{error}");
    assert!(stats.reconnects >= 1, "{stats:?}");
    let error = esme.submit("KEP", "821012345678", "hi").await.unwrap_err();
    assert!(matches!(error, SubmitError::Unavailable(_)), "{error}");
    assert_eq!((smsc.binds(), smsc.submits()), (0, 0));
    esme.stop().await;
    assert_eq!(esme.stats().state, SessionState::Stopped);
}

#[tokio::test]
async fn a_session_binds_once_the_smsc_comes_up() {
    let port = free_port().await;
    let (receipts, _incoming) = tokio::sync::mpsc::unbounded_channel();
    let esme = kep_smpp::Esme::start(config(port), receipts);
    sleep(Duration::from_millis(300)).await;
    assert_eq!(esme.stats().state, SessionState::Connecting);
    assert!(esme.stats().last_error.is_some());

    let smsc = kep_smpp::Smsc::start(local(port), SmscBehaviour::default())
        .await
        .unwrap();
    assert!(esme.wait_bound(WAIT).await, "{:?}", esme.stats());
    assert!(esme.stats().reconnects >= 1);
    assert_eq!(esme.stats().last_error, None);
    esme.submit("KEP", "821012345678", "hi").await.unwrap();
    esme.stop().await;
    smsc.stop().await;
}

#[tokio::test]
async fn a_carrier_that_goes_down_and_comes_back() {
    let smsc = smsc(SmscBehaviour::default()).await;
    let port = smsc.port();
    let (esme, _receipts) = bound(config(port)).await;
    esme.submit("KEP", "821012345678", "before").await.unwrap();

    smsc.stop().await;
    let lost = timeout(WAIT, async {
        while esme.stats().state == SessionState::Bound {
            sleep(Duration::from_millis(10)).await;
        }
    });
    lost.await.expect("the session notices the loss");
    let error = esme
        .submit("KEP", "821012345678", "while down")
        .await
        .unwrap_err();
    assert!(matches!(error, SubmitError::Unavailable(_)), "{error}");

    let smsc = kep_smpp::Smsc::start(local(port), SmscBehaviour::default())
        .await
        .unwrap();
    assert!(esme.wait_bound(WAIT).await, "{:?}", esme.stats());
    esme.submit("KEP", "821012345678", "after").await.unwrap();
    assert_eq!(smsc.received().len(), 1);
    assert!(esme.stats().reconnects >= 1);
    esme.stop().await;
}

#[tokio::test]
async fn throttled_submits_are_resent_until_they_pass() {
    let smsc = smsc(SmscBehaviour {
        throttle_first: 5,
        ..SmscBehaviour::default()
    })
    .await;
    let (esme, _receipts) = bound(config(smsc.port())).await;

    let submits = (0..20).map(|i| {
        let esme = esme.clone();
        tokio::spawn(async move { esme.submit("KEP", "821012345678", &format!("n{i}")).await })
    });
    for submit in submits.collect::<Vec<_>>() {
        submit.await.unwrap().unwrap();
    }
    let stats = esme.stats();
    assert_eq!(stats.throttled, 5);
    assert_eq!((stats.acknowledged, stats.submitted), (20, 25));
    assert_eq!(smsc.submits(), 25);
    esme.stop().await;
}

#[tokio::test]
async fn the_rate_limit_spreads_submits() {
    let smsc = smsc(SmscBehaviour {
        receipt: Arc::new(|_| None),
        record: false,
        ..SmscBehaviour::default()
    })
    .await;
    let mut config = config(smsc.port());
    config.max_rate_per_s = 50;
    let (esme, _receipts) = bound(config).await;

    let started = Instant::now();
    let submits: Vec<_> = (0..100)
        .map(|_| {
            let esme = esme.clone();
            tokio::spawn(async move { esme.submit("KEP", "821012345678", "rate").await })
        })
        .collect();
    for submit in submits {
        submit.await.unwrap().unwrap();
    }
    // 100 at 50 a second, with a burst of 2: about two seconds.
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(smsc.submits(), 100);
    esme.stop().await;
}

#[tokio::test]
async fn a_burst_stays_within_the_window() {
    let smsc = smsc(SmscBehaviour {
        record: false,
        ..SmscBehaviour::default()
    })
    .await;
    let mut config = config(smsc.port());
    config.window = 8;
    let (esme, mut receipts) = bound(config).await;

    let submits: Vec<_> = (0..200)
        .map(|_| {
            let esme = esme.clone();
            tokio::spawn(async move { esme.submit("KEP", "821012345678", "burst").await })
        })
        .collect();
    let mut most = 0;
    for submit in submits {
        most = most.max(esme.stats().window_in_use);
        submit.await.unwrap().unwrap();
    }
    assert!(most <= 8, "{most}");
    for _ in 0..200 {
        next_receipt(&mut receipts).await;
    }
    assert_eq!(esme.stats().receipts, 200);
    esme.stop().await;
}

#[tokio::test]
async fn stop_unbinds() {
    let smsc = smsc(SmscBehaviour::default()).await;
    let (esme, _receipts) = bound(config(smsc.port())).await;
    esme.stop().await;
    assert_eq!(smsc.unbinds(), 1);
    assert_eq!(esme.stats().state, SessionState::Stopped);
    let error = esme
        .submit("KEP", "821012345678", "late")
        .await
        .unwrap_err();
    assert!(matches!(error, SubmitError::Unavailable(_)), "{error}");
    // A second stop is harmless.
    esme.stop().await;
}
