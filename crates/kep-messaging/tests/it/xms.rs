//! XMS sends through the delivery pipeline, their rules, search and detail.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::*;

#[tokio::test]
async fn an_xms_send_is_delivered_and_its_result_read_back() {
    let srv = spawn().await;
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;

    let (status, v) = srv
        .post(&token, "/v2/send/xms", &sms("c-1", "821012345678"))
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        (v["code"].as_str(), v["cid"].as_str()),
        (Some("200"), Some("c-1"))
    );
    let uid = v["uid"].as_str().unwrap().to_owned();
    let detail = srv.settled(&token, &uid).await;
    assert_eq!(detail["status_code"], "API_200");
    assert_eq!(detail["message"], "안녕하세요");
    assert!(
        detail["sent_date"].as_str().unwrap().len() == 19,
        "yyyy-mm-dd HH:MM:SS"
    );

    // The simulator's numbers: 0000 fails, 0001 fails but may be resent.
    let (_, v) = srv
        .post(&token, "/v2/send/xms", &sms("c-2", "821012340000"))
        .await;
    assert_eq!(
        srv.settled(&token, v["uid"].as_str().unwrap()).await["status_code"],
        "API_510"
    );
    let (_, v) = srv
        .post(&token, "/v2/send/xms", &sms("c-3", "821012340001"))
        .await;
    assert_eq!(
        srv.settled(&token, v["uid"].as_str().unwrap()).await["status_code"],
        "API_520"
    );

    // What left for the carrier.
    let outbox = srv.outbox().await;
    let uids: Vec<_> = outbox
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["uid"].as_str().unwrap())
        .collect();
    assert!(uids.contains(&uid.as_str()));
    assert_eq!(outbox.as_array().unwrap().len(), 3);

    // The same cid: the same body answers the first uid and sends nothing more; another
    // body is a 410.
    let (status, again) = srv
        .post(&token, "/v2/send/xms", &sms("c-1", "821012345678"))
        .await;
    assert_eq!(
        (status, again["uid"].as_str()),
        (StatusCode::OK, Some(uid.as_str()))
    );
    let (status, v) = srv
        .post(&token, "/v2/send/xms", &sms("c-1", "821099999999"))
        .await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("410"))
    );
    // Deliberate: a moment in which a second hand-over would show; none may.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let outbox = srv.outbox().await;
    assert_eq!(outbox.as_array().unwrap().len(), 3, "nothing sent twice");

    // Another client sees none of it.
    let (id2, secret2) = srv.client().await;
    let token2 = srv.token(&id2, &secret2).await;
    let (status, v) = srv
        .get(&token2, &format!("/v2/info/message/search/detail/{uid}"))
        .await;
    // A code of the result-code table (invalid input), with `code_detail` as the answer.
    assert_eq!(status, 400);
    assert_eq!(
        v,
        json!({"code": "410", "code_detail": {"detail_code": "API_410", "detail_message": "uid: no such message"}})
    );
    let (status, v) = srv
        .get("forged", &format!("/v2/info/message/search/detail/{uid}"))
        .await;
    assert_eq!((status.as_u16(), &v["code"]), (401, &json!("400")));
    assert!(v["code_detail"].is_object(), "{v}");
    // A path of no API answers in the same shape.
    let (status, v) = srv.get(&token2, "/v2/info/nothing/here").await;
    assert_eq!(status, 400);
    assert_eq!(
        v,
        json!({"code": "410", "code_detail": {"detail_code": "API_410", "detail_message": "path: no such API"}})
    );
}

