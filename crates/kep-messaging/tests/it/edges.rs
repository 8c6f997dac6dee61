//! What careful clients of seed 002 hit at the edges: blank optional fields, a title an SM
//! does not carry, more bodies than a type carries, a template's detail, refusals that name
//! their message, wrong methods and the case of the authentication scheme.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{rcs, sms, spawn};

#[tokio::test]
async fn blank_optional_fields_are_absent_and_an_sm_title_is_not_delivered() {
    let srv = spawn().await;
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    // Every optional field a form leaves blank, on the types they would otherwise refuse.
    let mut sm = sms("blank", "821012345678");
    for field in ["title", "client_id", "nat_cd", "content_group_id"] {
        sm[field] = json!("");
    }
    let (status, v) = srv.post(&token, "/v2/send/xms", &sm).await;
    assert_eq!(status, 200, "{v}");
    let detail = srv.settled(&token, v["uid"].as_str().unwrap()).await;
    for field in ["title", "nat_cd", "content_group_id"] {
        assert!(detail.get(field).is_none(), "{field}: {detail}");
    }
    let mut rcs_blank = rcs("blank-rcs", "821012345678");
    for field in ["client_id", "footer", "fall_back_message_type"] {
        rcs_blank[field] = json!("");
    }
    let (status, v) = srv.post(&token, "/v2/send/rcs", &rcs_blank).await;
    assert_eq!(status, 200, "{v}");
    // Blank is still not given where the field is required.
    let mut needed = rcs("needed", "821012345678");
    needed["fall_back_yn"] = json!(true);
    needed["fall_back_message"] = json!("m");
    needed["fall_back_message_type"] = json!("");
    let (status, v) = srv.post(&token, "/v2/send/rcs", &needed).await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["result"]["detail_message"]
            .as_str()
            .unwrap()
            .starts_with("fall_back_message_type:"),
        "{v}"
    );

    // A title on an SM or ISM is accepted, and neither delivered nor shown; an LM keeps it.
    let mut titled = sms("titled", "821012345678");
    titled["title"] = json!("제목");
    let mut ism = json!({"cid": "titled-ism", "message_type": "ISM", "phone_number": "11234567",
        "nat_cd": "1", "message": "m", "sender_no": "02", "title": "t"});
    let mut lm = sms("titled-lm", "821012345678");
    lm["message_type"] = json!("LM");
    lm["title"] = json!("제목");
    for (body, kept) in [(&mut titled, false), (&mut ism, false), (&mut lm, true)] {
        let (status, v) = srv.post(&token, "/v2/send/xms", body).await;
        assert_eq!(status, 200, "{v}");
        let detail = srv.settled(&token, v["uid"].as_str().unwrap()).await;
        assert_eq!(detail.get("title").is_some(), kept, "{detail}");
    }
    let outbox = srv.outbox().await;
    let handed: Vec<Value> = outbox
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["payload"].clone())
        .collect();
    let by_cid = |cid: &str| handed.iter().find(|p| p["cid"] == cid).unwrap().clone();
    assert!(by_cid("titled").get("title").is_none());
    assert!(by_cid("titled-ism").get("title").is_none());
    assert_eq!(by_cid("titled-lm")["title"], "제목");
    assert!(by_cid("blank").get("nat_cd").is_none());
    // Sent again with the title left out, the SM is the same message: its first uid.
    let (_, first) = srv.post(&token, "/v2/send/xms", &titled).await;
    let (_, second) = srv
        .post(&token, "/v2/send/xms", &sms("titled", "821012345678"))
        .await;
    assert_eq!(first["uid"], second["uid"]);
}

#[tokio::test]
async fn more_bodies_than_the_type_carries_fail_delivery_with_the_reason() {
    let srv = spawn().await;
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    let bodies = |n: usize| {
        json!(
            (0..n)
                .map(|i| json!({"title": format!("t{i}"), "description": "d"}))
                .collect::<Vec<_>>()
        )
    };
    // (type, bodies it carries)
    for (message_type, max) in [("RCSSMS", 1), ("RCSLMS", 1), ("RCSMMS", 6)] {
        for n in [max, max + 1] {
            let mut send = rcs(&format!("{message_type}-{n}"), "821012345678");
            send["message_type"] = json!(message_type);
            send["body"] = bodies(n);
            for b in send["body"].as_array_mut().unwrap() {
                b["button"] = json!([]);
            }
            let (status, v) = srv.post(&token, "/v2/send/rcs", &send).await;
            assert_eq!(status, 200, "{message_type} with {n} bodies: {v}");
            let uid = v["uid"].as_str().unwrap();
            let detail = srv.rcs_settled(&token, uid).await;
            if n == max {
                assert_eq!(detail["status"], "API_200", "{detail}");
                continue;
            }
            assert_eq!(detail["status"], "API_510", "{detail}");
            assert_eq!(detail["rcs_status"], "fail", "{detail}");
            assert_eq!(
                detail["error_message"],
                format!("{message_type} carries at most {max} bodies; {n} were sent")
            );
        }
    }
    // Refused before the carrier: only the deliverable ones were handed over.
    let outbox = srv.outbox().await;
    assert_eq!(outbox.as_array().unwrap().len(), 3, "{outbox}");
}

