//! The operator's view of the messaging service: every client's messages, filtered and
//! paged, each message's timeline, and the RCS result groups.

use std::time::Duration;

use kep_api::messaging::{MessageQuery, MessageSummary, MessageTimeline, TimelineEvent};
use kep_client::{AdminClient, ClientError};
use serde_json::{Value, json};

use crate::common::*;

fn admin(srv: &Server) -> AdminClient {
    AdminClient::new(&srv.admin, OPERATOR_TOKEN)
}

/// Sends as a fresh client; the client's id and the messages' uids, in order.
async fn send_as_new_client(srv: &Server, sends: &[(&str, Value)]) -> (String, Vec<String>) {
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    let mut uids = Vec::new();
    for (path, body) in sends {
        let (status, v) = srv.post(&token, path, body).await;
        assert_eq!(status, 200, "{v}");
        uids.push(v["uid"].as_str().unwrap().to_owned());
    }
    (id, uids)
}

/// The timeline once the message is final.
async fn finished(admin: &AdminClient, uid: &str) -> MessageTimeline {
    eventually(
        Duration::from_secs(30),
        "the message finishes",
        async || {
            let t = admin.message(uid).await.unwrap();
            match t.timeline.last().map(|e| e.event) {
                Some(TimelineEvent::Finished) => Ok(t),
                _ => Err(format!("{t:?}")),
            }
        },
    )
    .await
}

/// An object's field names, sorted: the wire names a console reads.
fn keys(object: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = object
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    keys
}

fn uids(list: &[MessageSummary]) -> Vec<&str> {
    list.iter().map(|m| m.uid.as_str()).collect()
}

