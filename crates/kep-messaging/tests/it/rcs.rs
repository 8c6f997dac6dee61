//! RCS sends: their rules, fallback, and results handed out in groups.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::*;

#[tokio::test]
async fn every_rule_of_an_rcs_send_is_a_410_naming_its_field() {
    let srv = spawn().await;
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    let base = rcs("r", "821012345678");
    let set = |path: &[&str], v: Value| {
        let mut b = base.clone();
        let mut at = &mut b;
        for (i, k) in path.iter().enumerate() {
            if i + 1 == path.len() {
                at[*k] = v.clone();
            } else {
                at = if let Ok(n) = k.parse::<usize>() {
                    &mut at[n]
                } else {
                    &mut at[*k]
                };
            }
        }
        b
    };
    let buttons = |n: usize| {
        json!(
            (0..n)
                .map(|_| json!({"action": "open"}))
                .collect::<Vec<_>>()
        )
    };
    let mut cases = vec![
        (set(&["cid"], Value::Null), "cid"),
        (set(&["message_type"], Value::Null), "message_type"),
        (set(&["phone_number"], Value::Null), "phone_number"),
        (set(&["phone_number"], json!("01012345678")), "phone_number"),
        (set(&["sender_no"], Value::Null), "sender_no"),
        (set(&["sender_no"], json!("x".repeat(17))), "sender_no"),
        (set(&["ad_flag"], Value::Null), "ad_flag"),
        (set(&["template_code"], Value::Null), "template_code"),
        (
            set(&["template_code"], json!("t".repeat(31))),
            "template_code",
        ),
        (set(&["agency_id"], json!("")), "agency_id"),
        (set(&["ad_flag"], json!("X")), "ad_flag"),
        (set(&["footer"], json!("0801234567")), "footer"),
        (set(&["fall_back_yn"], Value::Null), "fall_back_yn"),
        (
            set(&["fall_back_yn"], json!(true)),
            "fall_back_message_type",
        ),
        (set(&["message_type"], json!("RCSXXX")), "message_type"),
        (set(&["body", "0", "button"], buttons(4)), "body[0].button"),
        (
            set(&["body", "0", "description"], json!("a".repeat(1301))),
            "body[0].description",
        ),
        (set(&["body", "0", "title"], json!("")), "body[0].title"),
        (
            set(&["body", "0", "media"], json!("maapfile://x")),
            "body[0].media",
        ),
        // A template carries no bodies.
        (set(&["message_type"], json!("RCSTMPL")), "body"),
    ];
    // With fall back, sender_no is the number the SMS comes from.
    let mut number_used = set(&["sender_no"], json!("not-digits"));
    number_used["fall_back_yn"] = json!(true);
    number_used["fall_back_message_type"] = json!("SM");
    number_used["fall_back_message"] = json!("m");
    cases.push((number_used, "sender_no"));
    for (body, field) in cases {
        let (status, v) = srv.post(&token, "/v2/send/rcs", &body).await;
        assert_eq!(
            (status, v["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("410")),
            "{body}"
        );
        assert!(
            v["result"]["detail_message"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{field}:")),
            "{field}: {v}"
        );
    }
    // At the limits: 3 buttons on an RCSLMS, 6 bodies of 2 buttons on an RCSMMS, 1300 bytes.
    let mut ok = vec![
        set(&["body", "0", "button"], buttons(3)),
        set(&["body", "0", "description"], json!("가".repeat(650))),
        set(&["footer"], json!("0801234567")),
    ];
    ok[2]["ad_flag"] = json!("Y");
    let mut mms = set(&["message_type"], json!("RCSMMS"));
    mms["body"] = json!(
        (0..6)
            .map(|_| json!({"title": "t", "description": "d", "button": buttons(2)}))
            .collect::<Vec<_>>()
    );
    ok.push(mms.clone());
    mms["body"][0]["button"] = buttons(3);
    let mut tmpl = set(&["message_type"], json!("RCSTMPL"));
    tmpl.as_object_mut().unwrap().remove("body");
    tmpl["tmpl_variable"] = json!({"name": "가".repeat(45)});
    ok.push(tmpl.clone());
    // Without fall back, sender_no is "any value when unused" (text(16)).
    ok.push(set(&["sender_no"], json!("unused-sender")));
    for (i, mut body) in ok.into_iter().enumerate() {
        body["cid"] = json!(format!("ok-{i}"));
        let (status, v) = srv.post(&token, "/v2/send/rcs", &body).await;
        assert_eq!(status, 200, "{body}: {v}");
    }
    let (status, _) = srv.post(&token, "/v2/send/rcs", &mms).await;
    assert_eq!(status, 400, "3 buttons on an RCSMMS body");
    tmpl["tmpl_variable"] = json!({"a": "가".repeat(45), "b": "x"});
    let (status, _) = srv.post(&token, "/v2/send/rcs", &tmpl).await;
    assert_eq!(status, 400, "91 bytes of variables");
}

#[tokio::test]
async fn rcs_falls_back_and_results_are_handed_out_in_groups() {
    let srv = spawn_with(|s| s.results_lease_s = 1).await;
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    let fall_back = |mut b: Value| {
        b["fall_back_yn"] = json!(true);
        b["fall_back_message_type"] = json!("SM");
        b["fall_back_message"] = json!("대체 문자");
        b
    };
    let cases = [
        (rcs("ok", "821012345678"), "API_200", Some("success"), None),
        (
            fall_back(rcs("fb", "821012340002")),
            "API_200",
            Some("fail"),
            Some("success"),
        ),
        (rcs("norcs", "821012340002"), "API_510", Some("fail"), None),
        (
            fall_back(rcs("both", "821012340000")),
            "API_510",
            Some("fail"),
            Some("fail"),
        ),
    ];
    let mut uids = Vec::new();
    for (body, status, rcs_status, fallback) in &cases {
        let (_, v) = srv.post(&token, "/v2/send/rcs", body).await;
        let uid = v["uid"].as_str().unwrap().to_owned();
        let detail = srv.rcs_settled(&token, &uid).await;
        assert_eq!(detail["status"], *status, "{body}");
        assert_eq!(detail["rcs_status"].as_str(), *rcs_status, "{body}");
        assert_eq!(detail["fallback_status"].as_str(), *fallback, "{body}");
        uids.push(uid);
    }

    // One group holds all four; a second call gets none while it is open.
    let (status, group) = srv.get(&token, "/v2/info/rcs/results").await;
    assert_eq!(status, 200);
    let got: Vec<_> = group["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uid"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(got, uids);
    let (_, none) = srv.post(&token, "/v2/info/rcs/results", &json!({})).await;
    assert_eq!(none["results"], json!([]));
    assert!(none.get("report_group_id").is_none());

    // Not completed within its lease (1 s): the results come back in a new group. The
    // server compares the lease with the clock at each call.
    srv.clock.advance(Duration::from_millis(999));
    let (_, held) = srv.get(&token, "/v2/info/rcs/results").await;
    assert_eq!(held["results"], json!([]), "the lease still holds them");
    srv.clock.advance(Duration::from_millis(1));
    let (_, again) = srv.get(&token, "/v2/info/rcs/results").await;
    assert_eq!(again["results"].as_array().unwrap().len(), 4);
    let old = group["report_group_id"].as_str().unwrap();
    let group_id = again["report_group_id"].as_str().unwrap();
    let put = |g: String| {
        srv.http
            .put(format!("{}/v2/info/rcs/results/complete/{g}", srv.url))
            .bearer_auth(&token)
            .send()
    };
    let res = put(old.to_owned()).await.unwrap();
    assert_eq!(res.status(), 400, "an expired group");
    let res = put(group_id.to_owned()).await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.json::<Value>().await.unwrap()["code"], "200");
    // Twice is as once: a client retrying after a lost answer sees success.
    let res = put(group_id.to_owned()).await.unwrap();
    assert_eq!(
        (
            res.status(),
            res.json::<Value>().await.unwrap()["code"]
                .as_str()
                .map(str::to_owned)
        ),
        (StatusCode::OK, Some("200".into()))
    );
    assert_eq!(put("unknown".into()).await.unwrap().status(), 400);
    let (_, after) = srv.get(&token, "/v2/info/rcs/results").await;
    assert_eq!(
        after["results"],
        json!([]),
        "nothing is reported twice after completion"
    );

    // Search by POST and by GET, with a service_type filter; detail codes.
    let (_, page) = srv
        .post(&token, "/v2/info/rcs/search", &json!({"size": 2}))
        .await;
    assert_eq!(
        (page["count"].as_i64(), page["next"].as_bool()),
        (Some(2), Some(true))
    );
    let (_, page) = srv
        .get(
            &token,
            &format!("/v2/info/rcs/search?size=10&last_uid={}", uids[1]),
        )
        .await;
    assert_eq!(page["count"], 2);
    let (_, none) = srv
        .get(&token, "/v2/info/rcs/search?service_type=RCSMMS")
        .await;
    assert_eq!(none["count"], 0);
    let (status, _) = srv.get(&token, "/v2/info/rcs/search?size=1001").await;
    assert_eq!(status, 400);
    let (id2, secret2) = srv.client().await;
    let token2 = srv.token(&id2, &secret2).await;
    // Another client's message answers as a uid that does not exist: no oracle.
    let (status, v) = srv
        .get(&token, "/v2/info/rcs/search/detail/00000000000000000000")
        .await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("404"))
    );
    assert_eq!(
        srv.get(&token2, &format!("/v2/info/rcs/search/detail/{}", uids[0]))
            .await,
        (status, v)
    );
    let (status, v) = srv
        .get("forged", &format!("/v2/info/rcs/search/detail/{}", uids[0]))
        .await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("401"))
    );
    // It checks `accept` as every messaging call does.
    let res = srv
        .http
        .get(format!("{}/v2/info/rcs/search/detail/{}", srv.url, uids[1]))
        .bearer_auth(&token)
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["code"], "400", "{v}");
    assert!(
        v["code_detail"]["detail_message"]
            .as_str()
            .unwrap()
            .starts_with("accept:"),
        "{v}"
    );
    let (_, v) = srv
        .get(&token, &format!("/v2/info/rcs/search/detail/{}", uids[1]))
        .await;
    assert_eq!(
        (
            v["result"]["fallback_yn"].as_bool(),
            v["result"]["fallback_type"].as_str()
        ),
        (Some(true), Some("SM"))
    );
}
