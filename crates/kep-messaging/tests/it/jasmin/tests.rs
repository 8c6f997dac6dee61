use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use super::{
    Concat, Jasmin, JasminOptions, SubmitSm, decode, dlr_listener, esme_submit, field, http_send,
    ucs2,
};

#[test]
fn a_submit_sm_decodes() {
    // Captured from Jasmin: "안녕하세요" in UCS-2, registered_delivery 1.
    let pdu = hex::decode(
        "0000003a0000000400000000000000030005006b657000010138323130313233343536373800000000\
         0000010008000ac548b155d558c138c694",
    )
    .unwrap();
    let sm = SubmitSm::decode(&pdu).unwrap();
    assert_eq!(sm.destination_addr, "821012345678");
    assert_eq!((sm.source_addr_ton, sm.source_addr.as_str()), (5, "kep"));
    assert_eq!((sm.data_coding, sm.registered_delivery), (8, 1));
    assert_eq!(decode(8, sm.payload()), "안녕하세요");
    assert_eq!(sm.concat(), None);
}

/// A `submit_sm` with every field empty or zero.
const EMPTY_SUBMIT_SM: &str = "000000210000000400000000000000010000000000000000000000000000000000";

#[test]
fn parts_are_read_from_the_udh() {
    let sm = SubmitSm {
        esm_class: 0x40,
        short_message: vec![5, 0, 3, 0x2a, 2, 1, b'h', b'i'],
        ..SubmitSm::decode(&hex::decode(EMPTY_SUBMIT_SM).unwrap()).unwrap()
    };
    assert_eq!(sm.udh(), Some(&[5, 0, 3, 0x2a, 2, 1][..]));
    assert_eq!(sm.payload(), b"hi");
    assert_eq!(
        sm.concat(),
        Some(Concat {
            reference: 0x2a,
            total: 2,
            seq: 1
        })
    );
    assert_eq!(decode(0, b"\x1b\x65 \x00"), "€ @");
}

#[tokio::test]
async fn jasmin_accepts_a_bind_and_receipts_a_submit() {
    let began = Instant::now();
    let jasmin = Jasmin::start().await;
    eprintln!("Jasmin::start: {:?}", began.elapsed());

    // SMPP, with a real client: the receipt names the message and says ACCEPTD, and what
    // Jasmin sent on is the UCS-2 bytes, coding 8.
    let v = esme_submit(&jasmin, "821012345678", "안녕하세요", 8, 1).await;
    let id = v["message_id"].as_str().expect("a message id");
    assert_eq!(v["status"], 0, "{v}");
    let receipt = &v["receipt"];
    assert!(
        matches!(receipt["stat"].as_str(), Some("ACCEPTD" | "DELIVRD")),
        "{v}"
    );
    assert_eq!(receipt["receipted_message_id"], id, "{v}");
    assert!(
        receipt["short_message"]
            .as_str()
            .unwrap()
            .starts_with(&format!("id:{id} ")),
        "{v}"
    );
    let sent = jasmin.wait_message(id).await;
    assert_eq!(
        (sent.data_coding(), sent.destination()),
        (8, "821012345678")
    );
    assert_eq!(sent.content(), ucs2("안녕하세요"));
    assert_eq!(sent.text(), "안녕하세요");
    assert_eq!(sent.pdus.len(), 1);
    assert_eq!(sent.pdus[0].registered_delivery & 1, 1);

    // HTTP: /send answers `Success "<id>"`, and Jasmin POSTs the level-1 DLR to dlr-url
    // (and retries unless the answer is `ACK/Jasmin`).
    let (dlr_url, mut dlrs) = dlr_listener().await;
    let hex = hex::encode(ucs2("안녕하세요"));
    let id = http_send(
        &jasmin,
        &[
            ("to", "821012345678"),
            ("coding", "8"),
            ("hex-content", &hex),
            ("dlr-url", &dlr_url),
            ("dlr-level", "3"),
            ("dlr-method", "POST"),
        ],
    )
    .await;
    let dlr = tokio::time::timeout(Duration::from_secs(20), dlrs.recv())
        .await
        .unwrap_or_else(|_| panic!("no DLR came\n{}", jasmin.logs()))
        .unwrap();
    assert_eq!(field(&dlr, "id"), Some(id.as_str()), "{dlr:?}");
    assert_eq!(field(&dlr, "level"), Some("1"), "{dlr:?}");
    assert_eq!(field(&dlr, "message_status"), Some("ESME_ROK"), "{dlr:?}");
    assert_eq!(field(&dlr, "connector"), Some("loop"), "{dlr:?}");
    let sent = jasmin.wait_message(&id).await;
    assert_eq!(
        (sent.data_coding(), sent.text().as_str()),
        (8, "안녕하세요")
    );

    // `content` is sent as its UTF-8 bytes whatever `coding` says (only coding 0 is
    // re-encoded, to GSM 03.38): UCS-2 goes in `hex-content`.
    let id = http_send(
        &jasmin,
        &[("to", "8210"), ("coding", "8"), ("content", "안녕")],
    )
    .await;
    assert_eq!(jasmin.wait_message(&id).await.content(), "안녕".as_bytes());

    // A long `content` is split by Jasmin, in UDH parts: observable part by part.
    let long = "kep ".repeat(50);
    let id = http_send(&jasmin, &[("to", "8210"), ("content", &long)]).await;
    let sent = jasmin.wait_message(&id).await;
    assert_eq!(sent.pdus.len(), 2, "{sent:#?}");
    let parts: Vec<_> = sent.pdus.iter().map(|p| p.concat().unwrap()).collect();
    assert_eq!((parts[0].total, parts[0].seq, parts[1].seq), (2, 1, 2));
    assert_eq!((sent.data_coding(), sent.text()), (0, long));
}

