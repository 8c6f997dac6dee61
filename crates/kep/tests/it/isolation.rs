//! Isolation between tenants (issue #8), on the real `kep` binary. Each service gets two
//! tenants (A and B) with real objects; then A's credentials are tried on every call of the
//! service that names an object, against B's objects. Each case must be refused as the
//! documents say, answered byte for byte as the same call on an object that does not exist
//! (no existence oracle), show none of B's data, and leave B's objects as they were, read
//! back with B's credentials. The number of cases tried is printed (`--nocapture`).
//!
//! One test per service's calls, and one for the operator API; each starts its own server
//! with every service's tenants and objects, so that no answer may carry anything of B's,
//! whichever service it is from.

mod adapter;
mod harness;
mod live;
mod messaging;
mod serving;

use reqwest::blocking::Client;
use serde_json::{Value, json};

use crate::common::{StopsGracefully, port0, serve};
use adapter::{Adapter, B_RELEASED};
use harness::*;
use live::{LiveTenant, ROOM, Rooms, live_state, live_tenant, provision};
use messaging::{B_PHONE, Messaging};
use serving::{B_DEPLOYMENT, B_EMPTY, B_ENDPOINT, Serving};

#[test]
fn a_live_service_reaches_nothing_of_another() {
    isolated("live", |ctx, w| {
        live::matrices(ctx, &w.rooms, &w.live_a, &w.live_b)
    });
}

#[test]
fn an_org_reaches_nothing_of_another_org() {
    isolated("adapter", |ctx, w| w.adapter.matrices(ctx));
}

#[test]
fn a_messaging_client_reaches_nothing_of_another() {
    isolated("messaging", |ctx, w| w.messaging.matrices(ctx));
}

#[test]
fn an_endpoint_key_reaches_nothing_of_another_endpoint() {
    isolated("serving", |ctx, w| w.serving.matrices(ctx));
}

#[test]
fn no_tenant_credential_opens_the_operator_api() {
    isolated("operator API", |ctx, w| {
        vec![operator_matrix(ctx, w.a_creds(), |path, param| {
            w.b_object(path, param)
        })]
    });
}

/// Starts a server with every service's tenants, runs the cases of `matrices`, then reads
/// B's objects back: as they were, and still B's to use.
fn isolated(
    service: &str,
    matrices: impl for<'a> FnOnce(&'a Ctx<'a>, &'a World) -> Vec<Matrix<'a>>,
) {
    let dir = tempfile::tempdir().unwrap();
    let srv = StopsGracefully(serve(
        dir.path(),
        &port0(),
        // Nothing of B's may lapse by itself while the test runs on a loaded machine: B's
        // open result group, pending DRM session, and a Provision's two steps.
        &[
            ("KEP_SIMULATOR_DELAY_MS", "10"),
            ("KEP_MESSAGING_RESULTS_LEASE_S", "3600"),
            ("KEP_ADAPTER_SESSION_TTL_S", "3600"),
            ("KEP_LIVE_PROVISION_WINDOW_S", "60"),
        ],
    ));
    let ctx = Ctx {
        srv: &srv.0,
        client: Client::new(),
        operator: std::fs::read_to_string(dir.path().join("admin-token"))
            .unwrap()
            .trim()
            .to_owned(),
    };
    let world = World::new(&ctx);
    let cases: usize = matrices(&ctx, &world)
        .iter()
        .map(|m| m.run(&world.markers))
        .sum();
    eprintln!("isolation: {service}: {cases} cases");
    world.b_is_untouched(&ctx);
}

/// Every service's tenants A and B, with B's objects; what no answer to A may carry, and
/// what B read of its own before any case ran.
struct World {
    live_a: LiveTenant,
    live_b: LiveTenant,
    rooms: Rooms,
    adapter: Adapter,
    messaging: Messaging,
    serving: Serving,
    markers: Vec<String>,
    before: Value,
}

impl World {
    fn new(ctx: &Ctx) -> Self {
        let (live_a, live_b) = (
            live_tenant(ctx, "tenant-a-live"),
            live_tenant(ctx, "tenant-b-live"),
        );
        let rooms = Rooms::new(ctx, &live_a, &live_b);
        let adapter = Adapter::new(ctx);
        let messaging = Messaging::new(ctx);
        let serving = Serving::new(ctx);

        // Everything of B's that no answer to A may carry (not B's cids: A sends with them on
        // purpose, as keys of its own).
        let mut markers: Vec<String> = [
            &live_b.service,
            &live_b.admin_secret,
            &live_b.service_secret,
            &live_b.token,
            &adapter.b.secret,
            &messaging.b.client,
            &messaging.b.secret,
            &messaging.b.token,
            &messaging.rcs_file,
            &messaging.mms_group,
            &messaging.completed_group,
            &messaging.open_group,
            &serving.b_key,
            &serving.b_replaced_key,
            &serving.b_instance,
        ]
        .map(String::clone)
        .into();
        markers.extend(
            [
                ROOM,
                "b-part-one",
                "b-part-two",
                "b-part-three",
                "b-sync-option-marker",
                "b-user-marker",
                B_RELEASED,
                B_PHONE,
                "b-text-marker",
                "b-title-marker",
                "b-card-marker",
                "b-upload-marker",
                B_ENDPOINT,
                B_EMPTY,
                B_DEPLOYMENT,
            ]
            .map(str::to_owned),
        );
        for (_, session, file) in &adapter.sessions {
            markers.extend([session.clone(), file.clone()]);
        }
        markers.extend(messaging.messages.iter().map(|m| m.2.clone()));

        let mut world = World {
            live_a,
            live_b,
            rooms,
            adapter,
            messaging,
            serving,
            markers,
            before: Value::Null,
        };
        world.before = world.state(ctx);
        world
    }

