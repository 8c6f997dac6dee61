//! The wiring of a set of [`Service`]s: each gets its listener bound and a [`Context`]; the
//! admin listener serves their operator routes behind the operator token, `/healthz`,
//! `/readyz` and the OpenAPI documents; stopping fires the shutdown token, lets the services
//! finish and waits for the listeners and every tracked task. `kep serve` and the services'
//! tests both build on this, so none of them wires a service by hand.
//!
//! The admin listener serves from the moment it is bound: while the services start, it
//! answers `/healthz`, `/readyz` (503, what it waits for) and a 503 to anything else.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::routing::{MethodRouter, get};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower_http::trace::TraceLayer;
use utoipa::openapi::OpenApi;
use utoipa::openapi::server::Server;

use crate::activity::{self, Activity};
use crate::clock::Clock;
use crate::cluster::Cluster;
use crate::declared::{self, Declarations, Declares};
use crate::limits::{Limiter, Limits};
use crate::listener::{self, AllowedHosts, App, Bound};
use crate::readiness::{self, Ready};
use crate::seal::Sealer;
use crate::service::{Context, ListenerSettings, Service};
use crate::tls::ServerTls;

/// Where the seal key is kept unless `seal_key_file` says otherwise.
const SEAL_KEY_FILE: &str = "seal.key";

type Stop = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// A platform being assembled: listeners bound, services started, nothing served yet.
pub struct Platform {
    data_dir: PathBuf,
    clock: Clock,
    activity: Activity,
    shutdown: CancellationToken,
    tasks: TaskTracker,
    /// The admin listener's URL, for its document's `servers`.
    admin_url: String,
    admin_limits: Limits,
    /// What the listeners that speak TLS present.
    tls: Option<ServerTls>,
    /// The admin listener's server, which takes its whole router once the platform serves.
    admin_server: tokio::task::JoinHandle<()>,
    admin_router: Arc<OnceLock<Router>>,
    ready: Ready,
    /// The admin listener's host names: it serves browsers (the console, the docs).
    admin_hosts: AllowedHosts,
    operator_routes: Router,
    open_routes: Router,
    admin_doc: OpenApi,
    /// The services' documents served at `/openapi/<name>.json`, by name.
    doc_names: Vec<&'static str>,
    database_url: Option<String>,
    /// Joined at the first service's start.
    cluster: Option<Cluster>,
    /// The seal key's file, read (or made) at the first service's start.
    seal_key_file: PathBuf,
    seal: Option<Sealer>,
    listeners: Vec<(&'static str, Bound, App, Limits)>,
    /// The started services' parts of declared resources.
    declares: Vec<Arc<dyn Declares>>,
    stops: Vec<Stop>,
    addresses: BTreeMap<&'static str, SocketAddr>,
    /// The listeners that speak TLS.
    secure: BTreeSet<&'static str>,
}

impl Platform {
    /// Binds the admin listener (port 0 picks a free one) and serves `/healthz` and
    /// `/readyz` on it at once, within `admin.limits`; services keep their files under
    /// `data_dir`. Each listener whose settings keep `tls` speaks TLS with `tls`, if given.
    pub async fn new(
        data_dir: &Path,
        admin: ListenerSettings,
        tls: Option<ServerTls>,
    ) -> anyhow::Result<Self> {
        let bound = listener::bind("admin", admin.addr).await?;
        let addr = bound.addr;
        let admin_tls = tls.clone().filter(|_| admin.tls);
        let admin_tls_on = admin_tls.is_some();
        let admin_url =
            listener::public_url(admin.public_url.as_deref(), addr, admin_tls.is_some());
        let shutdown = CancellationToken::new();
        let ready = Ready::default();
        let admin_router = Arc::new(OnceLock::new());
        let admin_server = serve(
            "admin",
            bound,
            App {
                tls: admin_tls,
                ..until_served(&admin_router, ready.clone()).into()
            },
            admin.limits,
            &shutdown,
        );
        Ok(Platform {
            data_dir: data_dir.to_owned(),
            clock: Clock::system(),
            activity: Activity::new(Clock::system(), crate::service::ACTIVITY_BACKLOG),
            shutdown,
            tasks: TaskTracker::new(),
            addresses: BTreeMap::from([("admin", addr)]),
            secure: admin_tls_on.then_some("admin").into_iter().collect(),
            admin_url,
            admin_limits: admin.limits,
            tls,
            admin_server,
            admin_router,
            ready,
            admin_hosts: AllowedHosts::default(),
            operator_routes: Router::new(),
            open_routes: Router::new(),
            admin_doc: operator_doc(),
            doc_names: Vec::new(),
            database_url: None,
            cluster: None,
            seal_key_file: data_dir.join(SEAL_KEY_FILE),
            seal: None,
            listeners: Vec::new(),
            declares: Vec::new(),
            stops: Vec::new(),
        })
    }

