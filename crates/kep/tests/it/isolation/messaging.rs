//! Message sending: two clients, B's uploads, messages and result groups, and every call
//! that names one of them with A's token or secret.

use std::time::Duration;

use reqwest::blocking::multipart::{Form, Part};
use serde_json::{Value, json};

use super::harness::*;
use crate::common::eventually_blocking;

pub const B_PHONE: &str = "821077771234";
pub const A_PHONE: &str = "821066665678";

/// How a client presents its credentials at the token endpoint (CONTRACT §4).
#[derive(Clone, Copy, Debug)]
pub enum TokenAuth {
    HttpBasic,
    TwoWordBasic,
    FormFields,
}

/// `POST /v2/oauth/token` as the client `{client}` with the secret given.
pub fn token_call<'a>(ctx: &'a Ctx, how: TokenAuth) -> Send<'a> {
    Box::new(move |secret, ids| {
        let (client, secret) = (id(ids, "client"), secret.unwrap());
        let mut form = vec![("grant_type", "client_credentials")];
        let req = ctx.client.post(ctx.url("messaging", "/v2/oauth/token"));
        let req = match how {
            TokenAuth::HttpBasic => req.basic_auth(client, Some(secret)),
            TokenAuth::TwoWordBasic => {
                req.header("authorization", format!("Basic {client} {secret}"))
            }
            TokenAuth::FormFields => {
                form.extend([("client_id", client), ("client_secret", secret)]);
                req
            }
        };
        Answer::of(req.form(&form))
    })
}

pub struct MsgTenant {
    pub client: String,
    pub secret: String,
    pub token: String,
}

impl MsgTenant {
    pub fn new(ctx: &Ctx, name: &str) -> Self {
        let made = ctx.admin(
            "POST",
            "/admin/v1/messaging/clients",
            Some(json!({"name": name})),
        );
        let client = made["client_id"].as_str().unwrap().to_owned();
        let secret = made["client_secret"].as_str().unwrap().to_owned();
        let token =
            token_call(ctx, TokenAuth::HttpBasic)(Some(&secret), &ids(&[("client", &client)]))
                .ok("a token")["access_token"]
                .as_str()
                .unwrap()
                .to_owned();
        MsgTenant {
            client,
            secret,
            token,
        }
    }