/// The field a refusal names, if the call was a 400 in the operator shape.
fn refused_field(e: ClientError) -> String {
    let ClientError::Api { status: 400, body } = e else {
        panic!("not a 400: {e}");
    };
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], "invalid_field", "{v}");
    v["error"]["field"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn the_message_list_shows_every_clients_messages_newest_first_and_each_filter_narrows_it() {
    let srv = spawn().await;
    let admin = admin(&srv);
    let (a, a_uids) = send_as_new_client(
        &srv,
        &[
            ("/v2/send/xms", sms("a-1", "821012345678")),
            ("/v2/send/rcs", rcs("a-2", "821011112222")),
        ],
    )
    .await;
    // 0000: the simulator fails it (510).
    let (b, b_uids) =
        send_as_new_client(&srv, &[("/v2/send/xms", sms("b-1", "821012340000"))]).await;
    let (a1, a2, b1) = (a_uids[0].as_str(), a_uids[1].as_str(), b_uids[0].as_str());
    for uid in [a1, a2, b1] {
        finished(&admin, uid).await;
    }

    let list = |q: MessageQuery| {
        let admin = admin.clone();
        async move { admin.messages(&q).await.unwrap().messages }
    };
    let all = list(MessageQuery::default()).await;
    assert_eq!(uids(&all), [b1, a2, a1], "both clients', newest first");
    assert_eq!(
        (all[0].client_id.as_str(), all[1].client_id.as_str()),
        (b.as_str(), a.as_str())
    );
    let m = &all[1];
    assert_eq!(
        (
            m.cid.as_str(),
            m.channel.as_str(),
            m.message_type.as_str(),
            m.phone_number.as_str(),
            m.status.as_str(),
            m.attempts
        ),
        ("a-2", "RCS", "RCSLMS", "821011112222", "200", 1)
    );
    assert_eq!(m.reg_date.len(), 19, "yyyy-mm-dd HH:MM:SS");
    assert_eq!(m.res_date.as_deref().map(str::len), Some(19));

    // The wire names, as a console reads them.
    let raw = srv
        .operator_get("/admin/v1/messaging/messages?limit=1")
        .await;
    let names = keys(&raw["messages"][0]);
    assert_eq!(
        names,
        [
            "attempts",
            "channel",
            "cid",
            "client_id",
            "message_type",
            "phone_number",
            "reg_date",
            "res_date",
            "status",
            "uid"
        ]
    );

    let q = MessageQuery::default;
    let some = |s: &str| Some(s.to_owned());
    for (query, expected) in [
        (
            MessageQuery {
                client_id: some(&a),
                ..q()
            },
            vec![a2, a1],
        ),
        (
            MessageQuery {
                client_id: some(&b),
                ..q()
            },
            vec![b1],
        ),
        (
            MessageQuery {
                client_id: some("nobody"),
                ..q()
            },
            vec![],
        ),
        (
            MessageQuery {
                phone_number: some("821012340000"),
                ..q()
            },
            vec![b1],
        ),
        (
            MessageQuery {
                phone_number: some("8210123400"),
                ..q()
            },
            vec![],
        ),
        (
            MessageQuery {
                status: some("510"),
                ..q()
            },
            vec![b1],
        ),
        (
            MessageQuery {
                status: some("200"),
                ..q()
            },
            vec![a2, a1],
        ),
        (
            MessageQuery {
                status: some("100"),
                ..q()
            },
            vec![],
        ),
        (
            MessageQuery {
                channel: some("RCS"),
                ..q()
            },
            vec![a2],
        ),
        (
            MessageQuery {
                channel: some("XMS"),
                ..q()
            },
            vec![b1, a1],
        ),
        (
            MessageQuery {
                client_id: some(&a),
                channel: some("XMS"),
                ..q()
            },
            vec![a1],
        ),
        (
            MessageQuery {
                client_id: some(&a),
                status: some("510"),
                ..q()
            },
            vec![],
        ),
    ] {
        let got = list(query.clone()).await;
        assert_eq!(uids(&got), expected, "{query:?}");
    }

    // A page at a time: `before` is the last uid of the page before.
    let mut pages = Vec::new();
    let mut before = None;
    loop {
        let page = list(MessageQuery {
            before: before.clone(),
            limit: Some(1),
            ..q()
        })
        .await;
        let Some(last) = page.last() else { break };
        before = Some(last.uid.clone());
        pages.push(last.uid.clone());
    }
    assert_eq!(pages, [b1, a2, a1]);
    let older_than_b1 = list(MessageQuery {
        client_id: some(&a),
        before: some(b1),
        limit: Some(1),
        ..q()
    })
    .await;
    assert_eq!(uids(&older_than_b1), [a2], "a cursor and a filter together");

    assert_eq!(
        list(MessageQuery {
            limit: Some(500),
            ..q()
        })
        .await
        .len(),
        3
    );
    for (query, field) in [
        (
            MessageQuery {
                limit: Some(0),
                ..q()
            },
            "limit",
        ),
        (
            MessageQuery {
                limit: Some(501),
                ..q()
            },
            "limit",
        ),
        (
            MessageQuery {
                status: some("300"),
                ..q()
            },
            "status",
        ),
        (
            MessageQuery {
                status: some("API_200"),
                ..q()
            },
            "status",
        ),
        (
            MessageQuery {
                channel: some("SMS"),
                ..q()
            },
            "channel",
        ),
        (
            MessageQuery {
                channel: some("rcs"),
                ..q()
            },
            "channel",
        ),
        (
            MessageQuery {
                before: some("123"),
                ..q()
            },
            "before",
        ),
    ] {
        let e = admin.messages(&query).await.unwrap_err();
        assert_eq!(refused_field(e), field, "{query:?}");
    }
}

#[tokio::test]
async fn a_messages_timeline_goes_from_accepted_through_each_hand_over_to_its_final_status() {
    let srv = spawn().await;
    let admin = admin(&srv);
    let mut fallback = rcs("fb", "821012340002");
    fallback["fall_back_yn"] = true.into();
    fallback["fall_back_message_type"] = "SM".into();
    fallback["fall_back_message"] = "m".into();
    let (_, sent) = send_as_new_client(
        &srv,
        &[
            ("/v2/send/xms", sms("ok", "821012345678")),
            // The simulator: 0000 fails, 0001 fails but may be resent, 0002 has no RCS.
            ("/v2/send/xms", sms("fails", "821012340000")),
            ("/v2/send/xms", sms("resend", "821012340001")),
            ("/v2/send/rcs", fallback.clone()),
        ],
    )
    .await;

    // (status, hand-overs as route and outcome) of each.
    let expected = [
        ("200", vec![("XMS", "API_200")]),
        ("510", vec![("XMS", "API_510")]),
        ("520", vec![("XMS", "API_520")]),
        ("200", vec![("RCS", "API_510"), ("FALLBACK_SM", "API_200")]),
    ];
    for (uid, (status, handovers)) in sent.iter().zip(expected) {
        let t = finished(&admin, uid).await;
        assert_eq!(
            (t.message.uid.as_str(), t.message.status.as_str()),
            (uid.as_str(), status)
        );
        assert_eq!(
            t.message.attempts, 1,
            "taken up once, whatever it was handed as"
        );
        let events: Vec<_> = t.timeline.iter().map(|e| e.event).collect();
        let mut want = vec![TimelineEvent::Accepted];
        want.extend(handovers.iter().map(|_| TimelineEvent::HandedOver));
        want.push(TimelineEvent::Finished);
        assert_eq!(events, want, "{t:?}");
        assert_eq!(t.timeline[0].status.as_deref(), Some("100"));
        assert_eq!(t.timeline[0].at, t.message.reg_date);
        let last = t.timeline.last().unwrap();
        assert_eq!(
            (last.status.as_deref(), Some(&last.at)),
            (Some(status), t.message.res_date.as_ref())
        );
        let got: Vec<_> = t.timeline[1..t.timeline.len() - 1]
            .iter()
            .map(|e| {
                assert_eq!(e.carrier.as_deref(), Some("simulator"), "{e:?}");
                assert_eq!(e.status, None);
                (e.route.as_deref().unwrap(), e.outcome.as_deref().unwrap())
            })
            .collect();
        assert_eq!(got, handovers, "{t:?}");
        assert_eq!(t.report_group_id, None);
    }

    let ok = admin.message(&sent[0]).await.unwrap();
    assert_eq!(ok.request, sms("ok", "821012345678"), "the accepted body");
    assert_eq!(
        (ok.sms_status_code.as_deref(), ok.error_message.as_deref()),
        (Some("API_200"), None)
    );
    let failed = admin.message(&sent[1]).await.unwrap();
    assert_eq!(
        (
            failed.sms_status_code.as_deref(),
            failed.error_message.as_deref()
        ),
        (Some("API_510"), Some("failed to send"))
    );
    let fell_back = admin.message(&sent[3]).await.unwrap();
    assert_eq!(fell_back.request, fallback);
    assert_eq!(
        (
            fell_back.rcs_status.as_deref(),
            fell_back.fallback_status.as_deref(),
            fell_back.sms_status_code.as_deref()
        ),
        (Some("fail"), Some("success"), Some("API_200"))
    );

    // The wire names.
    let raw = srv
        .operator_get(&format!("/admin/v1/messaging/messages/{}", sent[3]))
        .await;
    assert_eq!(
        raw["message"]["uid"],
        sent[3].as_str(),
        "nested, not flattened"
    );
    assert_eq!(
        (
            &raw["rcs_status"],
            &raw["fallback_status"],
            &raw["sms_status_code"]
        ),
        (&json!("fail"), &json!("success"), &json!("API_200"))
    );
    let handed = &raw["timeline"][1];
    assert_eq!(
        (
            &handed["event"],
            &handed["route"],
            &handed["outcome"],
            &handed["carrier"]
        ),
        (
            &json!("handed_over"),
            &json!("RCS"),
            &json!("API_510"),
            &json!("simulator")
        )
    );
    assert!(handed.get("status").is_none(), "{handed}");

    let e = admin.message("00000000000000000000").await.unwrap_err();
    let ClientError::Api { status: 404, body } = e else {
        panic!("not a 404: {e}");
    };
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], "not_found");
}