#[tokio::test]
async fn jasmin_relays_its_carriers_receipts_with_terminal_receipts() {
    let jasmin = Jasmin::start_with(JasminOptions {
        terminal_receipts: true,
    })
    .await;
    // SMPP: Jasmin's own receipt, then the carrier's, relayed.
    let v = esme_submit(&jasmin, "821012345678", "hello", 0, 2).await;
    let id = v["message_id"].as_str().unwrap();
    for r in v["receipts"].as_array().unwrap() {
        assert_eq!(
            (r["stat"].as_str(), r["receipted_message_id"].as_str()),
            (Some("ACCEPTD"), Some(id)),
            "{v}"
        );
    }
    // HTTP: the level-1 DLR, then a level-2 one with the receipt's fields.
    let (dlr_url, mut dlrs) = dlr_listener().await;
    let id = http_send(
        &jasmin,
        &[
            ("to", "8210"),
            ("content", "hello"),
            ("dlr-url", &dlr_url),
            ("dlr-level", "3"),
        ],
    )
    .await;
    let mut levels = Vec::new();
    while levels.len() < 2 {
        let dlr = tokio::time::timeout(Duration::from_secs(20), dlrs.recv())
            .await
            .unwrap_or_else(|_| panic!("DLRs came: {levels:?}\n{}", jasmin.logs()))
            .unwrap();
        assert_eq!(field(&dlr, "id"), Some(id.as_str()), "{dlr:?}");
        levels.push(dlr);
    }
    levels.sort_by_key(|d| field(d, "level").map(str::to_owned));
    assert_eq!(
        field(&levels[0], "message_status"),
        Some("ESME_ROK"),
        "{levels:?}"
    );
    let two = &levels[1];
    assert_eq!(
        (field(two, "level"), field(two, "message_status")),
        (Some("2"), Some("ACCEPTD")),
        "{two:?}"
    );
    for name in [
        "id_smsc",
        "sub",
        "dlvrd",
        "subdate",
        "donedate",
        "err",
        "text",
        "connector",
    ] {
        assert!(field(two, name).is_some(), "{name} in {two:?}");
    }
}

#[tokio::test]
async fn jasmin_restarts_on_its_ports_with_its_setup() {
    let mut jasmin = Jasmin::start().await;
    jasmin.stop().await;
    assert!(!jasmin.is_running());
    assert!(
        TcpStream::connect(("127.0.0.1", jasmin.smpp_port))
            .await
            .is_err()
    );
    let began = Instant::now();
    jasmin.restart().await;
    eprintln!("Jasmin::restart: {:?}", began.elapsed());
    let v = esme_submit(&jasmin, "821012345678", "again", 0, 1).await;
    assert_eq!(v["receipt"]["stat"], "ACCEPTD", "{v}");
    let sent = jasmin.wait_message(v["message_id"].as_str().unwrap()).await;
    assert_eq!((sent.data_coding(), sent.text().as_str()), (0, "again"));
}