    /// What `/readyz` waits for: each service while it starts, and what the caller adds
    /// (the init file).
    pub fn readiness(&self) -> Ready {
        self.ready.clone()
    }

    /// Starts the services that follow on `clock` instead of the system clock (tests move a
    /// [`Clock::manual`] on).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.activity = Activity::new(clock.clone(), crate::service::ACTIVITY_BACKLOG);
        self.clock = clock;
        self
    }

    /// Services that follow keep their state in the PostgreSQL database at `url` (a
    /// `postgres://` URL) instead of SQLite files under the data dir.
    pub fn with_database_url(mut self, url: Option<String>) -> Self {
        self.database_url = url;
        self
    }

    /// The admin listener answers to these host names too, beside IP addresses and
    /// `localhost`.
    pub fn with_admin_hosts(mut self, hosts: AllowedHosts) -> Self {
        self.admin_hosts = hosts;
        self
    }

    /// Services that follow seal stored values under the key in `file` (made there if
    /// missing) instead of `<data-dir>/seal.key`; unset keeps that default.
    pub fn with_seal_key_file(mut self, file: Option<PathBuf>) -> Self {
        if let Some(file) = file {
            self.seal_key_file = file;
        }
        self
    }

    /// The platform's activity, which every service records its state changes in.
    pub fn activity(&self) -> &Activity {
        &self.activity
    }

    /// Fires when the platform stops.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// This node's part in the cluster of its database: joined once, for every service.
    async fn cluster(&mut self) -> anyhow::Result<Cluster> {
        if let Some(c) = &self.cluster {
            return Ok(c.clone());
        }
        let cluster = match &self.database_url {
            Some(url) => Cluster::join(url, self.shutdown.clone(), &self.tasks).await?,
            None => Cluster::single(),
        };
        self.cluster = Some(cluster.clone());
        Ok(cluster)
    }

    /// The seal key: read once, for every service.
    fn seal(&mut self) -> anyhow::Result<Sealer> {
        if let Some(s) = &self.seal {
            return Ok(s.clone());
        }
        let seal = Sealer::load_or_create(&self.seal_key_file)?;
        self.seal = Some(seal.clone());
        Ok(seal)
    }

    /// Binds the service's listener, starts it and takes its routes and documents.
    pub async fn start<S: Service>(&mut self, settings: S::Settings) -> anyhow::Result<S> {
        self.ready.wait_for(S::NAME);
        let listener_settings = S::listener(&settings);
        let bound = listener::bind(S::LISTENER, listener_settings.addr).await?;
        let tls = self.tls.clone().filter(|_| listener_settings.tls);
        let cluster = self.cluster().await?;
        let seal = self.seal()?;
        let ctx = Context {
            data_dir: self.data_dir.clone(),
            shutdown: self.shutdown.clone(),
            tasks: self.tasks.clone(),
            public_url: listener::public_url(
                listener_settings.public_url.as_deref(),
                bound.addr,
                tls.is_some(),
            ),
            clock: self.clock.clone(),
            activity: self.activity.clone(),
            database_url: self.database_url.clone(),
            cluster,
            seal,
        };
        let service = S::start(settings, &ctx).await?;
        self.declares.extend(service.declares());
        self.operator_routes =
            std::mem::take(&mut self.operator_routes).merge(service.admin_router());
        self.admin_doc.merge(S::admin_doc());
        if let Some(mut doc) = S::api_doc() {
            crate::http::declare_path_parameters(&mut doc);
            crate::http::tag_operations(&mut doc, |_| S::NAME.to_owned());
            doc.servers = Some(vec![Server::new(ctx.public_url.clone())]);
            self.doc_names.push(S::NAME);
            let doc = Arc::new(doc);
            self.open_routes = std::mem::take(&mut self.open_routes).route(
                &format!("/openapi/{}.json", S::NAME),
                get(move || async move { axum::Json(doc.as_ref().clone()) }),
            );
        }
        self.addresses.insert(S::LISTENER, bound.addr);
        if tls.is_some() {
            self.secure.insert(S::LISTENER);
        }
        let app = App {
            tls,
            ..service.app()
        };
        self.listeners
            .push((S::LISTENER, bound, app, listener_settings.limits));
        let stopping = service.clone();
        self.stops.push(Box::new(move || {
            Box::pin(async move { stopping.stop().await })
        }));
        self.ready.done(S::NAME);
        Ok(service)
    }

    /// A route of the admin listener that needs no operator token (`/metrics`).
    pub fn open_route(mut self, path: &str, route: MethodRouter) -> Self {
        self.open_routes = self.open_routes.route(path, route);
        self
    }

