//! The operator API of the adapter, and what its bodies and paths accept.

use std::time::Duration;

use kep_api::adapter::{DrmRequest, DrmSessionQuery, FileType};
use kep_client::adapter::AgentClient;
use serde_json::{Value, json};

use crate::common::*;

#[tokio::test]
async fn the_operator_manages_org_login_types() {
    let srv = spawn(|_| {}).await;
    // Field rules of the document's tables, each naming its field.
    let base = serde_json::to_value(oauth2_org("agent:9000")).unwrap();
    let admin_url = srv.admin.base_url().to_owned();
    let post = |body: Value| {
        let url = format!("{admin_url}/admin/v1/adapter/org-login-types");
        async move {
            let res = reqwest::Client::new()
                .post(url)
                .bearer_auth(OPERATOR_TOKEN)
                .json(&body)
                .send()
                .await
                .unwrap();
            (res.status().as_u16(), res.json::<Value>().await.unwrap())
        }
    };
    let mut cases = Vec::new();
    let mut b = base.clone();
    b["method"] = json!("LDAP");
    cases.push((b, "method"));
    let mut b = base.clone();
    b.as_object_mut().unwrap().remove("adapter_agent");
    cases.push((b, "adapter_agent"));
    let mut b = base.clone();
    b["data_model"]["login"]["oauth2"]
        .as_object_mut()
        .unwrap()
        .remove("client_id");
    cases.push((b, "data_model.login.oauth2.client_id"));
    let mut b = base.clone();
    b["data_model"]["login"]["oauth2"]["scopes"] = json!("openid");
    cases.push((b, "data_model.login.oauth2.scopes"));
    for scopes in [json!([]), json!(["openid", " "])] {
        let mut b = base.clone();
        b["data_model"]["login"]["oauth2"]["scopes"] = scopes;
        cases.push((b, "data_model.login.oauth2.scopes"));
    }
    let mut b = base.clone();
    b["data_model"]["login"]["oauth2"]["token_endpoint"] = json!("");
    cases.push((b, "data_model.login.oauth2.token_endpoint"));
    let saml = |fetching: &str| {
        json!({"method": "SAML2", "adapter_agent": "agent", "data_model": {"login": {"saml2": {
            "registration_id": "idp", "entity_id": "kep", "saml_metadata_fetching_type": fetching, "sso_service_binding": "POST"}}}})
    };
    cases.push((
        saml("FROM_NOWHERE"),
        "data_model.login.saml2.saml_metadata_fetching_type",
    ));
    cases.push((
        saml("FROM_METADATA_LOCATION"),
        "data_model.login.saml2.metadata_location",
    ));
    let mut b = saml("FROM_DATABASE");
    b["data_model"]["login"]["saml2"]["want_authn_request_signed"] = json!("yes");
    cases.push((b, "data_model.login.saml2.want_authn_request_signed"));
    let mut b = base.clone();
    b["data_model"]["user"]["synchronization"]["active_options"] = json!(["other"]);
    cases.push((b, "data_model.user.synchronization"));
    for (body, field) in cases {
        let (status, answer) = post(body.clone()).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(answer["error"]["field"], field, "{body}: {answer}");
    }
    let (status, created) = post(saml("FROM_DATABASE")).await;
    assert_eq!(status, 201);
    let id = created["id"].as_i64().unwrap();

    // Read, update, rotate, delete.
    let org = srv.admin.org(id).await.unwrap();
    assert_eq!(org.method, "SAML2");
    let updated = srv
        .admin
        .update_org(id, &oauth2_org("agent2:9000"))
        .await
        .unwrap();
    assert_eq!(
        (updated.method.as_str(), updated.adapter_agent.as_str()),
        ("OAUTH2", "agent2:9000")
    );
    let old_key = created["secret_key"].as_str().unwrap();
    let new = srv.admin.rotate_org_key(id).await.unwrap();
    let e = AgentClient::new(&srv.adapter_url, id, "Secret", old_key)
        .get_org_login_type()
        .await
        .unwrap_err();
    assert_eq!(api_status(&e).0, 401, "the old key stops working");
    AgentClient::new(&srv.adapter_url, id, "Secret", &new.secret_key)
        .get_org_login_type()
        .await
        .unwrap();
    srv.admin.delete_org(id).await.unwrap();
    assert_eq!(api_status(&srv.admin.org(id).await.unwrap_err()).0, 404);
    assert_eq!(
        api_status(&srv.admin.delete_org(id).await.unwrap_err()).0,
        404
    );

    // A DRM request for an unknown org, or with a bad file type.
    let e = srv
        .admin
        .drm_request(&DrmRequest {
            org_login_type_id: id,
            file_id: "f".into(),
            file_type: FileType::Drm,
            user: None,
        })
        .await
        .unwrap_err();
    assert_eq!(api_status(&e).0, 404);
    let res = reqwest::Client::new()
        .post(format!("{admin_url}/admin/v1/adapter/drm-requests"))
        .bearer_auth(OPERATOR_TOKEN)
        .json(&json!({"org_login_type_id": 1, "file_id": "f", "file_type": "ZIP"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    assert_eq!(
        res.json::<Value>().await.unwrap()["error"]["field"],
        "file_type"
    );
}

/// An operator call: its status and JSON answer.
async fn operator_call(
    srv: &Server,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .request(method, format!("{}{path}", srv.admin.base_url()))
        .bearer_auth(OPERATOR_TOKEN);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json::<Value>().await.unwrap())
}

/// Found by schema fuzzing (fuzz/schema.sh): a nested object sent as an array
/// (`"synchronization": [null, null]`) was read field by field and saved, and an integer sent
/// as `1.0` was refused although its schema (JSON Schema) counts it an integer.
#[tokio::test]
async fn operator_bodies_are_read_as_their_schema_reads_them() {
    let srv = spawn(|_| {}).await;
    let org = srv
        .admin
        .create_org(&oauth2_org("127.0.0.1:9"))
        .await
        .unwrap();
    let path = format!("/admin/v1/adapter/org-login-types/{}", org.id);
    let mut body = serde_json::to_value(oauth2_org("127.0.0.1:9")).unwrap();
    body["data_model"]["user"]["synchronization"] = json!([null, null]);
    let (status, answer) = operator_call(&srv, reqwest::Method::PUT, &path, Some(body)).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["field"], "data_model.user.synchronization");
    let kept = srv.admin.org(org.id).await.unwrap();
    assert_eq!(
        serde_json::to_value(kept.data_model).unwrap()["user"]["synchronization"]["options"],
        json!(["name", "email"]),
        "nothing was saved"
    );

    let drm = json!({"org_login_type_id": org.id as f64, "file_id": "f", "file_type": "DRM"});
    let (status, answer) = operator_call(
        &srv,
        reqwest::Method::POST,
        "/admin/v1/adapter/drm-requests",
        Some(drm),
    )
    .await;
    assert_eq!(status, 201, "{answer}");
}

/// Found by schema fuzzing (fuzz/schema.sh): an org id out of the integers' range was
/// answered as plain text, not in the operator API's error shape.
#[tokio::test]
async fn an_org_id_that_does_not_parse_is_a_400_in_the_operator_shape() {
    let srv = spawn(|_| {}).await;
    for path in [
        "/admin/v1/adapter/org-login-types/9223372036854775808",
        "/admin/v1/adapter/org-login-types/x",
    ] {
        let (status, answer) = operator_call(&srv, reqwest::Method::GET, path, None).await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (400, Some("invalid_path")),
            "{path}: {answer}"
        );
    }
}