#[tokio::test]
async fn report_groups_appear_once_a_client_fetches_its_rcs_results() {
    let srv = spawn().await;
    let admin = admin(&srv);
    let new_client = async || {
        let (id, secret) = srv.client().await;
        let token = srv.token(&id, &secret).await;
        (id, token)
    };
    let (a, a_token) = new_client().await;
    let (b, b_token) = new_client().await;
    let mut sent = Vec::new();
    for (token, cid) in [(&a_token, "a-1"), (&a_token, "a-2"), (&b_token, "b-1")] {
        let (_, v) = srv
            .post(token, "/v2/send/rcs", &rcs(cid, "821012345678"))
            .await;
        let uid = v["uid"].as_str().unwrap().to_owned();
        srv.rcs_settled(token, &uid).await;
        sent.push(uid);
    }
    let groups = admin.report_groups(None, None).await.unwrap().report_groups;
    assert!(
        groups.is_empty(),
        "none until a client fetches its results: {groups:?}"
    );

    let (_, got) = srv.get(&a_token, "/v2/info/rcs/results").await;
    let group_a = got["report_group_id"].as_str().unwrap().to_owned();
    let (_, got) = srv.get(&b_token, "/v2/info/rcs/results").await;
    let group_b = got["report_group_id"].as_str().unwrap().to_owned();

    let groups = admin.report_groups(None, None).await.unwrap().report_groups;
    let seen: Vec<_> = groups
        .iter()
        .map(|g| (g.report_group_id.as_str(), g.client_id.as_str(), g.results))
        .collect();
    assert_eq!(
        seen,
        [
            (group_b.as_str(), b.as_str(), 1),
            (group_a.as_str(), a.as_str(), 2)
        ],
        "newest first"
    );
    let g = &groups[1];
    assert_eq!((g.created_at.len(), g.completed_at.as_deref()), (19, None));
    assert!(g.lease_until > g.created_at, "{g:?}");

    let only_a = admin
        .report_groups(Some(&a), None)
        .await
        .unwrap()
        .report_groups;
    assert_eq!(only_a.len(), 1);
    assert_eq!(only_a[0].report_group_id, group_a);
    let newest = admin
        .report_groups(None, Some(1))
        .await
        .unwrap()
        .report_groups;
    assert_eq!(newest[0].report_group_id, group_b);
    assert_eq!(newest.len(), 1);
    assert_eq!(
        admin
            .report_groups(None, Some(500))
            .await
            .unwrap()
            .report_groups
            .len(),
        2
    );
    for limit in [0, 501] {
        let e = admin.report_groups(None, Some(limit)).await.unwrap_err();
        assert_eq!(refused_field(e), "limit");
    }

    // A message names its group; completing the group shows when.
    assert_eq!(
        admin
            .message(&sent[0])
            .await
            .unwrap()
            .report_group_id
            .as_deref(),
        Some(group_a.as_str())
    );
    let res = srv
        .http
        .put(format!(
            "{}/v2/info/rcs/results/complete/{group_a}",
            srv.url
        ))
        .bearer_auth(&a_token)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let only_a = admin
        .report_groups(Some(&a), None)
        .await
        .unwrap()
        .report_groups;
    assert_eq!(only_a[0].completed_at.as_deref().map(str::len), Some(19));
    assert_eq!(only_a[0].results, 2, "a completed group keeps its results");

    let raw = srv
        .operator_get(&format!("/admin/v1/messaging/report-groups?client_id={a}"))
        .await;
    let names = keys(&raw["report_groups"][0]);
    assert_eq!(
        names,
        [
            "client_id",
            "completed_at",
            "created_at",
            "lease_until",
            "report_group_id",
            "results"
        ]
    );
}