#[tokio::test]
async fn every_rule_of_an_xms_send_is_a_410_naming_its_field() {
    let srv = spawn().await;
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    let base = sms("c", "821012345678");
    let with = |k: &str, v: Value| {
        let mut b = base.clone();
        b[k] = v;
        b
    };
    let without = |k: &str| {
        let mut b = base.clone();
        b.as_object_mut().unwrap().remove(k);
        b
    };
    let cases = vec![
        (without("cid"), "cid"),
        (without("message_type"), "message_type"),
        (without("phone_number"), "phone_number"),
        (without("message"), "message"),
        (without("sender_no"), "sender_no"),
        (with("message_type", json!("XX")), "message_type"),
        (with("cid", json!(5)), "cid"),
        (with("phone_number", json!("01012345678")), "phone_number"),
        (with("message", json!("가".repeat(46))), "message"),
        (with("message", json!("emoji 😀")), "message"),
        (with("client_id", json!("someone-else")), "client_id"),
        (with("content_group_id", json!("g")), "content_group_id"),
        (with("tax_cd1", json!("x".repeat(51))), "tax_cd1"),
        (with("etc10", json!("가".repeat(51))), "etc10"),
        (
            json!({"cid": "c", "message_type": "LM", "phone_number": "821012345678", "message": "m", "sender_no": "02", "title": "가".repeat(31)}),
            "title",
        ),
        (
            json!({"cid": "c", "message_type": "ISM", "phone_number": "11234567", "message": "m", "sender_no": "02"}),
            "nat_cd",
        ),
    ];
    for (body, field) in cases {
        let (status, v) = srv.post(&token, "/v2/send/xms", &body).await;
        assert_eq!(
            (status, v["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("410")),
            "{body}"
        );
        let message = v["result"]["detail_message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("{field}:")),
            "{body}: {message}"
        );
        // The refusal echoes the cid, when the body had one.
        let cid = body["cid"].as_str();
        assert_eq!(v["cid"].as_str(), cid, "{body}: {v}");
    }
    // At the limits: 45 Hangul syllables in an SM, a 30-syllable LM title.
    let (status, _) = srv
        .post(
            &token,
            "/v2/send/xms",
            &with("message", json!("가".repeat(45))),
        )
        .await;
    assert_eq!(status, 200);
    // Customer-defined values count characters, as the seed says: 50 Hangul syllables are
    // 100 CP949 bytes, and fit.
    let mut at = with("tax_cd2", json!("가".repeat(50)));
    at["cid"] = json!("c-chars");
    at["etc1"] = json!("가".repeat(50));
    let (status, v) = srv.post(&token, "/v2/send/xms", &at).await;
    assert_eq!(status, 200, "{v}");

    // Transport: malformed JSON, a wrong content type, an accept that refuses JSON.
    let raw = |ct: &'static str, accept: &'static str, body: &'static str| {
        srv.http
            .post(format!("{}/v2/send/xms", srv.url))
            .bearer_auth(&token)
            .header("content-type", ct)
            .header("accept", accept)
            .body(body)
            .send()
    };
    for (ct, accept, body) in [
        ("application/json", "*/*", "{oops"),
        ("text/plain", "*/*", "{}"),
        ("application/json", "text/html", "{}"),
    ] {
        let res = raw(ct, accept, body).await.unwrap();
        assert_eq!(res.status(), 400, "{ct} {accept} {body}");
        assert_eq!(res.json::<Value>().await.unwrap()["code"], "410");
    }
    // Media types are case-insensitive.
    let mut send = base.clone();
    send["cid"] = json!("c-accept");
    let res = srv
        .http
        .post(format!("{}/v2/send/xms", srv.url))
        .bearer_auth(&token)
        .header("accept", "Application/JSON")
        .json(&send)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);

    // No token, a forged one: 401 with code 400 and WWW-Authenticate.
    for auth in [None, Some("Bearer forged"), Some("Basic abc")] {
        let mut req = srv
            .http
            .post(format!("{}/v2/send/xms", srv.url))
            .json(&base);
        if let Some(a) = auth {
            req = req.header("Authorization", a);
        }
        let res = req.send().await.unwrap();
        assert_eq!(res.status(), 401);
        assert_eq!(
            res.headers()["www-authenticate"],
            "Bearer error=\"invalid_token\""
        );
        assert_eq!(res.json::<Value>().await.unwrap()["code"], "400");
    }
}