#[tokio::test]
async fn a_template_messages_detail_shows_its_text_as_body() {
    let srv = spawn().await;
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    let mut free = rcs("free", "821012345678");
    free["message_type"] = json!("RCSTMPL");
    free["body"] = Value::Null;
    free["tmpl_decription"] = json!("안녕하세요 고객님");
    let mut cells = free.clone();
    cells["cid"] = json!("cells");
    cells.as_object_mut().unwrap().remove("tmpl_decription");
    cells["tmpl_variable"] = json!({"name": "홍길동", "amount": "1000"});
    for (send, body) in [
        (free, "안녕하세요 고객님".to_owned()),
        (
            cells,
            json!({"amount": "1000", "name": "홍길동"}).to_string(),
        ),
    ] {
        let (status, v) = srv.post(&token, "/v2/send/rcs", &send).await;
        assert_eq!(status, 200, "{v}");
        let detail = srv.rcs_settled(&token, v["uid"].as_str().unwrap()).await;
        assert_eq!(detail["service_type"], "RCSTMPL");
        assert_eq!(detail["body"], body, "{detail}");
    }
}

#[tokio::test]
async fn refusals_echo_the_cid_and_wrong_methods_answer_in_the_apis_shape() {
    let srv = spawn().await;
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    // A refused RCS send, and one refused for its token: both name the message.
    let mut bad = rcs("mine-1", "821012345678");
    bad["ad_flag"] = json!("X");
    let (status, v) = srv.post(&token, "/v2/send/rcs", &bad).await;
    assert_eq!(
        (status, v["cid"].as_str()),
        (StatusCode::BAD_REQUEST, Some("mine-1"))
    );
    let (status, v) = srv
        .post("forged", "/v2/send/xms", &sms("mine-2", "8210"))
        .await;
    assert_eq!(
        (status, v["cid"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("mine-2"))
    );
    assert_eq!(v["code"], "400");

    // Wrong methods: 405 with Allow, in the shape of the path's refusals.
    let uid = "00000000000000000000";
    for (method, path, detail_key, code) in [
        (
            reqwest::Method::GET,
            "/v2/send/xms".to_owned(),
            "result",
            "410",
        ),
        (
            reqwest::Method::DELETE,
            "/v2/oauth/token".to_owned(),
            "result",
            "410",
        ),
        (
            reqwest::Method::POST,
            format!("/v2/info/message/search/detail/{uid}"),
            "code_detail",
            "410",
        ),
        (
            reqwest::Method::POST,
            format!("/v2/info/rcs/search/detail/{uid}"),
            "code_detail",
            "405",
        ),
    ] {
        let res = srv
            .http
            .request(method.clone(), format!("{}{path}", srv.url))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 405, "{method} {path}");
        assert!(res.headers().contains_key("allow"), "{method} {path}");
        let v: Value = res.json().await.unwrap();
        assert_eq!(v["code"], code, "{method} {path}: {v}");
        assert_eq!(
            v[detail_key]["detail_code"],
            format!("API_{code}"),
            "{method} {path}: {v}"
        );
    }
}

#[tokio::test]
async fn the_authentication_scheme_is_case_insensitive() {
    let srv = spawn().await;
    let (id, secret) = srv.client().await;
    use base64::Engine as _;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("{id}:{secret}"));
    for scheme in ["basic", "BASIC", "Basic"] {
        let res = srv
            .http
            .post(format!("{}/v2/oauth/token", srv.url))
            .header("authorization", format!("{scheme} {basic}"))
            .form(&[("grant_type", "client_credentials")])
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "{scheme}");
    }
    let token = srv.token(&id, &secret).await;
    for scheme in ["bearer", "BEARER", "Bearer", "bEaReR"] {
        let res = srv
            .http
            .post(format!("{}/v2/info/message/search", srv.url))
            .header("authorization", format!("{scheme}  {token}"))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "{scheme}");
    }
    // A scheme that is not Bearer is still refused.
    let res = srv
        .http
        .post(format!("{}/v2/info/message/search", srv.url))
        .header("authorization", format!("Bearerx {token}"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
}