    pub fn call(&self, ctx: &Ctx, method: &str, path: &str, body: Option<&Value>) -> Answer {
        let mut req = ctx
            .client
            .request(method.parse().unwrap(), ctx.url("messaging", path))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(b);
        }
        Answer::of(req)
    }

    pub fn send(&self, ctx: &Ctx, channel: &str, body: &Value) -> String {
        self.call(ctx, "POST", &format!("/v2/send/{channel}"), Some(body))
            .ok("a send")["uid"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    pub fn upload(&self, ctx: &Ctx, path: &str, form: Form) -> Value {
        Answer::of(
            ctx.client
                .post(ctx.url("messaging", path))
                .bearer_auth(&self.token)
                .multipart(form),
        )
        .ok(path)
    }

    /// The message's detail once delivery has finished.
    pub fn finished(&self, ctx: &Ctx, channel: &str, uid: &str) -> Value {
        let (path, status) = match channel {
            "xms" => ("message", "/result/status_code"),
            _ => ("rcs", "/result/status"),
        };
        let url = format!("/v2/info/{path}/search/detail/{uid}");
        eventually_blocking(Duration::from_secs(30), &format!("{uid} finishes"), || {
            let detail = self.call(ctx, "GET", &url, None).ok("a detail");
            if detail.pointer(status) == Some(&json!("API_100")) {
                Err(detail)
            } else {
                Ok(detail)
            }
        })
    }

    /// Hands out the finished RCS results as a new group; its id.
    pub fn results(&self, ctx: &Ctx, uid: &str) -> String {
        let group = self
            .call(ctx, "GET", "/v2/info/rcs/results", None)
            .ok("results");
        assert_eq!(group["results"][0]["uid"], uid, "{group}");
        group["report_group_id"].as_str().unwrap().to_owned()
    }
}

pub fn xms(cid: &str, phone: &str, extra: Value) -> Value {
    let mut body = json!({"cid": cid, "message_type": "SM", "phone_number": phone,
        "message": "a-text", "sender_no": "0212345678"});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

pub fn rcs(cid: &str, phone: &str, card: Value) -> Value {
    json!({"cid": cid, "message_type": "RCSMMS", "phone_number": phone, "template_code": "OO000000",
        "agency_id": "agency", "ad_flag": "N", "sender_no": "0212345678", "fall_back_yn": false,
        "body": [card]})
}

/// Bytes the upload checks take for an image: its magic number, then filler.
pub fn image(magic: &[u8]) -> Vec<u8> {
    let mut bytes = magic.to_vec();
    bytes.resize(1000, 0x11);
    bytes
}

/// Two clients; B's uploads, messages of every channel and kind, and result groups (one
/// completed, one open).
pub struct Messaging {
    pub a: MsgTenant,
    pub b: MsgTenant,
    /// (what, channel, uid, cid)
    pub messages: Vec<(&'static str, &'static str, String, &'static str)>,
    pub rcs_file: String,
    pub mms_group: String,
    pub completed_group: String,
    pub open_group: String,
}

impl Messaging {
    pub fn new(ctx: &Ctx) -> Self {
        let (a, b) = (
            MsgTenant::new(ctx, "tenant-a"),
            MsgTenant::new(ctx, "tenant-b"),
        );
        a.send(ctx, "xms", &xms("a-own-cid", A_PHONE, json!({})));
        let rcs_file = b.upload(
            ctx,
            "/v2/upload/rcs",
            Form::new()
                .part(
                    "image",
                    Part::bytes(image(b"\x89PNG\r\n\x1a\n")).file_name("b.png"),
                )
                .text("description", "b-upload-marker"),
        )["file_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let mms_group = b.upload(
            ctx,
            "/v2/upload/message/mms/files",
            Form::new().part(
                "files",
                Part::bytes(image(&[0xFF, 0xD8, 0xFF, 0xE0])).file_name("b.jpg"),
            ),
        )["content_group_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let sm = xms(
            "b-xms-cid-one",
            B_PHONE,
            json!({"message": "b-text-marker-sm"}),
        );
        let mm = xms(
            "b-mms-cid-one",
            B_PHONE,
            json!({"message_type": "MM", "message": "b-text-marker-mm", "title": "b-title-marker",
                "content_group_id": mms_group}),
        );
        let card = |cid: &str, media: Option<&str>| {
            let mut card = json!({"title": "b-card-marker", "description": "b-text-marker-rcs"});
            if let Some(file) = media {
                card["media"] = json!(format!("maapfile://{file}"));
            }
            rcs(cid, B_PHONE, card)
        };
        let mut messages = vec![
            ("B's SM", "xms", b.send(ctx, "xms", &sm), "b-xms-cid-one"),
            ("B's MM", "xms", b.send(ctx, "xms", &mm), "b-mms-cid-one"),
        ];
        // One RCS result group completed, then one left open.
        let first = b.send(ctx, "rcs", &card("b-rcs-cid-one", Some(&rcs_file)));
        b.finished(ctx, "rcs", &first);
        let completed_group = b.results(ctx, &first);
        b.call(
            ctx,
            "PUT",
            &format!("/v2/info/rcs/results/complete/{completed_group}"),
            None,
        )
        .ok("complete");
        let second = b.send(ctx, "rcs", &card("b-rcs-cid-two", None));
        b.finished(ctx, "rcs", &second);
        let open_group = b.results(ctx, &second);
        messages.push((
            "B's RCS in a completed group",
            "rcs",
            first,
            "b-rcs-cid-one",
        ));
        messages.push(("B's RCS in an open group", "rcs", second, "b-rcs-cid-two"));
        for (_, channel, uid, _) in &messages {
            b.finished(ctx, channel, uid);
        }
        Messaging {
            a,
            b,
            messages,
            rcs_file,
            mms_group,
            completed_group,
            open_group,
        }
    }

    /// What B reads of its own: every message's detail and both searches.
    pub fn state(&self, ctx: &Ctx) -> Value {
        let details: Vec<Value> = self
            .messages
            .iter()
            .map(|(_, channel, uid, _)| self.b.finished(ctx, channel, uid))
            .collect();
        json!({
            "details": details,
            "xms": self.b.call(ctx, "POST", "/v2/info/message/search", Some(&json!({}))).ok("search"),
            "rcs": self.b.call(ctx, "POST", "/v2/info/rcs/search", Some(&json!({}))).ok("search"),
        })
    }

    /// B completes its open group, gets a token with its secret, and sends with its uploads.
    pub fn b_finishes(&self, ctx: &Ctx) {
        let b = &self.b;
        b.call(
            ctx,
            "PUT",
            &format!("/v2/info/rcs/results/complete/{}", self.open_group),
            None,
        )
        .ok("B completes its open group");
        token_call(ctx, TokenAuth::HttpBasic)(Some(&b.secret), &ids(&[("client", &b.client)]))
            .ok("B's secret");
        let card = json!({"title": "t", "description": "d", "media": format!("maapfile://{}", self.rcs_file)});
        b.send(ctx, "rcs", &rcs("b-after-rcs", B_PHONE, card));
        let mm = json!({"message_type": "MM", "title": "t", "content_group_id": self.mms_group});
        b.send(ctx, "xms", &xms("b-after-mm", B_PHONE, mm));
    }

    pub fn matrices<'a>(&self, ctx: &'a Ctx) -> Vec<Matrix<'a>> {
        let bearer = |method: &str, path: &str, body: Option<Value>| {
            let body = body.map_or(Body::Empty, |b| Body::Json(b.to_string()));
            ctx.send("Bearer", method, ctx.url("messaging", path), &[], body)
        };
        let one = |name: &str, key: &str, theirs: &str, missing: &str| {
            object(name, ids(&[(key, theirs)]), ids(&[(key, missing)]))
        };
        let uids: Vec<Object> = self
            .messages
            .iter()
            .map(|(what, _, uid, _)| one(what, "uid", uid, "00000000000000000042"))
            .collect();
        let cids = |channel: &str, fresh: &str| -> Vec<Object> {
            self.messages
                .iter()
                .filter(|(_, c, _, _)| *c == channel)
                .map(|(what, _, _, cid)| one(&format!("the cid of {what}"), "cid", cid, fresh))
                .collect()
        };
        let b_client = || {
            vec![one(
                "B's client id",
                "client",
                &self.b.client,
                "no-such-client-id",
            )]
        };
        let refusal = |status: u16, code: &str, message: &str| {
            expect(
                status,
                &format!(
                    r#"{{"code":"{code}","result":{{"detail_code":"API_{code}","detail_message":"{message}"}}}}"#
                ),
            )
        };
        // A send's refusals echo its cid.
        let send_refusal = |status: u16, code: &str, message: &str, cid: &str| {
            expect(
                status,
                &format!(
                    r#"{{"cid":"{cid}","code":"{code}","result":{{"detail_code":"API_{code}","detail_message":"{message}"}}}}"#
                ),
            )
        };
        // A search's refusals are in the searches' shape: `status` beside `code`.
        let search_refusal = |status: u16, code: &str, message: &str| {
            expect(
                status,
                &format!(
                    r#"{{"code":"{code}","code_detail":{{"detail_code":"API_{code}","detail_message":"{message}"}},"status":"{code}"}}"#
                ),
            )
        };
        // The detail calls' refusals carry `code_detail`, as their answers do.
        let detail = |status: u16, code: &str, message: &str| {
            expect(
                status,
                &format!(
                    r#"{{"code":"{code}","code_detail":{{"detail_code":"API_{code}","detail_message":"{message}"}}}}"#
                ),
            )
        };
        let unknown_token = "invalid token: unknown or expired access token";
        let card = json!({"title": "t", "description": "d"});
        let mut calls = vec![
            Call {
                // Codes of the result-code table: 400 for a bad token, 410 for a uid.
                unauthorized: Some(detail(401, "400", unknown_token)),
                ..call(
                    "GET /v2/info/message/search/detail/{uid}",
                    bearer("GET", "/v2/info/message/search/detail/{uid}", None),
                    uids.clone(),
                    detail(400, "410", "uid: no such message"),
                )
            },
            Call {
                // This call's codes are HTTP-style (seed 002), a bad token's included.
                unauthorized: Some(detail(401, "401", unknown_token)),
                ..call(
                    "GET /v2/info/rcs/search/detail/{uid}",
                    bearer("GET", "/v2/info/rcs/search/detail/{uid}", None),
                    uids,
                    detail(404, "404", "no such message"),
                )
            },
            call(
                "PUT /v2/info/rcs/results/complete/{report_group_id}",
                bearer("PUT", "/v2/info/rcs/results/complete/{group}", None),
                [
                    ("B's open group", &self.open_group),
                    ("B's completed group", &self.completed_group),
                ]
                .into_iter()
                .map(|(name, group)| one(name, "group", group, "no-such-group-id"))
                .collect(),
                refusal(400, "410", "report_group_id: no such open group"),
            ),
            Call {
                unauthorized: Some(send_refusal(401, "400", unknown_token, "a-media-cid")),
                ..call(
                    "POST /v2/send/rcs, media of B's upload",
                    bearer(
                        "POST",
                        "/v2/send/rcs",
                        Some(rcs(
                            "a-media-cid",
                            A_PHONE,
                            json!({"title": "t", "description": "d", "media": "maapfile://{file}"}),
                        )),
                    ),
                    vec![one(
                        "B's RCS file",
                        "file",
                        &self.rcs_file,
                        "no-such-rcs-file",
                    )],
                    send_refusal(
                        400,
                        "420",
                        "body[0].media: no such RCS upload, or it expired",
                        "a-media-cid",
                    ),
                )
            },
            Call {
                unauthorized: Some(send_refusal(401, "400", unknown_token, "a-mms-cid")),
                ..call(
                    "POST /v2/send/xms, content_group_id of B's upload",
                    bearer(
                        "POST",
                        "/v2/send/xms",
                        Some(xms(
                            "a-mms-cid",
                            A_PHONE,
                            json!({"message_type": "MM", "content_group_id": "{group}"}),
                        )),
                    ),
                    vec![one(
                        "B's MMS files",
                        "group",
                        &self.mms_group,
                        "no-such-mms-group",
                    )],
                    send_refusal(
                        400,
                        "420",
                        "content_group_id: no such MMS upload, or it expired",
                        "a-mms-cid",
                    ),
                )
            },
            Call {
                unauthorized: Some(send_refusal(401, "400", unknown_token, "a-client-cid")),
                ..call(
                    "POST /v2/send/xms, client_id of B",
                    bearer(
                        "POST",
                        "/v2/send/xms",
                        Some(xms(
                            "a-client-cid",
                            A_PHONE,
                            json!({"client_id": "{client}"}),
                        )),
                    ),
                    b_client(),
                    send_refusal(
                        400,
                        "410",
                        "client_id: is not the client of the access token",
                        "a-client-cid",
                    ),
                )
            },
        ];
        // A cid is the client's own key: B's is a fresh one to A, and A's send is A's own.
        let accepted = r#"{"code":"200","uid":"{uid}","cid":"{cid}","result":{"detail_code":"API_200","detail_message":"accepted"}}"#;
        for (channel, body) in [
            ("xms", xms("{cid}", A_PHONE, json!({}))),
            ("rcs", rcs("{cid}", A_PHONE, card)),
        ] {
            calls.push(Call {
                masked: &["/uid"],
                unauthorized: Some(send_refusal(401, "400", unknown_token, "{cid}")),
                ..call(
                    format!("POST /v2/send/{channel}, cid of B's"),
                    bearer("POST", &format!("/v2/send/{channel}"), Some(body)),
                    cids(channel, &format!("a-fresh-cid-{channel}")),
                    expect(200, accepted),
                )
            });
        }
        let empty_page = expect(
            200,
            r#"{"status":"200","code":"200","count":0,"next":false,"code_detail":{"detail_code":"API_200","detail_message":"ok"},"results":[]}"#,
        );
        let by_client = Some(json!({"client_id": "{client}"}));
        for (method, path, body) in [
            ("POST", "/v2/info/message/search", by_client.clone()),
            ("POST", "/v2/info/rcs/search", by_client),
            ("GET", "/v2/info/rcs/search?client_id={client}", None),
        ] {
            calls.push(Call {
                unauthorized: Some(search_refusal(401, "400", unknown_token)),
                ..call(
                    format!("{method} {path}, client_id of B"),
                    bearer(method, path, body),
                    b_client(),
                    empty_page.clone(),
                )
            });
        }
        for (method, path, body) in [
            ("POST", "/v2/info/message/search", Some(json!({}))),
            ("POST", "/v2/info/rcs/search", Some(json!({}))),
            ("GET", "/v2/info/rcs/search", None),
            ("GET", "/v2/info/rcs/results", None),
            ("POST", "/v2/info/rcs/results", None),
        ] {
            let searched = path.contains("/search");
            calls.push(Call {
                unauthorized: searched.then(|| search_refusal(401, "400", unknown_token)),
                ..call(
                    format!("{method} {path}"),
                    bearer(method, path, body),
                    listing(),
                    listed(),
                )
            });
        }
        let invalid_client = expect(401, r#"{"error":"invalid_client"}"#);
        let token_calls = [
            TokenAuth::HttpBasic,
            TokenAuth::TwoWordBasic,
            TokenAuth::FormFields,
        ]
        .into_iter()
        .map(|how| {
            call(
                format!("POST /v2/oauth/token, B's client id ({how:?})"),
                token_call(ctx, how),
                b_client(),
                invalid_client.clone(),
            )
        })
        .collect();
        vec![
            Matrix {
                service: "messaging",
                creds: vec![
                    Cred::tenant("A's access token", &self.a.token),
                    Cred::stranger("the operator token", Some(&ctx.operator)),
                ],
                unauthorized: refusal(401, "400", unknown_token),
                calls,
            },
            Matrix {
                service: "messaging",
                creds: vec![Cred::tenant("A's client secret", &self.a.secret)],
                unauthorized: invalid_client,
                calls: token_calls,
            },
        ]
    }
}

/// A listing of the caller's own: any 200 that shows nothing of B's.
pub fn listed() -> Expect {
    Expect {
        status: 200,
        body: None,
    }
}
