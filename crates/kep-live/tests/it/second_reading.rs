//! What a second line-by-line reading of seed 000 found at the edges: blank ids, refusals
//! that name their field, and whole numbers written as floats.

use futures_util::{SinkExt as _, StreamExt as _};
use kep_api::live::join_value;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::common::{rpc_code, rpc_data, spawn};

/// The socket's answer to `join` (the challenge's nonce left unanswered): its error frame.
async fn join_refusal(live_url: &str, join: Value) -> Value {
    let url = format!("{}/api/ws", live_url.replacen("http", "ws", 1));
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    ws.next().await.unwrap().unwrap();
    ws.send(Message::text(join.to_string())).await.unwrap();
    let frame = ws.next().await.unwrap().unwrap();
    serde_json::from_str(frame.to_text().unwrap()).unwrap()
}

#[tokio::test]
async fn blank_ids_are_refused_and_every_refusal_names_its_field() {
    let srv = spawn(|_| {}).await;
    let (_, client) = srv.room_client("svc").await;
    let join = |fields: Value| {
        let mut j = json!({"type": "join", "serviceId": "svc", "roomId": "room", "value": "x"});
        for (k, v) in fields.as_object().unwrap() {
            j[k] = v.clone();
        }
        j
    };
    for (fields, field) in [
        (json!({"participantId": " "}), "participantId"),
        (json!({"participantId": "\u{3000}"}), "participantId"),
        (json!({"roomId": "  "}), "roomId"),
        (json!({"serviceId": " "}), "serviceId"),
        (json!({"participantId": 5}), "participantId"),
        (json!({"roomId": ["r"]}), "roomId"),
        (json!({"token": 1}), "token"),
    ] {
        let refusal = join_refusal(&srv.live_url, join(fields.clone())).await;
        assert_eq!(refusal["code"], -32602, "{fields}: {refusal}");
        assert_eq!(refusal["data"]["field"], field, "{fields}: {refusal}");
    }
    for (params, field) in [
        (
            json!({"roomId": " ", "targets": [{"participantId": "a"}]}),
            "roomId",
        ),
        (
            json!({"roomId": "r", "targets": [{"participantId": "a"}, {"participantId": " "}]}),
            "targets[1].participantId",
        ),
    ] {
        let e = client
            .call::<_, Value>(1, "Room.KickParticipant", params.clone())
            .await
            .unwrap_err();
        assert_eq!(rpc_code(&e), -32602, "{params}");
        assert_eq!(rpc_data(&e)["field"], field, "{params}");
    }
}

#[tokio::test]
async fn whole_floats_are_integers() {
    let srv = spawn(|_| {}).await;
    let (s, client) = srv.room_client("svc").await;
    // `1.0` passes as 1 (and then misses: no such room); `1.5` is no integer.
    let target = |stream: Value| json!({"roomId": "r", "targets": [{"participantId": "p", "streamId": stream}]});
    let e = client
        .call::<_, Value>(1, "Room.InactiveStream", target(json!(1.0)))
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&e), -11004, "{e}");
    for stream in [json!(1.5), json!(1e30)] {
        let e = client
            .call::<_, Value>(1, "Room.InactiveStream", target(stream.clone()))
            .await
            .unwrap_err();
        assert_eq!(rpc_code(&e), -32602, "{stream}");
        assert_eq!(rpc_data(&e)["field"], "targets[0].streamId", "{stream}");
    }
    // On the socket: a stream published, then unpublished by its id written `1.0`.
    let url = format!("{}/api/ws", srv.live_url.replacen("http", "ws", 1));
    let (ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let (mut tx, mut rx) = ws.split();
    let mut until = async |kind: &str| loop {
        let frame = rx.next().await.unwrap().unwrap();
        let v: Value = serde_json::from_str(frame.to_text().unwrap()).unwrap();
        if v["type"] == kind {
            break v;
        }
        assert_ne!(v["type"], "error", "{v}");
    };
    let nonce = until("challenge").await["nonce"]
        .as_str()
        .unwrap()
        .to_owned();
    let value = join_value("svc", &s.service_secret, &nonce);
    let join = json!({"type": "join", "serviceId": "svc", "roomId": "room", "value": value});
    let mut send = async |v: Value| tx.send(Message::text(v.to_string())).await.unwrap();
    send(join).await;
    until("joined").await;
    send(json!({"type": "publish"})).await;
    let stream_id = until("published").await["streamId"].as_i64().unwrap();
    let unpublish = json!({"type": "unpublish", "streamId": stream_id as f64});
    assert!(unpublish.to_string().contains(".0"), "{unpublish}");
    send(unpublish).await;
    assert_eq!(until("unpublished").await["streamId"], stream_id);
}