/// A client made with the id and secret the operator gives (a CI's fixed ones) takes
/// tokens with them; the id is 1 to 64 letters and digits and taken once, the secret 8 to
/// 256 printable characters, each checked at, below and above, and a refusal makes nothing.
#[tokio::test]
async fn a_client_takes_the_id_and_secret_it_is_given() {
    let srv = spawn().await;
    let admin = admin(&srv);
    let client = |id: &str, secret: &str| kep_api::messaging::CreateClient {
        client_id: Some(id.into()),
        client_secret: Some(secret.into()),
        ..Default::default()
    };
    for (id, secret, field) in [
        ("ci-client", "ci secret", "client_id"),
        ("", "ci secret", "client_id"),
        (&*"c".repeat(65), "ci secret", "client_id"),
        ("ci", "7 chars", "client_secret"),
        ("ci", &*"s".repeat(257), "client_secret"),
        ("ci", "비밀번호비밀번호", "client_secret"),
    ] {
        let e = admin
            .create_messaging_client(&client(id, secret))
            .await
            .unwrap_err();
        assert_eq!(refused_field(e), field, "{id:?} {secret:?}");
    }
    assert_eq!(
        srv.operator_get("/admin/v1/messaging/clients").await,
        json!([])
    );

    let made = admin
        .create_messaging_client(&client("ci", "8 chars!"))
        .await
        .unwrap();
    assert_eq!(
        (made.client_id.as_str(), made.client_secret.as_str()),
        ("ci", "8 chars!")
    );
    let token = srv.token("ci", "8 chars!").await;
    assert!(!token.is_empty());
    let longest = "s".repeat(256);
    admin
        .create_messaging_client(&client(&"c".repeat(64), &longest))
        .await
        .unwrap();
    srv.token(&"c".repeat(64), &longest).await;

    let taken = admin
        .create_messaging_client(&client("ci", "another secret"))
        .await
        .unwrap_err();
    assert!(
        matches!(taken, ClientError::Api { status: 409, .. }),
        "{taken}"
    );
    // The first secret still holds.
    srv.token("ci", "8 chars!").await;
}
