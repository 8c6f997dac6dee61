//! The messaging API end to end on a real server: tokens, XMS sends through the delivery
//! pipeline, search and detail.

use std::time::Duration;

use base64::Engine as _;
use kep_core::limits::Limits;
use kep_core::platform::Platform;
use kep_messaging::{MessagingService, MessagingSettings};
use reqwest::StatusCode;
use serde_json::{Value, json};

const OPERATOR_TOKEN: &str = "test-operator-token";

struct Server {
    url: String,
    admin: String,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

async fn spawn() -> Server {
    spawn_with(|_| {}).await
}

async fn spawn_with(configure: impl FnOnce(&mut MessagingSettings)) -> Server {
    let mut settings = MessagingSettings {
        addr: "127.0.0.1:0".parse().unwrap(),
        simulator_delay_ms: 20,
        ..MessagingSettings::default()
    };
    configure(&mut settings);
    let dir = tempfile::tempdir().unwrap();
    let mut platform = Platform::new(dir.path(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    platform.start::<MessagingService>(settings).await.unwrap();
    let running = platform.serve(OPERATOR_TOKEN, Limits::default());
    Server {
        url: running.url("messaging"),
        admin: running.url("admin"),
        http: reqwest::Client::new(),
        _dir: dir,
    }
}

impl Server {
    async fn client(&self) -> (String, String) {
        let res = self
            .http
            .post(format!("{}/admin/v1/messaging/clients", self.admin))
            .bearer_auth(OPERATOR_TOKEN)
            .json(&json!({"name": "test"}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::CREATED);
        let v: Value = res.json().await.unwrap();
        (
            v["client_id"].as_str().unwrap().to_owned(),
            v["client_secret"].as_str().unwrap().to_owned(),
        )
    }

    async fn token(&self, id: &str, secret: &str) -> String {
        let res = self
            .http
            .post(format!("{}/v2/oauth/token", self.url))
            .basic_auth(id, Some(secret))
            .form(&[("grant_type", "client_credentials")])
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        res.json::<Value>().await.unwrap()["access_token"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    async fn post(&self, token: &str, path: &str, body: &Value) -> (StatusCode, Value) {
        let res = self
            .http
            .post(format!("{}{path}", self.url))
            .bearer_auth(token)
            .header("accept", "*/*")
            .json(body)
            .send()
            .await
            .unwrap();
        (res.status(), res.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, token: &str, path: &str) -> (StatusCode, Value) {
        let res = self
            .http
            .get(format!("{}{path}", self.url))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        (res.status(), res.json().await.unwrap_or(Value::Null))
    }

    /// What was handed to the carrier, newest first.
    async fn outbox(&self) -> Value {
        let res = self
            .http
            .get(format!("{}/admin/v1/messaging/outbox", self.admin))
            .bearer_auth(OPERATOR_TOKEN)
            .send()
            .await
            .unwrap();
        res.json().await.unwrap()
    }

    /// The detail once the message left status 100.
    async fn settled(&self, token: &str, uid: &str) -> Value {
        for _ in 0..200 {
            let (_, v) = self
                .get(token, &format!("/v2/info/message/search/detail/{uid}"))
                .await;
            if v["result"]["status_code"] != "API_100" {
                return v["result"].clone();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("{uid} never settled");
    }
}

fn sms(cid: &str, phone: &str) -> Value {
    json!({"cid": cid, "message_type": "SM", "phone_number": phone, "message": "안녕하세요", "sender_no": "0212345678"})
}

#[tokio::test]
async fn the_token_endpoint_takes_all_three_client_authentications() {
    let srv = spawn().await;
    let (id, secret) = srv.client().await;
    let url = format!("{}/v2/oauth/token", srv.url);
    let grant = [("grant_type", "client_credentials")];

    let basic = srv
        .http
        .post(&url)
        .basic_auth(&id, Some(&secret))
        .form(&grant)
        .send()
        .await
        .unwrap();
    assert_eq!(basic.status(), 200);
    assert_eq!(basic.headers()["cache-control"], "no-store");
    let v: Value = basic.json().await.unwrap();
    assert_eq!(
        (v["token_type"].as_str(), v["expires_in"].as_u64()),
        (Some("Bearer"), Some(21600))
    );
    let two_words = srv
        .http
        .post(&url)
        .header("Authorization", format!("Basic {id} {secret}"))
        .form(&grant)
        .send()
        .await
        .unwrap();
    assert_eq!(two_words.status(), 200);
    let form = srv
        .http
        .post(&url)
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", &id),
            ("client_secret", &secret),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), 200);

    let wrong = srv
        .http
        .post(&url)
        .basic_auth(&id, Some("wrong"))
        .form(&grant)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    assert!(wrong.headers().contains_key("www-authenticate"));
    assert_eq!(
        wrong.json::<Value>().await.unwrap()["error"],
        "invalid_client"
    );
    let nobody = srv.http.post(&url).form(&grant).send().await.unwrap();
    assert_eq!(
        nobody.json::<Value>().await.unwrap()["error"],
        "invalid_client"
    );
    let password = srv
        .http
        .post(&url)
        .basic_auth(&id, Some(&secret))
        .form(&[("grant_type", "password")])
        .send()
        .await
        .unwrap();
    assert_eq!(password.status(), 400);
    assert_eq!(
        password.json::<Value>().await.unwrap()["error"],
        "unsupported_grant_type"
    );
    let no_grant = srv
        .http
        .post(&url)
        .basic_auth(&id, Some(&secret))
        .form(&[("scope", "x")])
        .send()
        .await
        .unwrap();
    assert_eq!(
        no_grant.json::<Value>().await.unwrap()["error"],
        "invalid_request"
    );
    let both = srv
        .http
        .post(&url)
        .basic_auth(&id, Some(&secret))
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", &id),
            ("client_secret", &secret),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(
        both.json::<Value>().await.unwrap()["error"],
        "invalid_request"
    );
    // Base64 of something that is not id:secret.
    let garbage = srv
        .http
        .post(&url)
        .header(
            "Authorization",
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode("nocolon")
            ),
        )
        .form(&grant)
        .send()
        .await
        .unwrap();
    assert_eq!(garbage.status(), 401);
}

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
    tokio::time::sleep(Duration::from_millis(100)).await;
    let outbox = srv.outbox().await;
    assert_eq!(outbox.as_array().unwrap().len(), 3, "nothing sent twice");

    // Another client sees none of it.
    let (id2, secret2) = srv.client().await;
    let token2 = srv.token(&id2, &secret2).await;
    let (status, v) = srv
        .get(&token2, &format!("/v2/info/message/search/detail/{uid}"))
        .await;
    assert_eq!(status, 404);
    assert_eq!(v["code"], "404");
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
        (with("title", json!("a title")), "title"),
        (with("client_id", json!("someone-else")), "client_id"),
        (with("content_group_id", json!("g")), "content_group_id"),
        (with("tax_cd1", json!("x".repeat(51))), "tax_cd1"),
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

    // Today by explicit dates finds them; yesterday finds none.
    let today = jiff::Timestamp::now()
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
    ] {
        let (status, v) = srv.post(&token, "/v2/info/message/search", &body).await;
        assert_eq!(
            (status, v["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("410")),
            "{body}"
        );
        assert!(
            v["result"]["detail_message"]
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
    assert_eq!(
        srv.settled(&token, v["uid"].as_str().unwrap()).await["status_code"],
        "API_200"
    );
    let outbox = srv.outbox().await;
    assert_eq!(outbox.as_array().unwrap().len(), 1);
}

fn rcs(cid: &str, phone: &str) -> Value {
    json!({
        "cid": cid, "message_type": "RCSLMS", "phone_number": phone, "template_code": "OO000000", "agency_id": "agency",
        "ad_flag": "N", "sender_no": "0212345678", "fall_back_yn": false,
        "body": [{"title": "제목", "description": "본문", "button": [{"action": "open"}]}]
    })
}

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
    let body_n = |n: usize| {
        json!(
            (0..n)
                .map(|_| json!({"title": "t", "description": "d"}))
                .collect::<Vec<_>>()
        )
    };
    let buttons = |n: usize| {
        json!(
            (0..n)
                .map(|_| json!({"action": "open"}))
                .collect::<Vec<_>>()
        )
    };
    let cases = vec![
        (set(&["cid"], Value::Null), "cid"),
        (set(&["message_type"], Value::Null), "message_type"),
        (set(&["phone_number"], Value::Null), "phone_number"),
        (set(&["phone_number"], json!("01012345678")), "phone_number"),
        (set(&["sender_no"], Value::Null), "sender_no"),
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
        (set(&["body"], body_n(2)), "body"),
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
        (set(&["message_type"], json!("RCSTMPL")), "tmpl_decription"),
    ];
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
    tmpl["tmpl_variable"] = json!({"name": "가".repeat(45)});
    ok.push(tmpl.clone());
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
        let detail = loop {
            let (_, d) = srv
                .get(&token, &format!("/v2/info/rcs/search/detail/{uid}"))
                .await;
            if d["result"]["status"] != "API_100" {
                break d["result"].clone();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
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

    // Not completed within its lease: the results come back in a new group.
    tokio::time::sleep(Duration::from_millis(1100)).await;
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
    let res = put(group_id.to_owned()).await.unwrap();
    assert_eq!(
        (
            res.status(),
            res.json::<Value>().await.unwrap()["code"]
                .as_str()
                .map(str::to_owned)
        ),
        (StatusCode::BAD_REQUEST, Some("410".into()))
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

fn jpeg(len: usize) -> Vec<u8> {
    let mut b = vec![0xFF, 0xD8, 0xFF, 0xE0];
    b.resize(len, 0x11);
    b
}

fn png(len: usize) -> Vec<u8> {
    let mut b = b"\x89PNG\r\n\x1a\n".to_vec();
    b.resize(len, 0x22);
    b
}

impl Server {
    async fn upload(
        &self,
        auth: &str,
        path: &str,
        form: reqwest::multipart::Form,
    ) -> (StatusCode, Value) {
        let res = self
            .http
            .post(format!("{}{path}", self.url))
            .header("Authorization", auth)
            .multipart(form)
            .send()
            .await
            .unwrap();
        (res.status(), res.json().await.unwrap_or(Value::Null))
    }
}

fn part(bytes: Vec<u8>, name: &str) -> reqwest::multipart::Part {
    reqwest::multipart::Part::bytes(bytes).file_name(name.to_owned())
}

#[tokio::test]
async fn uploads_are_checked_by_their_bytes_and_used_by_sends() {
    use reqwest::multipart::Form;
    let srv = spawn_with(|s| s.upload_ttl_s = 2).await;
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    let bearer = format!("Bearer {token}");
    let rcs_form = |bytes: Vec<u8>, name: &str| {
        Form::new()
            .part("image", part(bytes, name))
            .text("description", "logo")
    };

    // RCS: JPEG or PNG by the bytes, at most 1 MB.
    let (status, v) = srv
        .upload(&bearer, "/v2/upload/rcs", rcs_form(png(2000), "logo.png"))
        .await;
    assert_eq!((status, v["code"].as_str()), (StatusCode::OK, Some("200")));
    let file_id = v["file_id"].as_str().unwrap().to_owned();
    assert_eq!(v["url"], format!("maapfile://{file_id}"));
    assert_eq!(v["expiry_date"].as_str().unwrap().len(), 19);
    let (status, _) = srv
        .upload(
            &bearer,
            "/v2/upload/rcs",
            rcs_form(jpeg(1024 * 1024), "big.jpg"),
        )
        .await;
    assert_eq!(status, 200, "exactly 1 MB");
    let (status, v) = srv
        .upload(
            &bearer,
            "/v2/upload/rcs",
            rcs_form(jpeg(1024 * 1024 + 1), "big.jpg"),
        )
        .await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("420"))
    );
    let (status, v) = srv
        .upload(
            &bearer,
            "/v2/upload/rcs",
            rcs_form(b"just text".to_vec(), "fake.png"),
        )
        .await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("420")),
        "a text file named .png"
    );
    let (status, v) = srv
        .upload(
            &bearer,
            "/v2/upload/rcs",
            Form::new().text("description", "x"),
        )
        .await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("420"))
    );
    let res = srv
        .http
        .post(format!("{}/v2/upload/rcs", srv.url))
        .bearer_auth(&token)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    assert_eq!(
        res.json::<Value>().await.unwrap()["code"],
        "420",
        "not multipart"
    );

    // MMS: up to 3 JPEGs, 200 KB together; `files` or `images`; a bare token.
    let mms = |parts: Vec<(&'static str, Vec<u8>)>| {
        parts.into_iter().fold(Form::new(), |f, (name, bytes)| {
            f.part(name, part(bytes, "p.jpg"))
        })
    };
    let (status, v) = srv
        .upload(
            &token,
            "/v2/upload/message/mms/files",
            mms(vec![
                ("files", jpeg(100 * 1024)),
                ("images", jpeg(50 * 1024)),
                ("files", jpeg(50 * 1024)),
            ]),
        )
        .await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::OK, Some("200")),
        "exactly 200 KB in 3 files: {v}"
    );
    let group = v["content_group_id"].as_str().unwrap().to_owned();
    let (status, v) = srv
        .upload(
            &bearer,
            "/v2/upload/message/mms/files",
            mms(vec![("files", jpeg(1000)); 4]),
        )
        .await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("420")),
        "4 files"
    );
    let (status, v) = srv
        .upload(
            &bearer,
            "/v2/upload/message/mms/files",
            mms(vec![
                ("files", jpeg(100 * 1024)),
                ("files", jpeg(100 * 1024 + 1)),
            ]),
        )
        .await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("420")),
        "201 KB"
    );
    let (status, v) = srv
        .upload(
            &bearer,
            "/v2/upload/message/mms/files",
            mms(vec![("files", png(1000))]),
        )
        .await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("420")),
        "a PNG named .jpg"
    );
    let (status, _) = srv
        .upload(
            "Bearer forged",
            "/v2/upload/message/mms/files",
            mms(vec![("files", jpeg(10))]),
        )
        .await;
    assert_eq!(status, 401);

    // Sends refer to them; unknown ones are a file error.
    let mut mm = sms("mm-1", "821012345678");
    mm["message_type"] = json!("MM");
    mm["content_group_id"] = json!(group);
    let (status, _) = srv.post(&token, "/v2/send/xms", &mm).await;
    assert_eq!(status, 200);
    mm["cid"] = json!("mm-2");
    mm["content_group_id"] = json!("nope");
    let (status, v) = srv.post(&token, "/v2/send/xms", &mm).await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("420"))
    );
    let mut card = rcs("card-1", "821012345678");
    card["message_type"] = json!("RCSMMS");
    card["body"][0]["media"] = json!(format!("maapfile://{file_id}"));
    let (status, _) = srv.post(&token, "/v2/send/rcs", &card).await;
    assert_eq!(status, 200);

    // Expired uploads are refused at send time.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    card["cid"] = json!("card-2");
    let (status, v) = srv.post(&token, "/v2/send/rcs", &card).await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("420"))
    );
    mm["cid"] = json!("mm-3");
    mm["content_group_id"] = json!(group);
    let (status, _) = srv.post(&token, "/v2/send/xms", &mm).await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn a_new_secret_ends_the_old_tokens() {
    let srv = spawn().await;
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    let (status, _) = srv
        .post(&token, "/v2/info/message/search", &json!({}))
        .await;
    assert_eq!(status, 200);
    let res = srv
        .http
        .post(format!(
            "{}/admin/v1/messaging/clients/{id}/secret",
            srv.admin
        ))
        .bearer_auth(OPERATOR_TOKEN)
        .send()
        .await
        .unwrap();
    let new_secret = res.json::<Value>().await.unwrap()["client_secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, _) = srv
        .post(&token, "/v2/info/message/search", &json!({}))
        .await;
    assert_eq!(status, 401, "the old token stopped working");
    let token = srv.token(&id, &new_secret).await;
    let (status, _) = srv
        .post(&token, "/v2/info/message/search", &json!({}))
        .await;
    assert_eq!(status, 200);
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

// ---- Limits ----

/// A call with `token` (any string) to `path`: (status, `Retry-After`, body).
async fn limited_get(srv: &Server, token: &str, path: &str) -> (StatusCode, Option<u64>, Value) {
    let res = srv
        .http
        .get(format!("{}{path}", srv.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let retry_after = res
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    (res.status(), retry_after, res.json().await.unwrap())
}

/// A 429 in the message API's shape: code `429`, `result.detail_code` `API_429`, and
/// `Retry-After`.
fn assert_limited((status, retry_after, body): &(StatusCode, Option<u64>, Value)) {
    assert_eq!(*status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["code"], "429", "{body}");
    assert_eq!(body["result"]["detail_code"], "API_429", "{body}");
    assert!(body["result"]["detail_message"].is_string(), "{body}");
    assert!(retry_after.is_some_and(|s| s >= 1), "{retry_after:?}");
}

const RESULTS: &str = "/v2/info/rcs/results";

#[tokio::test]
async fn message_calls_are_limited_per_client_and_a_wrong_token_spends_only_its_peers_budget() {
    // A burst of 3, then one call an hour: nothing refills while the test runs.
    let srv = spawn_with(|s| {
        s.limits.rate_limit_per_s = 1.0 / 3600.0;
        s.limits.rate_limit_burst = 3;
    })
    .await;
    let (a_id, a_secret) = srv.client().await;
    let (b_id, b_secret) = srv.client().await;
    // The token calls count against the clients their credentials name: one of 3 each.
    let a = srv.token(&a_id, &a_secret).await;
    let b = srv.token(&b_id, &b_secret).await;
    // A wrong token counts against the caller's address: 3 refusals, then 429.
    for _ in 0..3 {
        let (status, _, _) = limited_get(&srv, "not-a-token", RESULTS).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    assert_limited(&limited_get(&srv, "not-a-token", RESULTS).await);
    // The token endpoint answers a wrong secret from that address in its own shape.
    let res = srv
        .http
        .post(format!("{}/v2/oauth/token", srv.url))
        .basic_auth(&a_id, Some("wrong"))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(res.headers().contains_key("retry-after"));
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"], "temporarily_unavailable", "{body}");

    // Client a's budget is whole: with its token call, 3 calls pass; the fourth is refused.
    for _ in 0..2 {
        let (status, _, body) = limited_get(&srv, &a, RESULTS).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    assert_limited(&limited_get(&srv, &a, RESULTS).await);
    // The RCS detail refuses in its own HTTP-style shape.
    let (status, retry_after, body) =
        limited_get(&srv, &a, "/v2/info/rcs/search/detail/00000000000000000000").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["code"], "429", "{body}");
    assert_eq!(body["code_detail"]["detail_code"], "API_429", "{body}");
    assert!(retry_after.is_some());
    // So does the token endpoint, for a client over its budget.
    let res = srv
        .http
        .post(format!("{}/v2/oauth/token", srv.url))
        .basic_auth(&a_id, Some(&a_secret))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    // Client b is untouched.
    let (status, _, body) = limited_get(&srv, &b, RESULTS).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// A send whose body has not finished arriving, so it stays in flight until released.
fn held_send(srv: &Server, token: &str) -> kep_client::Held {
    let mut head = sms("held", "821012345678").to_string().into_bytes();
    let rest = head.split_off(head.len() / 2);
    let send = srv
        .http
        .post(format!("{}/v2/send/xms", srv.url))
        .bearer_auth(token)
        .header("content-type", "application/json");
    kep_client::held(send, head, rest)
}

#[tokio::test]
async fn a_client_may_have_only_so_many_calls_in_flight() {
    let srv = spawn_with(|s| s.limits.concurrency_limit = 1).await;
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    let (mut held, mut release) = held_send(&srv, &token);
    // Once the server has the held send, another call of the client is refused.
    let mut refused = None;
    for _ in 0..600 {
        // A call that came first took the one slot, and the send was refused: hold another.
        if held.is_finished() {
            (held, release) = held_send(&srv, &token);
        }
        let answer = limited_get(&srv, &token, RESULTS).await;
        if answer.0 == StatusCode::TOO_MANY_REQUESTS {
            refused = Some(answer);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let refused = refused.expect("a second call in flight is refused");
    assert_limited(&refused);
    assert!(
        refused.2["result"]["detail_message"]
            .as_str()
            .unwrap()
            .contains("in flight")
    );
    release.send(()).unwrap();
    let sent = held.await.unwrap().unwrap();
    assert_eq!(sent.status(), StatusCode::OK);
    assert_eq!(limited_get(&srv, &token, RESULTS).await.0, StatusCode::OK);
}

#[tokio::test]
async fn a_clients_spent_rate_refills() {
    let srv = spawn_with(|s| {
        s.limits.rate_limit_per_s = 1.0;
        s.limits.rate_limit_burst = 2;
    })
    .await;
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    let mut spent = false;
    for _ in 0..20 {
        let answer = limited_get(&srv, &token, RESULTS).await;
        if answer.0 == StatusCode::TOO_MANY_REQUESTS {
            assert_limited(&answer);
            spent = true;
            break;
        }
    }
    assert!(spent, "20 calls at once spend a burst of 2");
    let mut refilled = false;
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if limited_get(&srv, &token, RESULTS).await.0 == StatusCode::OK {
            refilled = true;
            break;
        }
    }
    assert!(refilled, "the bucket refills");
}
