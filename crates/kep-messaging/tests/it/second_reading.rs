//! What a second line-by-line reading of seed 002 found at the edges: empty template fields,
//! fields of another message type, buttons that are not objects, refusals of a search in
//! the searches' own shape, filter values, and a second file in a one-file upload.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Server, rcs, spawn};

/// An RCSTMPL send of `cid` with `fields` set (and no body).
fn template(cid: &str, fields: Value) -> Value {
    let mut send = rcs(cid, "821012345678");
    send["message_type"] = json!("RCSTMPL");
    send.as_object_mut().unwrap().remove("body");
    for (k, v) in fields.as_object().unwrap() {
        send[k] = v.clone();
    }
    send
}

/// The refusal of `send`: 400, code 410, and the field its detail names.
async fn refused_field(srv: &Server, token: &str, send: &Value) -> String {
    let (status, v) = srv.post(token, "/v2/send/rcs", send).await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("410")),
        "{send}: {v}"
    );
    let detail = v["result"]["detail_message"].as_str().unwrap();
    detail.split(':').next().unwrap().to_owned()
}

#[tokio::test]
async fn an_rcs_send_carries_only_its_types_fields() {
    let srv = spawn().await;
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    let cells = json!({"name": "홍길동"});
    let mut sms_with_cells = rcs("sms-cells", "821012345678");
    sms_with_cells["message_type"] = json!("RCSSMS");
    sms_with_cells["tmpl_variable"] = cells.clone();
    let mut lms_with_text = rcs("lms-text", "821012345678");
    lms_with_text["tmpl_decription"] = json!("안녕하세요");
    let mut tmpl_with_body = template("tmpl-body", json!({"tmpl_decription": "안녕하세요"}));
    tmpl_with_body["body"] = rcs("x", "8210")["body"].clone();
    let cases = [
        // Empty is as absent.
        (
            template("empty-text", json!({"tmpl_decription": ""})),
            "tmpl_decription",
        ),
        (
            template("empty-cells", json!({"tmpl_variable": {}})),
            "tmpl_decription",
        ),
        (
            template(
                "both-empty",
                json!({"tmpl_decription": " ", "tmpl_variable": {}}),
            ),
            "tmpl_decription",
        ),
        // A free type and a cell type at once.
        (
            template(
                "both",
                json!({"tmpl_decription": "안녕", "tmpl_variable": cells}),
            ),
            "tmpl_variable",
        ),
        (tmpl_with_body, "body"),
        (sms_with_cells, "tmpl_variable"),
        (lms_with_text, "tmpl_decription"),
    ];
    for (send, field) in cases {
        assert_eq!(refused_field(&srv, &token, &send).await, field, "{send}");
    }
    // Empty beside the other kind is still as absent: accepted.
    for (cid, fields) in [
        (
            "text-and-no-cells",
            json!({"tmpl_decription": "안녕", "tmpl_variable": {}}),
        ),
        (
            "cells-and-no-text",
            json!({"tmpl_decription": "", "tmpl_variable": cells}),
        ),
    ] {
        let (status, v) = srv
            .post(&token, "/v2/send/rcs", &template(cid, fields))
            .await;
        assert_eq!(status, 200, "{cid}: {v}");
    }
    let mut sms_empty_cells = rcs("sms-empty-cells", "821012345678");
    sms_empty_cells["tmpl_variable"] = json!({});
    let (status, v) = srv.post(&token, "/v2/send/rcs", &sms_empty_cells).await;
    assert_eq!(status, 200, "{v}");
}

#[tokio::test]
async fn a_button_is_an_object() {
    let srv = spawn().await;
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    let with_buttons = |cid: &str, buttons: Value| {
        let mut send = rcs(cid, "821012345678");
        send["body"][0]["button"] = buttons;
        send
    };
    for (cid, buttons) in [
        ("empty", json!([{}])),
        ("none", json!([])),
        ("one", json!([{"action": "open"}])),
    ] {
        let (status, v) = srv
            .post(&token, "/v2/send/rcs", &with_buttons(cid, buttons))
            .await;
        assert_eq!(status, 200, "{cid}: {v}");
    }
    for (cid, buttons, field) in [
        ("text", json!(["x"]), "body[0].button[0]"),
        ("second", json!([{}, 1]), "body[0].button[1]"),
        ("null", json!([{}, {}, null]), "body[0].button[2]"),
    ] {
        assert_eq!(
            refused_field(&srv, &token, &with_buttons(cid, buttons)).await,
            field
        );
    }
}