/// Found while describing the rule for schema fuzzing: a DRM request took a file id its agent
/// could never name back in `Kep-File-Id` (read as visible ASCII, and trimmed): with `é.pdf`
/// or ` f` every uploadResult of the session was a 400 or a 404.
#[tokio::test]
async fn a_file_id_is_one_a_header_can_carry() {
    let srv = spawn(|_| {}).await;
    let mut agent = agent(0).await;
    let org = srv
        .admin
        .create_org(&oauth2_org(&agent.host))
        .await
        .unwrap();
    let drm = |file_id: &str| {
        Some(json!({"org_login_type_id": org.id, "file_id": file_id, "file_type": "DRM"}))
    };
    let url = "/admin/v1/adapter/drm-requests";
    for bad in ["é.pdf", " f", "f ", "f\tg", "", &"f".repeat(1025)] {
        let (status, answer) = operator_call(&srv, reqwest::Method::POST, url, drm(bad)).await;
        assert_eq!(
            (status, answer["error"]["field"].as_str()),
            (400, Some("file_id")),
            "{bad:?}"
        );
    }
    let good = format!("a b~{}", "f".repeat(1020));
    let (status, answer) = operator_call(&srv, reqwest::Method::POST, url, drm(&good)).await;
    assert_eq!(status, 201, "{answer}");
    let (headers, notice) = next_notice(&mut agent).await;
    assert_eq!(notice.file_id, good);
    assert_eq!(headers["kep-file-id"], good.as_str());
}

/// The session ids a listing gives, in its order.
async fn listed(srv: &Server, query: DrmSessionQuery) -> Vec<String> {
    let list = srv.admin.drm_sessions(&query).await.unwrap();
    list.sessions.into_iter().map(|s| s.session_id).collect()
}

