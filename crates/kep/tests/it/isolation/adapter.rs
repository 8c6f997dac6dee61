//! The account adapter: two orgs, B's DRM sessions in every state an agent leaves one in,
//! and every agent call with A's secret key.

use serde_json::{Value, json};

use super::harness::*;

pub struct Org {
    pub id: String,
    pub secret: String,
}

pub fn org(ctx: &Ctx, sync_option: &str) -> Org {
    let made = ctx.admin(
        "POST",
        "/admin/v1/adapter/org-login-types",
        Some(json!({
            "method": "OAUTH2", "adapter_agent": "127.0.0.1:9",
            "data_model": {"user": {"synchronization": {"options": [sync_option]}}},
        })),
    );
    Org {
        id: made["id"].to_string(),
        secret: made["secret_key"].as_str().unwrap().to_owned(),
    }
}

/// `getOrgLoginType` of the org `{org}`.
pub fn get_org<'a>(ctx: &'a Ctx) -> Send<'a> {
    ctx.send(
        "Secret",
        "GET",
        ctx.url("adapter", "/api/trust/login/v0/getOrgLoginType"),
        &[("Kep-OrgLoginType", "ID {org}")],
        Body::Empty,
    )
}

/// `uploadResult` `{result}` for the session `{session}` of `{org}`, file `{file}`.
pub fn upload_result<'a>(ctx: &'a Ctx) -> Send<'a> {
    ctx.send(
        "Secret",
        "POST",
        ctx.url("adapter", "/api/trust/drm/v0/uploadResult"),
        &[
            ("Kep-OrgLoginType", "ID {org}"),
            ("Kep-AgentSession", "DSID {session}"),
            ("Kep-File-Id", "{file}"),
            ("Kep-File-Type", "DRM"),
        ],
        Body::Json(r#"{"result":"{result}","reason":"isolation"}"#.into()),
    )
}

/// `uploadDecrypted` of `{content}` for the session `{session}` of `{org}`, file `{file}`.
pub fn upload_decrypted<'a>(ctx: &'a Ctx) -> Send<'a> {
    ctx.send(
        "Secret",
        "POST",
        ctx.url("adapter", "/api/trust/drm/v0/uploadDecrypted"),
        &[
            ("Kep-OrgLoginType", "ID {org}"),
            ("Kep-AgentSession", "DSID {session}"),
            ("Kep-File-Id", "{file}"),
        ],
        Body::File {
            part: "file",
            content: "{content}".into(),
        },
    )
}

/// Two orgs; B's DRM sessions in each state an agent can leave one in, B's agent having
/// answered them (a released file for `RELEASED`).
pub struct Adapter {
    pub a: Org,
    pub b: Org,
    /// (status, session, file)
    pub sessions: Vec<(&'static str, String, String)>,
}

pub const B_RELEASED: &str = "b-released-content-marker";

impl Adapter {
    pub fn new(ctx: &Ctx) -> Self {
        let a = org(ctx, "a-sync-option");
        let b = org(ctx, "b-sync-option-marker");
        assert_eq!(
            get_org(ctx)(Some(&a.secret), &ids(&[("org", &a.id)])).status,
            200
        );
        let (result, decrypted) = (upload_result(ctx), upload_decrypted(ctx));
        let mut sessions = Vec::new();
        for status in ["PENDING", "GRANTED", "RELEASED", "DENIED"] {
            let file = format!("b-file-{}", status.to_lowercase());
            let made = ctx.admin(
                "POST",
                "/admin/v1/adapter/drm-requests",
                Some(
                    json!({"org_login_type_id": b.id.parse::<i64>().unwrap(), "file_id": file,
                    "file_type": "DRM", "user": "b-user-marker"}),
                ),
            );
            let session = made["session_id"].as_str().unwrap().to_owned();
            let with = |result: &str| agent_ids(&b.id, &session, &file, result, B_RELEASED);
            let answered = match status {
                "GRANTED" | "RELEASED" => Some("SUCCESS"),
                "DENIED" => Some("FAILURE"),
                _ => None,
            };
            if let Some(answer) = answered {
                result(Some(&b.secret), &with(answer)).ok(status);
            }
            if status == "RELEASED" {
                decrypted(Some(&b.secret), &with("SUCCESS")).ok(status);
            }
            let shown = ctx.admin(
                "GET",
                &format!("/admin/v1/adapter/drm-requests/{session}"),
                None,
            );
            assert_eq!(shown["status"], status);
            sessions.push((status, session, file));
        }
        Adapter { a, b, sessions }
    }