/// `time_stamp` is the seed's "carrier to device reception time": a message no device
/// received (failed at the carrier, or never handed over) has none, as it has no
/// `sent_date` when never handed over.
#[tokio::test]
async fn only_a_received_message_has_a_time_stamp() {
    let srv = spawn().await;
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    let mut too_many = rcs("too-many-bodies", "821012345678");
    let body = too_many["body"][0].clone();
    too_many["body"] = json!([body, body]);
    for (send, received) in [
        (rcs("received", "821012345678"), true),
        (rcs("failed", "821012340000"), false),
        (too_many, false),
    ] {
        let (status, v) = srv.post(&token, "/v2/send/rcs", &send).await;
        assert_eq!(status, 200, "{v}");
        let detail = srv.rcs_settled(&token, v["uid"].as_str().unwrap()).await;
        assert_eq!(detail.get("time_stamp").is_some(), received, "{detail}");
        assert_eq!(detail["status"] == "API_200", received, "{detail}");
    }
}

/// A refused search answers in the searches' own shape: `status` (which the seed requires
/// of their answers) and `code`, the detail under `code_detail`.
#[tokio::test]
async fn a_refused_search_answers_in_the_searches_shape() {
    let srv = spawn().await;
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    let shaped = |what: &str, (status, v): (StatusCode, Value), code: &str| {
        assert!(!status.is_success(), "{what}: {v}");
        assert_eq!(v["status"], code, "{what}: {v}");
        assert_eq!(v["code"], code, "{what}: {v}");
        assert_eq!(
            v["code_detail"]["detail_code"],
            format!("API_{code}"),
            "{what}: {v}"
        );
        assert!(v.get("result").is_none(), "{what}: {v}");
    };
    for path in ["/v2/info/message/search", "/v2/info/rcs/search"] {
        for body in [
            json!({"size": 0}),
            json!({"start_date": "2026-01-01"}),
            json!({"size": 1001}),
        ] {
            shaped(path, srv.post(&token, path, &body).await, "410");
        }
        shaped(path, srv.post("forged", path, &json!({})).await, "400");
        let res = srv
            .http
            .delete(format!("{}{path}", srv.url))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        let status = res.status();
        shaped(path, (status, res.json().await.unwrap()), "410");
    }
    shaped(
        "GET",
        srv.get(&token, "/v2/info/rcs/search?size=0").await,
        "410",
    );
    shaped(
        "GET",
        srv.get(&token, "/v2/info/rcs/search?end_date=2026-01-01")
            .await,
        "410",
    );
}

/// Status filters take the values the results carry, in both forms, and refuse others.
#[tokio::test]
async fn status_filters_take_what_results_carry_and_refuse_the_rest() {
    let srv = spawn().await;
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    let (_, v) = srv
        .post(
            &token,
            "/v2/send/xms",
            &crate::common::sms("sm", "821012345678"),
        )
        .await;
    srv.settled(&token, v["uid"].as_str().unwrap()).await;
    let (_, v) = srv
        .post(&token, "/v2/send/rcs", &rcs("ok", "821012345678"))
        .await;
    srv.rcs_settled(&token, v["uid"].as_str().unwrap()).await;
    let (_, v) = srv
        .post(&token, "/v2/send/rcs", &rcs("failed", "821012340000"))
        .await;
    srv.rcs_settled(&token, v["uid"].as_str().unwrap()).await;
    let count = |(status, v): (StatusCode, Value)| {
        assert_eq!(status, 200, "{v}");
        v["count"].as_i64().unwrap()
    };
    let xms = "/v2/info/message/search";
    for (value, found) in [("200", 1), ("API_200", 1), ("510", 0), ("API_100", 0)] {
        let body = json!({"status_code": value});
        assert_eq!(count(srv.post(&token, xms, &body).await), found, "{value}");
    }
    let rcs_search = "/v2/info/rcs/search";
    for (value, found) in [
        ("200", 1),
        ("API_510", 1),
        ("success", 1),
        ("fail", 1),
        ("processing", 0),
    ] {
        let body = json!({"status": value});
        assert_eq!(
            count(srv.post(&token, rcs_search, &body).await),
            found,
            "{value}"
        );
    }
    for (path, field, value) in [
        (xms, "status_code", "XYZ"),
        (xms, "status_code", "success"),
        (rcs_search, "status", "succeeded"),
        (rcs_search, "status", "API_999"),
    ] {
        let (status, v) = srv.post(&token, path, &json!({field: value})).await;
        assert_eq!(
            (status, v["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("410")),
            "{v}"
        );
        let detail = v["code_detail"]["detail_message"].as_str().unwrap();
        assert!(detail.starts_with(&format!("{field}:")), "{v}");
    }
}