#[tokio::test]
async fn the_operator_lists_drm_sessions_newest_first() {
    let srv = spawn(|s| s.session_ttl_s = 10).await;
    let mut agent_srv = agent(0).await;
    let org1 = srv
        .admin
        .create_org(&oauth2_org(&agent_srv.host))
        .await
        .unwrap();
    let org2 = srv
        .admin
        .create_org(&oauth2_org(&agent_srv.host))
        .await
        .unwrap();
    let ask = |org: i64| DrmRequest {
        org_login_type_id: org,
        file_id: "f".into(),
        file_type: FileType::Drm,
        user: None,
    };
    let mut ids = Vec::new();
    for org in [org1.id, org2.id, org1.id] {
        ids.push(srv.admin.drm_request(&ask(org)).await.unwrap().session_id);
        next_notice(&mut agent_srv).await;
        srv.clock.advance(Duration::from_secs(1));
    }
    let [s1, s2, s3] = [0, 1, 2].map(|i| ids[i].as_str());
    for id in &ids {
        srv.attempts(id, 1).await;
    }
    let agent1 = AgentClient::new(&srv.adapter_url, org1.id, "Secret", &org1.secret_key);
    let agent2 = AgentClient::new(&srv.adapter_url, org2.id, "Secret", &org2.secret_key);
    agent1
        .upload_result(s1, "f", FileType::Drm, &result("SUCCESS"))
        .await
        .unwrap();
    agent2
        .upload_result(s2, "f", FileType::Drm, &result("FAILURE"))
        .await
        .unwrap();

    // Each session as the single-session route shows it, notifications included.
    let all = srv
        .admin
        .drm_sessions(&DrmSessionQuery::default())
        .await
        .unwrap();
    let mut shown = Vec::new();
    for id in [s3, s2, s1] {
        shown.push(serde_json::to_value(srv.admin.drm_session(id).await.unwrap()).unwrap());
    }
    assert_eq!(serde_json::to_value(&all.sessions).unwrap(), json!(shown));
    assert!(all.sessions.iter().all(|s| s.notifications.len() == 1));

    let q = |org: Option<i64>, status: Option<&str>| DrmSessionQuery {
        org_login_type_id: org,
        status: status.map(str::to_owned),
        ..DrmSessionQuery::default()
    };
    assert_eq!(listed(&srv, q(Some(org1.id), None)).await, [s3, s1]);
    assert_eq!(listed(&srv, q(Some(org2.id), None)).await, [s2]);
    assert!(listed(&srv, q(Some(999), None)).await.is_empty());
    assert_eq!(listed(&srv, q(None, Some("PENDING"))).await, [s3]);
    assert_eq!(listed(&srv, q(None, Some("GRANTED"))).await, [s1]);
    assert!(
        listed(&srv, q(Some(org1.id), Some("DENIED")))
            .await
            .is_empty()
    );
    assert_eq!(listed(&srv, q(Some(org2.id), Some("DENIED"))).await, [s2]);

    // Past s1's expiry (10 s): an open session is listed as it is shown, EXPIRED, before
    // the sweeper marks it.
    srv.clock.advance(Duration::from_secs(7));
    assert_eq!(listed(&srv, q(None, Some("EXPIRED"))).await, [s1]);
    assert!(listed(&srv, q(None, Some("GRANTED"))).await.is_empty());
    assert_eq!(listed(&srv, q(None, Some("PENDING"))).await, [s3]);
}