    /// Routes of the admin listener that need no operator token of their own (the
    /// console's page and assets: what it shows, it asks the operator routes for).
    pub fn open_router(mut self, router: Router) -> Self {
        self.open_routes = std::mem::take(&mut self.open_routes).merge(router);
        self
    }

    /// Serves every listener: the operator routes take `token`, and its holder counts as
    /// one client of the admin listener's limits.
    pub fn serve(self, token: &str) -> Running {
        let Platform {
            shutdown,
            tasks,
            admin_url,
            admin_limits,
            admin_server,
            admin_router: served,
            ready,
            admin_hosts,
            operator_routes,
            open_routes,
            mut admin_doc,
            listeners,
            declares,
            stops,
            addresses,
            secure,
            activity,
            doc_names,
            ..
        } = self;
        let declarations = Declarations::new(declares);
        let operator_routes = operator_routes
            .route(
                kep_api::activity::EVENTS,
                get(activity::events).with_state(activity),
            )
            .route(
                kep_api::declared::APPLY,
                axum::routing::post(declared::apply).with_state(declarations.clone()),
            );
        admin_doc.merge(<activity::ActivityDoc as utoipa::OpenApi>::openapi());
        admin_doc.merge(<declared::DeclaredDoc as utoipa::OpenApi>::openapi());
        crate::http::declare_path_parameters(&mut admin_doc);
        crate::http::tag_operations(&mut admin_doc, crate::http::operator_service);
        crate::http::document_operator_answers(&mut admin_doc);
        // After the operator answers: these need no token, and no limit holds them back.
        admin_doc.merge(readiness::doc());
        admin_doc.servers = Some(vec![Server::new(admin_url)]);
        let docs = crate::docs::routes([&["admin"], doc_names.as_slice()].concat());
        let admin_doc = Arc::new(admin_doc);
        let admin_router = Router::new()
            // The operator routes' 405 first, so that the token guard covers it too: a
            // caller without the token learns nothing of a path's methods.
            .merge(crate::http::operator_only(
                operator_routes.method_not_allowed_fallback(crate::http::wrong_method),
                token,
                Limiter::new(&admin_limits),
            ))
            .merge(open_routes)
            .merge(docs)
            .merge(health_routes(ready))
            .route(
                "/openapi/admin.json",
                get(move || async move { axum::Json(admin_doc.as_ref().clone()) }),
            )
            .method_not_allowed_fallback(crate::http::wrong_method);
        let admin_router = admin_hosts.guard(admin_router, listener::operator_shape);
        let _ = served.set(admin_router);
        let mut servers = vec![admin_server];
        for (name, bound, app, limits) in listeners {
            servers.push(serve(name, bound, app, limits, &shutdown));
        }
        for (name, addr) in &addresses {
            tracing::info!(listener = name, %addr, "listening");
        }
        Running {
            addresses,
            secure,
            declarations,
            shutdown,
            tasks,
            servers,
            stops,
        }
    }
}

/// A served platform.
pub struct Running {
    addresses: BTreeMap<&'static str, SocketAddr>,
    secure: BTreeSet<&'static str>,
    declarations: Declarations,
    shutdown: CancellationToken,
    tasks: TaskTracker,
    servers: Vec<tokio::task::JoinHandle<()>>,
    stops: Vec<Stop>,
}

impl Running {
    /// Every listener's bound address, by listener name.
    pub fn addresses(&self) -> &BTreeMap<&'static str, SocketAddr> {
        &self.addresses
    }

    /// A listener's URL as a client on this host reaches it (see [`Running::local_urls`]).
    pub fn url(&self, listener: &str) -> String {
        self.local_urls()[listener].clone()
    }

    /// What applies a declaration (`kep serve --init`), as `POST /admin/v1/apply` does.
    pub fn declarations(&self) -> &Declarations {
        &self.declarations
    }

    /// Every listener's URL as a client on this host reaches it (`urls.json`, which the CLI
    /// reads): `https` where it speaks TLS, and a loopback address for one bound to all.
    pub fn local_urls(&self) -> BTreeMap<&'static str, String> {
        self.addresses
            .iter()
            .map(|(name, addr)| {
                let mut addr = *addr;
                if addr.ip().is_unspecified() {
                    addr.set_ip(match addr {
                        SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                        SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
                    });
                }
                let scheme = if self.secure.contains(name) {
                    "https"
                } else {
                    "http"
                };
                (*name, format!("{scheme}://{addr}"))
            })
            .collect()
    }

    /// Stops: listeners take no new connections and finish their requests, services finish
    /// what must not be cut off, background tasks end. False when that took longer than
    /// `grace` (what was still running is then left to the process's end).
    pub async fn stop(self, grace: Duration) -> bool {
        self.shutdown.cancel();
        let Running {
            tasks,
            servers,
            stops,
            ..
        } = self;
        tokio::time::timeout(grace, async move {
            for stop in stops {
                stop().await;
            }
            for server in servers {
                let _ = server.await;
            }
            tasks.close();
            tasks.wait().await;
        })
        .await
        .is_ok()
    }
}

