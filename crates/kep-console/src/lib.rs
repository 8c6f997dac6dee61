//! `/console` on the admin listener: the operator's web console. It is a client of the
//! operator API like any other (everything it shows or does is a documented route of
//! `/openapi/admin.json`), so it keeps no state on the server. The operator token stays
//! in the tab's session storage and travels as a Bearer header: never in a URL, never in a
//! cookie another site could make the browser send. Its assets, uPlot for the charts
//! included, are compiled in: no network at build or run time.

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use kep_core::docs::asset;

const SCRIPT: &[u8] = include_bytes!("../web/console.js");
const STYLE: &[u8] = include_bytes!("../web/console.css");
const UPLOT: &[u8] = include_bytes!("../web/uplot/uPlot.iife.min.js");
const UPLOT_STYLE: &[u8] = include_bytes!("../web/uplot/uPlot.min.css");
const PAGE: &str = include_str!("../web/index.html");

/// What the page may load and who may frame it: only its own assets and the operator API,
/// and nobody (a framed console could be clicked into kicking someone).
const POLICY: &str = "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// The console's routes, for a platform running `services` (their pages are shown, the
/// others' left out). `messaging_zone` is the messaging service's time zone (IANA name),
/// in which its operator answers give times without an offset: the console reads them in
/// it and shows them, like every time, in the browser's zone with the zone's name.
pub fn routes(services: &[&str], messaging_zone: &str) -> Router {
    // An IANA name, checked by the service's start; anything else is no zone to quote.
    let zone: String = messaging_zone
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "/_+-".contains(*c))
        .collect();
    let page = PAGE
        .replace("{services}", &services.join(","))
        .replace("{messaging_zone}", &zone)
        .replace("{build}", &build());
    Router::new()
        .route(
            "/console",
            get(move || {
                let page = page.clone();
                async move {
                    (
                        [
                            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                            (header::CONTENT_SECURITY_POLICY, POLICY),
                            (header::X_FRAME_OPTIONS, "DENY"),
                            (header::REFERRER_POLICY, "no-referrer"),
                            (header::CACHE_CONTROL, "no-cache"),
                        ],
                        page,
                    )
                        .into_response()
                }
            }),
        )
        .route(
            "/console/console.js",
            asset(SCRIPT, "text/javascript; charset=utf-8"),
        )
        .route(
            "/console/console.css",
            asset(STYLE, "text/css; charset=utf-8"),
        )
        .route(
            "/console/uPlot.iife.min.js",
            asset(UPLOT, "text/javascript; charset=utf-8"),
        )
        .route(
            "/console/uPlot.min.css",
            asset(UPLOT_STYLE, "text/css; charset=utf-8"),
        )
}

/// Names this build's script and style in their URLs, so that a day's caching never serves
/// an older console to a newer server.
fn build() -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (SCRIPT, STYLE).hash(&mut h);
    format!("{:x}", h.finish())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_page_names_the_running_services_and_loads_only_its_own_assets() {
        let page = super::PAGE.replace("{services}", "live,serving");
        assert!(page.contains(r#"data-services="live,serving""#));
        for src in page.split("src=\"").skip(1) {
            assert!(src.starts_with("/console/"), "{src}");
        }
    }
}