#[tokio::test]
async fn drm_sessions_page_with_a_cursor() {
    let srv = spawn(|_| {}).await;
    let mut agent_srv = agent(0).await;
    let org = srv
        .admin
        .create_org(&oauth2_org(&agent_srv.host))
        .await
        .unwrap();
    let ask = DrmRequest {
        org_login_type_id: org.id,
        file_id: "f".into(),
        file_type: FileType::Drm,
        user: None,
    };
    // Two in one second, then one a second later: the newest first, then by id.
    let mut same_second = Vec::new();
    for _ in 0..2 {
        same_second.push(srv.admin.drm_request(&ask).await.unwrap().session_id);
        next_notice(&mut agent_srv).await;
    }
    same_second.sort();
    srv.clock.advance(Duration::from_secs(1));
    let newest = srv.admin.drm_request(&ask).await.unwrap().session_id;
    let order = [&newest, &same_second[1], &same_second[0]].map(String::as_str);

    let page = |limit: i64, before: Option<&str>| DrmSessionQuery {
        limit: Some(limit),
        before: before.map(str::to_owned),
        ..DrmSessionQuery::default()
    };
    assert_eq!(listed(&srv, DrmSessionQuery::default()).await, order);
    let mut walked = Vec::new();
    let mut before = None;
    loop {
        let ids = listed(&srv, page(1, before.as_deref())).await;
        let Some(last) = ids.last() else { break };
        assert_eq!(ids.len(), 1);
        before = Some(last.clone());
        walked.extend(ids);
    }
    assert_eq!(walked, order);
    assert_eq!(
        listed(&srv, page(500, Some(&newest))).await,
        order[1..],
        "after the cursor, the same-second ones by id"
    );
    assert!(
        listed(&srv, page(500, Some("no-such-session")))
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn drm_session_listing_parameters_are_checked() {
    let srv = spawn(|_| {}).await;
    let url = "/admin/v1/adapter/drm-requests";
    for (query, code, field) in [
        ("limit=0", "invalid_field", Some("limit")),
        ("limit=501", "invalid_field", Some("limit")),
        ("limit=-1", "invalid_field", Some("limit")),
        ("limit=x", "invalid_query", None),
        ("status=pending", "invalid_field", Some("status")),
        ("status=OPEN", "invalid_field", Some("status")),
        ("org_login_type_id=x", "invalid_query", None),
    ] {
        let path = format!("{url}?{query}");
        let (status, answer) = operator_call(&srv, reqwest::Method::GET, &path, None).await;
        assert_eq!(status, 400, "{query}: {answer}");
        assert_eq!(answer["error"]["code"], code, "{query}: {answer}");
        assert_eq!(
            answer["error"]["field"].as_str(),
            field,
            "{query}: {answer}"
        );
    }
    for query in [
        "limit=1",
        "limit=500",
        "status=RELEASED",
        "before=x&org_login_type_id=1",
    ] {
        let path = format!("{url}?{query}");
        let (status, answer) = operator_call(&srv, reqwest::Method::GET, &path, None).await;
        assert_eq!((status, answer), (200, json!({"sessions": []})), "{query}");
    }
}

/// An org login type made with the id and secret key the operator gives (a CI's fixed
/// ones) answers its agent's calls with them; the next one made without an id comes after
/// it (on PostgreSQL too, whose identity the given id passed). The id is 1 or more and
/// taken once, the key 8 to 256 printable characters, each checked at, below and above,
/// and a refusal makes nothing.
#[tokio::test]
async fn an_org_login_type_takes_the_id_and_secret_key_it_is_given() {
    let srv = spawn(|_| {}).await;
    let org = |id: i64, key: &str| kep_api::adapter::CreateOrgLoginType {
        org: oauth2_org("127.0.0.1:9"),
        id: Some(id),
        secret_key: Some(key.into()),
    };
    for (id, key, field) in [
        (0, "ci secret key", "id"),
        (-1, "ci secret key", "id"),
        (7, "7 chars", "secret_key"),
        (7, &*"k".repeat(257), "secret_key"),
        (7, "key\nwith a newline", "secret_key"),
    ] {
        let e = srv.admin.create_org(org(id, key)).await.unwrap_err();
        let (status, body) = api_status(&e);
        assert_eq!(
            (status, body["error"]["field"].as_str()),
            (400, Some(field)),
            "{body}"
        );
    }
    assert!(srv.admin.orgs().await.unwrap().is_empty());

    let made = srv.admin.create_org(org(50, "8 chars!")).await.unwrap();
    assert_eq!((made.id, made.secret_key.as_str()), (50, "8 chars!"));
    AgentClient::new(&srv.adapter_url, 50, "Secret", "8 chars!")
        .get_org_login_type()
        .await
        .unwrap();
    let next = srv
        .admin
        .create_org(&oauth2_org("127.0.0.1:9"))
        .await
        .unwrap();
    assert_eq!(next.id, 51);
    // An id sent as a whole float (JSON Schema's integer, as a body may give it) names the
    // same org in a path and a query (found by schema fuzzing).
    let base = srv.admin.base_url().to_owned();
    for path in [
        "/admin/v1/adapter/org-login-types/50.0",
        "/admin/v1/adapter/drm-requests?org_login_type_id=50.0",
    ] {
        let res = reqwest::Client::new()
            .get(format!("{base}{path}"))
            .bearer_auth(OPERATOR_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "{path}");
    }
    let longest = "k".repeat(256);
    let made = srv.admin.create_org(org(1, &longest)).await.unwrap();
    assert_eq!(made.id, 1);

    let e = srv
        .admin
        .create_org(org(50, "another key"))
        .await
        .unwrap_err();
    assert_eq!(api_status(&e).0, 409);
    // The first key still holds.
    AgentClient::new(&srv.adapter_url, 50, "Secret", "8 chars!")
        .get_org_login_type()
        .await
        .unwrap();
}