#[tokio::test]
async fn search_pages_by_uid_within_the_callers_messages() {
    let srv = spawn().await;
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    let mut uids = Vec::new();
    for i in 0..5 {
        let mut body = sms(&format!("s-{i}"), "821012345678");
        body["etc1"] = json!(if i % 2 == 0 { "even" } else { "odd" });
        let (_, v) = srv.post(&token, "/v2/send/xms", &body).await;
        uids.push(v["uid"].as_str().unwrap().to_owned());
    }
    let (status, page) = srv
        .post(&token, "/v2/info/message/search", &json!({"size": 2}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        (page["count"].as_i64(), page["next"].as_bool()),
        (Some(2), Some(true))
    );
    let got: Vec<_> = page["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uid"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(got, uids[..2]);
    let (_, page2) = srv
        .post(
            &token,
            "/v2/info/message/search",
            &json!({"size": 2, "last_uid": page["last_uid"]}),
        )
        .await;
    let got: Vec<_> = page2["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uid"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(got, uids[2..4]);
    let (_, odd) = srv
        .post(&token, "/v2/info/message/search", &json!({"etc1": "odd"}))
        .await;
    assert_eq!(odd["count"], 2);
    assert_eq!(odd["results"][0]["etc1"], "odd");
    // A search row (made by the database) says what the message's detail (made in Rust) does.
    for row in odd["results"].as_array().unwrap() {
        let (_, detail) = srv
            .get(
                &token,
                &format!(
                    "/v2/info/message/search/detail/{}",
                    row["uid"].as_str().unwrap()
                ),
            )
            .await;
        // (Its status may move on between the two reads.)
        for field in ["uid", "cid", "reg_date"] {
            assert_eq!(detail["result"][field], row[field], "{field}: {detail}");
        }
    }

    // Today by explicit dates finds them; yesterday finds none.
    let today = srv
        .clock
        .now()
        .to_zoned(jiff::tz::TimeZone::get("Asia/Seoul").unwrap())
        .date();
    let (_, v) = srv
        .post(
            &token,
            "/v2/info/message/search",
            &json!({"start_date": today.to_string(), "end_date": today.to_string(), "size": 1000}),
        )
        .await;
    assert_eq!(v["count"], 5);
    // Every field is optional: no body at all (nor a Content-Type) is today's search.
    let res = srv
        .http
        .post(format!("{}/v2/info/message/search", srv.url))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.json::<Value>().await.unwrap()["count"], 5);
    let (status, v) = srv
        .post(&token, "/v2/info/message/search", &Value::Null)
        .await;
    assert_eq!((status.as_u16(), &v["count"]), (200, &json!(5)));
    let y = today.yesterday().unwrap().to_string();
    let (_, v) = srv
        .post(
            &token,
            "/v2/info/message/search",
            &json!({"start_date": y, "end_date": y}),
        )
        .await;
    assert_eq!(
        (v["count"].as_i64(), v["next"].as_bool()),
        (Some(0), Some(false))
    );

    // Bounds and rules.
    for (body, field) in [
        (json!({"size": 0}), "size"),
        (json!({"size": 1001}), "size"),
        (json!({"start_date": today.to_string()}), "end_date"),
        (
            json!({"start_date": "2026/01/01", "end_date": "2026-01-01"}),
            "start_date",
        ),
        (json!({"last_uid": "abc"}), "last_uid"),
        (json!({"etc1": "가".repeat(51)}), "etc1"),
        (json!({"etc2": "x".repeat(51)}), "etc2"),
    ] {
        let (status, v) = srv.post(&token, "/v2/info/message/search", &body).await;
        assert_eq!(
            (status, v["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("410")),
            "{body}"
        );
        assert!(
            v["code_detail"]["detail_message"]
                .as_str()
                .unwrap()
                .starts_with(field),
            "{body}: {v}"
        );
    }
    let (status, _) = srv
        .post(&token, "/v2/info/message/search", &json!({"size": 1000}))
        .await;
    assert_eq!(status, 200);

    // Another client's id, and another client's token: nothing.
    let (_, v) = srv
        .post(
            &token,
            "/v2/info/message/search",
            &json!({"client_id": "someone-else"}),
        )
        .await;
    assert_eq!(v["count"], 0);
    let (id2, secret2) = srv.client().await;
    let token2 = srv.token(&id2, &secret2).await;
    let (_, v) = srv
        .post(&token2, "/v2/info/message/search", &json!({}))
        .await;
    assert_eq!(v["count"], 0);
}

#[tokio::test]
async fn a_carrier_slower_than_the_lease_still_gets_each_message_once() {
    let srv = spawn_with(|s| {
        s.simulator_delay_ms = 2500;
        s.dispatch_lease_s = 1;
    })
    .await;
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    let (_, v) = srv
        .post(&token, "/v2/send/xms", &sms("slow", "821012345678"))
        .await;
    // While the carrier works (2.5 s), the clock moves past the lease (1 s) again and
    // again, so the dispatcher claims the message anew; it must not hand it over again.
    let path = format!(
        "/v2/info/message/search/detail/{}",
        v["uid"].as_str().unwrap()
    );
    let settled = eventually(
        Duration::from_secs(30),
        "the slow send settles",
        async || {
            srv.clock.advance(Duration::from_secs(1));
            let (_, v) = srv.get(&token, &path).await;
            if v["result"]["status_code"] == "API_100" {
                Err(v)
            } else {
                Ok(v["result"].clone())
            }
        },
    )
    .await;
    assert_eq!(settled["status_code"], "API_200");
    let outbox = srv.outbox().await;
    assert_eq!(outbox.as_array().unwrap().len(), 1);
}

/// Found by schema fuzzing (fuzz/schema.sh): an integer sent as `2.0` was a 410 although its
/// schema (JSON Schema) counts it an integer, and a card sent as an array was read field by
/// field.
#[tokio::test]
async fn message_bodies_are_read_as_their_schema_reads_them() {
    let srv = spawn().await;
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    let (status, _) = srv
        .post(&token, "/v2/send/xms", &sms("whole", "821012345678"))
        .await;
    assert_eq!(status, 200);
    let (status, v) = srv
        .post(&token, "/v2/info/message/search", &json!({"size": 2.0}))
        .await;
    assert_eq!(
        (status, v["count"].as_i64()),
        (StatusCode::OK, Some(1)),
        "{v}"
    );

    let mut card = rcs("card-as-array", "821012345678");
    card["body"] = json!([["제목", "본문"]]);
    let (status, v) = srv.post(&token, "/v2/send/rcs", &card).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    let message = v["result"]["detail_message"].as_str().unwrap();
    assert!(
        message.starts_with("body[0]: invalid type: sequence"),
        "{v}"
    );
}

/// Found by schema fuzzing (fuzz/schema.sh): an operator query out of the integers' range was
/// answered as plain text, not in the operator API's error shape.
#[tokio::test]
async fn an_outbox_query_that_does_not_parse_is_a_400_in_the_operator_shape() {
    let srv = spawn().await;
    for query in ["limit=9223372036854775808", "limit=x"] {
        let res = srv
            .http
            .get(format!("{}/admin/v1/messaging/outbox?{query}", srv.admin))
            .bearer_auth(OPERATOR_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::BAD_REQUEST, "{query}");
        let v: Value = res.json().await.unwrap();
        assert_eq!(v["error"]["code"], "invalid_query", "{query}: {v}");
    }
}

/// Found by schema fuzzing (fuzz/schema.sh): a search over days after the year 2262
/// overflowed the uid arithmetic (a panic: no answer at all), and one ending 9999-12-31 was a
/// 410 naming start_date.
#[tokio::test]
async fn searches_take_any_date_there_is() {
    let srv = spawn().await;
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    let (status, _) = srv
        .post(&token, "/v2/send/xms", &sms("far", "821012345678"))
        .await;
    assert_eq!(status, 200);
    for (start, end, count) in [
        ("2020-01-01", "9999-12-31", 1),
        ("3000-01-01", "3000-01-01", 0),
        ("9999-12-31", "9999-12-31", 0),
    ] {
        let search = json!({"start_date": start, "end_date": end});
        let (status, v) = srv.post(&token, "/v2/info/message/search", &search).await;
        assert_eq!(
            (status, v["count"].as_i64()),
            (StatusCode::OK, Some(count)),
            "{search}: {v}"
        );
        let query = format!("/v2/info/rcs/search?start_date={start}&end_date={end}");
        let (status, v) = srv.get(&token, &query).await;
        assert_eq!(
            (status, v["count"].as_i64()),
            (StatusCode::OK, Some(0)),
            "{query}: {v}"
        );
    }
}