    /// B's objects, read back with B's credentials.
    fn state(&self, ctx: &Ctx) -> Value {
        json!({
            "live": live_state(ctx, &self.live_b),
            "adapter": self.adapter.state(ctx),
            "messaging": self.messaging.state(ctx),
            "serving": self.serving.state(ctx),
        })
    }

    /// B's objects are as they were; no event of A's calls reached B's participants; B
    /// still provisions, and its agent and client finish what they had open.
    fn b_is_untouched(mut self, ctx: &Ctx) {
        assert_eq!(
            self.state(ctx),
            self.before,
            "B's objects, read back with B's credentials"
        );
        self.rooms.nothing_reached_b();
        provision(ctx, &self.live_b.service, &self.live_b.admin_secret).json()["result"]["token"]
            .as_str()
            .expect("B's admin secret still provisions");
        self.adapter.b_finishes(ctx);
        self.messaging.b_finishes(ctx);
    }

    /// Every credential of A's, each a stranger to the operator API.
    fn a_creds(&self) -> Vec<Cred> {
        vec![
            Cred::stranger("A's live admin secret", Some(&self.live_a.admin_secret)),
            Cred::stranger("A's live service secret", Some(&self.live_a.service_secret)),
            Cred::stranger("A's room token", Some(&self.live_a.token)),
            Cred::stranger("A's org secret key", Some(&self.adapter.a.secret)),
            Cred::stranger(
                "A's messaging client secret",
                Some(&self.messaging.a.secret),
            ),
            Cred::stranger("A's access token", Some(&self.messaging.a.token)),
            Cred::stranger("A's endpoint API key", Some(&self.serving.a_key)),
        ]
    }

    /// B's object for the parameter `param` of the operator path `path`.
    fn b_object(&self, path: &str, param: &str) -> String {
        let area = path.split('/').nth(3).unwrap();
        match (area, param) {
            ("live", "id") => self.live_b.service.clone(),
            ("live", "room") => ROOM.into(),
            ("adapter", "id") => self.adapter.b.id.clone(),
            ("adapter", "session") => self.adapter.sessions[0].1.clone(),
            ("messaging", "id") => self.messaging.b.client.clone(),
            ("messaging", "uid") => self.messaging.messages[0].2.clone(),
            ("serving", "endpoint") => B_ENDPOINT.into(),
            ("serving", "deployment") => B_DEPLOYMENT.into(),
            ("serving", "instance") => self.serving.b_instance.clone(),
            // Images and models are the operator's, no tenant's: one in use by B's deployment.
            ("serving", "name") => "isolation-py".into(),
            other => panic!("{path}: a parameter this test does not know: {other:?}"),
        }
    }
}

/// Every `/admin/v1` call of the operator API's document, on B's objects, with each of A's
/// credentials: every one is the operator's 401.
fn operator_matrix<'a>(
    ctx: &'a Ctx,
    creds: Vec<Cred>,
    b: impl Fn(&str, &str) -> String,
) -> Matrix<'a> {
    let doc =
        Answer::of(ctx.client.get(ctx.url("admin", "/openapi/admin.json"))).ok("the document");
    let unauthorized = expect(
        401,
        r#"{"error":{"code":"unauthorized","message":"a valid operator token is required"}}"#,
    );
    let mut calls = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        if !path.starts_with("/admin/v1/") {
            continue;
        }
        let params: Vec<&str> = path
            .split('/')
            .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
            .collect();
        let theirs: Ids = params
            .iter()
            .map(|p| ((*p).to_owned(), b(path, p)))
            .collect();
        let missing: Ids = params
            .iter()
            .map(|p| ((*p).to_owned(), "999999999".to_owned()))
            .collect();
        for method in item.as_object().unwrap().keys() {
            let body = match method.as_str() {
                "post" | "put" | "patch" => Body::Json("{}".into()),
                _ => Body::Empty,
            };
            calls.push(call(
                format!("{} {path}", method.to_uppercase()),
                ctx.send("Bearer", method, ctx.url("admin", path), &[], body),
                vec![object("B's objects", theirs.clone(), missing.clone())],
                unauthorized.clone(),
            ));
        }
    }
    assert!(calls.len() >= 40, "{} operator calls", calls.len());
    Matrix {
        service: "operator API",
        creds,
        unauthorized,
        calls,
    }
}