    /// What B sees and has: each session (less its notification attempts, which go on by
    /// themselves), its org through its agent, its released file.
    pub fn state(&self, ctx: &Ctx) -> Value {
        let sessions: Vec<Value> = self
            .sessions
            .iter()
            .map(|(_, s, _)| {
                let mut shown =
                    ctx.admin("GET", &format!("/admin/v1/adapter/drm-requests/{s}"), None);
                shown.as_object_mut().unwrap().remove("notifications");
                shown
            })
            .collect();
        let released = &self.sessions[2].1;
        let file = Answer::of(
            ctx.client
                .get(ctx.url(
                    "admin",
                    &format!("/admin/v1/adapter/drm-requests/{released}/file"),
                ))
                .bearer_auth(&ctx.operator),
        );
        json!({
            "sessions": sessions,
            "org": get_org(ctx)(Some(&self.b.secret), &ids(&[("org", &self.b.id)])).ok("B's org"),
            "file": file.body,
        })
    }

    /// B's agent answers the session still pending and releases the granted file: A's
    /// attempts used up neither.
    pub fn b_finishes(&self, ctx: &Ctx) {
        let [(_, pending, pending_file), (_, granted, granted_file), ..] = &self.sessions[..]
        else {
            unreachable!()
        };
        upload_result(ctx)(
            Some(&self.b.secret),
            &agent_ids(&self.b.id, pending, pending_file, "SUCCESS", B_RELEASED),
        )
        .ok("B's pending session");
        upload_decrypted(ctx)(
            Some(&self.b.secret),
            &agent_ids(&self.b.id, granted, granted_file, "SUCCESS", B_RELEASED),
        )
        .ok("B's granted session");
    }

    pub fn matrices<'a>(&self, ctx: &'a Ctx) -> Vec<Matrix<'a>> {
        let sessions = |org: &str, missing_org: &str| -> Vec<Object> {
            let call = |org: &str, session: &str, file: &str| {
                agent_ids(org, session, file, "SUCCESS", "a-probe-content")
            };
            self.sessions
                .iter()
                .map(|(status, s, f)| {
                    object(
                        &format!("B's {status} session"),
                        call(org, s, f),
                        call(missing_org, "no-such-session-id", f),
                    )
                })
                .collect()
        };
        let not_found = expect(404, r#"{"_code":404,"_message":"no such session"}"#);
        let wrong_key = expect(401, r#"{"_code":401,"_message":"invalid secret key"}"#);
        // A names its own org and B's session; or B's org, where A's key is wrong.
        let mut calls = vec![call(
            "getOrgLoginType, Kep-OrgLoginType B's",
            get_org(ctx),
            vec![object(
                "B's org",
                ids(&[("org", &self.b.id)]),
                ids(&[("org", "999999999")]),
            )],
            wrong_key.clone(),
        )];
        for (name, send) in [
            ("uploadResult", upload_result as fn(&'a Ctx) -> Send<'a>),
            ("uploadDecrypted", upload_decrypted),
        ] {
            calls.push(call(
                name,
                send(ctx),
                sessions(&self.a.id, &self.a.id),
                not_found.clone(),
            ));
            calls.push(call(
                format!("{name}, Kep-OrgLoginType B's"),
                send(ctx),
                sessions(&self.b.id, "999999999"),
                wrong_key.clone(),
            ));
        }
        vec![Matrix {
            service: "adapter",
            creds: vec![
                Cred::tenant("A's secret key", &self.a.secret),
                Cred::stranger("the operator token", Some(&ctx.operator)),
            ],
            unauthorized: wrong_key,
            calls,
        }]
    }
}

/// The ids of an agent call by the org `org` on a session.
pub fn agent_ids(org: &str, session: &str, file: &str, result: &str, content: &str) -> Ids {
    ids(&[
        ("org", org),
        ("session", session),
        ("file", file),
        ("result", result),
        ("content", content),
    ])
}