fn serve(
    name: &'static str,
    bound: Bound,
    mut app: App,
    limits: Limits,
    shutdown: &CancellationToken,
) -> tokio::task::JoinHandle<()> {
    // TraceLayer logs requests at DEBUG: wrap only when that is enabled (KEP_LOG=debug or
    // tower_http=debug), since the layer costs about a tenth of a small request otherwise.
    // A front answers past the router, so it is left out: every request is then logged.
    if tracing::enabled!(target: "tower_http::trace", tracing::Level::DEBUG) {
        // By method and path: a query may carry a credential (an HTTP carrier's dlr token).
        let trace = TraceLayer::new_for_http().make_span_with(|req: &axum::extract::Request| {
            tracing::debug_span!("request", method = %req.method(), path = req.uri().path())
        });
        app = App {
            router: app.router.layer(trace),
            front: None,
            ..app
        };
    }
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        if let Err(e) = listener::serve(bound, app, limits, shutdown).await {
            tracing::error!(listener = name, error = %e, "listener failed");
        }
    })
}

/// `/healthz` and `/readyz`.
fn health_routes(ready: Ready) -> Router {
    Router::new()
        .route(kep_api::readiness::HEALTHZ, get(readiness::healthz))
        .route(kep_api::readiness::READYZ, get(readiness::readyz))
        .with_state(ready)
}

/// The admin listener's router: `served` once the platform serves, and until then
/// `/healthz`, `/readyz` and a 503 to anything else.
fn until_served(served: &Arc<OnceLock<Router>>, ready: Ready) -> Router {
    let starting = health_routes(ready).fallback(|| async {
        crate::http::ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "starting",
            "kep is starting: GET /readyz says what it waits for",
        )
    });
    let served = Arc::clone(served);
    Router::new().fallback_service(tower::service_fn(move |req: axum::extract::Request| {
        let router = served.get().unwrap_or(&starting).clone();
        async move { tower::ServiceExt::oneshot(router, req).await }
    }))
}

/// The operator API's document, before the services add their paths.
fn operator_doc() -> OpenApi {
    use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
    let mut doc = utoipa::openapi::OpenApiBuilder::new()
        .info(
            utoipa::openapi::InfoBuilder::new()
                .title("kep operator API")
                .version(env!("CARGO_PKG_VERSION"))
                .build(),
        )
        .build();
    let components = doc.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        "operator",
        SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
    );
    doc
}

/// A service document whose calls take `Authorization: Bearer …`, with that scheme named.
pub fn with_bearer(mut doc: OpenApi) -> OpenApi {
    use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
    let components = doc.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        "bearer",
        SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
    );
    doc
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;

    use super::*;

    async fn call(router: &Router, path: &str) -> (StatusCode, serde_json::Value) {
        let req = Request::get(path).body(Body::empty()).unwrap();
        let res = router.clone().oneshot(req).await.unwrap();
        let status = res.status();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&body).unwrap())
    }

    /// While the services start, the admin listener says so at `/readyz` and answers a 503
    /// to anything else; once the platform serves, its whole router answers.
    #[tokio::test]
    async fn the_admin_listener_answers_starting_until_the_platform_serves() {
        let served = Arc::new(OnceLock::new());
        let ready = Ready::default();
        ready.wait_for("messaging");
        let router = until_served(&served, ready.clone());
        let (status, body) = call(&router, "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            body,
            serde_json::json!({"status": "starting", "waiting": ["messaging"]})
        );
        assert_eq!(call(&router, "/healthz").await.0, StatusCode::OK);
        let (status, body) = call(&router, "/admin/v1/live/services").await;
        assert_eq!(
            (status, &body["error"]["code"]),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                &serde_json::json!("starting")
            )
        );

        ready.done("messaging");
        let whole = health_routes(ready).route(
            "/admin/v1/live/services",
            get(|| async { axum::Json(serde_json::json!([])) }),
        );
        served.set(whole).unwrap();
        assert_eq!(
            call(&router, "/readyz").await,
            (StatusCode::OK, serde_json::json!({"status": "ready"}))
        );
        assert_eq!(
            call(&router, "/admin/v1/live/services").await,
            (StatusCode::OK, serde_json::json!([]))
        );
    }
}
