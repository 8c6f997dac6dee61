//! Model serving: A's and B's endpoints with running deployments, and every gateway call
//! with A's key and other keys that must not open B's.

use std::time::Duration;

use serde_json::{Value, json};

use super::harness::*;
use crate::common::eventually_blocking;

pub const A_ENDPOINT: &str = "tenant-a-endpoint";
pub const B_ENDPOINT: &str = "tenant-b-endpoint";
pub const B_EMPTY: &str = "tenant-b-empty-endpoint";
pub const GONE: &str = "tenant-gone-endpoint";
pub const B_DEPLOYMENT: &str = "tenant-b-deployment";

/// A's and B's endpoints, each with a deployment of a real instance; B's second endpoint
/// with none; an endpoint deleted since. B's key was reissued once.
pub struct Serving {
    pub a_key: String,
    pub b_key: String,
    pub b_replaced_key: String,
    pub gone_key: String,
    pub b_instance: String,
}

impl Serving {
    pub fn new(ctx: &Ctx) -> Self {
        let instance = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../kep-serving/tests/instance.py"
        );
        ctx.admin(
            "POST",
            "/admin/v1/serving/images",
            Some(json!({"name": "isolation-py", "command": ["python3", instance]})),
        );
        let endpoint = |name: &str| {
            ctx.admin(
                "POST",
                "/admin/v1/serving/endpoints",
                Some(json!({"name": name})),
            )["api_key"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        let (a_key, b_replaced_key, gone_key) =
            (endpoint(A_ENDPOINT), endpoint(B_ENDPOINT), endpoint(GONE));
        endpoint(B_EMPTY);
        ctx.admin(
            "DELETE",
            &format!("/admin/v1/serving/endpoints/{GONE}"),
            None,
        );
        let b_key = ctx.admin(
            "POST",
            &format!("/admin/v1/serving/endpoints/{B_ENDPOINT}/api-key"),
            None,
        )["api_key"]
            .as_str()
            .unwrap()
            .to_owned();
        let deployments = [
            (A_ENDPOINT, "tenant-a-deployment"),
            (B_ENDPOINT, B_DEPLOYMENT),
        ];
        // Both start at once; then both are waited for.
        for (e, d) in deployments {
            ctx.admin(
                "POST",
                &format!("/admin/v1/serving/endpoints/{e}/deployments"),
                // No readiness probe: the default, a TCP connect, holds on a loaded machine.
                Some(
                    json!({"name": d, "type": "custom-image", "image": "isolation-py", "env": {"NAME": d}}),
                ),
            );
        }
        for (e, d) in deployments {
            let path = format!("/admin/v1/serving/endpoints/{e}/deployments/{d}");
            eventually_blocking(Duration::from_secs(60), &format!("{d} Available"), || {
                let shown = ctx.admin("GET", &path, None);
                if shown["state"] == "Available" {
                    Ok(())
                } else {
                    Err(shown)
                }
            });
        }
        let serving = Serving {
            b_instance: ctx.admin("GET", &Serving::b_deployment(), None)["instances"][0]["id"]
                .as_str()
                .unwrap()
                .to_owned(),
            a_key,
            b_key,
            b_replaced_key,
            gone_key,
        };
        let own = serving
            .gateway(ctx, A_ENDPOINT, &serving.a_key, "/hello")
            .ok("A's own endpoint");
        assert_eq!(own["name"], "tenant-a-deployment");
        serving
    }

    pub fn b_deployment() -> String {
        format!("/admin/v1/serving/endpoints/{B_ENDPOINT}/deployments/{B_DEPLOYMENT}")
    }

    pub fn gateway(&self, ctx: &Ctx, endpoint: &str, key: &str, path: &str) -> Answer {
        Answer::of(
            ctx.client
                .get(ctx.url("gateway", &format!("/endpoints/{endpoint}{path}")))
                .bearer_auth(key),
        )
    }

    /// B's deployment as the operator sees it, less what its probes move (its state, its
    /// instances' readiness), and how many calls its instance has served (its `/stats`,
    /// which does not count itself): none of A's may have reached it.
    pub fn state(&self, ctx: &Ctx) -> Value {
        let mut deployment = ctx.admin("GET", &Serving::b_deployment(), None);
        deployment.as_object_mut().unwrap().remove("state");
        for instance in deployment["instances"].as_array_mut().unwrap() {
            let instance = instance.as_object_mut().unwrap();
            instance.remove("state");
            instance.remove("ready");
        }
        json!({
            "deployment": deployment,
            "served": self.gateway(ctx, B_ENDPOINT, &self.b_key, "/stats").ok("B's stats"),
        })
    }

    pub fn matrices<'a>(&self, ctx: &'a Ctx) -> Vec<Matrix<'a>> {
        let unauthorized = expect(
            401,
            r#"{"error":{"code":"unauthorized","message":"no endpoint of this name accepts this API key"}}"#,
        );
        // On the model servers' protocol paths the gateway refuses in their shape.
        let unauthorized_protocol = expect(
            401,
            r#"{"error":"no endpoint of this name accepts this API key"}"#,
        );
        let endpoints = || -> Vec<Object> {
            [
                ("B's endpoint", B_ENDPOINT),
                ("B's endpoint without a deployment", B_EMPTY),
                ("a deleted endpoint", GONE),
            ]
            .into_iter()
            .map(|(name, e)| {
                object(
                    name,
                    ids(&[("endpoint", e)]),
                    ids(&[("endpoint", "no-such-endpoint")]),
                )
            })
            .collect()
        };
        let calls = [
            ("GET", "", Body::Empty),
            ("GET", "/", Body::Empty),
            ("GET", "/v2/models/m", Body::Empty),
            (
                "POST",
                "/v2/models/m/infer",
                Body::Json(r#"{"inputs":[]}"#.into()),
            ),
            ("PUT", "/anything", Body::Json("{}".into())),
            ("DELETE", "/anything", Body::Empty),
        ]
        .into_iter()
        .map(|(method, path, body)| {
            let url = ctx.url("gateway", &format!("/endpoints/{{endpoint}}{path}"));
            let refused = if path.starts_with("/v2") {
                &unauthorized_protocol
            } else {
                &unauthorized
            };
            Call {
                unauthorized: Some(refused.clone()),
                ..call(
                    format!("{method} /endpoints/{{endpoint}}{path}"),
                    ctx.send("Bearer", method, url, &[], body),
                    endpoints(),
                    refused.clone(),
                )
            }
        })
        .collect();
        vec![Matrix {
            service: "serving gateway",
            creds: vec![
                Cred::tenant("A's API key", &self.a_key),
                Cred::stranger("no key", None),
                Cred::stranger("a deleted endpoint's key", Some(&self.gone_key)),
                Cred::stranger("B's key before its reissue", Some(&self.b_replaced_key)),
                Cred::stranger("the operator token", Some(&ctx.operator)),
            ],
            unauthorized,
            calls,
        }]
    }
}
