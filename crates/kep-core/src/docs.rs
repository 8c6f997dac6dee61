//! `/docs` on the admin listener: every OpenAPI document the platform serves, read and
//! tried out in Swagger UI. Its assets are vendored (`web/swagger-ui/`) and compiled in, so
//! the page needs no network at build or run time.

use axum::Router;
use axum::extract::Query;
use axum::http::header;
use axum::response::{Html, IntoResponse};
use axum::routing::get;

const BUNDLE: &[u8] = include_bytes!("../web/swagger-ui/swagger-ui-bundle.js");
const CSS: &[u8] = include_bytes!("../web/swagger-ui/swagger-ui.css");

#[derive(serde::Deserialize)]
struct Pick {
    doc: Option<String>,
}

/// The routes of `/docs` for the documents named `names` (each `/openapi/<name>.json`;
/// `admin` first).
pub fn routes(names: Vec<&'static str>) -> Router {
    let page = move |Query(pick): Query<Pick>| {
        let names = names.clone();
        async move { Html(page(&names, pick.doc.as_deref())) }
    };
    Router::new()
        .route("/docs", get(page))
        .route(
            "/docs/swagger-ui-bundle.js",
            asset(BUNDLE, "text/javascript; charset=utf-8"),
        )
        .route(
            "/docs/swagger-ui.css",
            asset(CSS, "text/css; charset=utf-8"),
        )
}

/// A vendored file, compiled in: served as `kind`, cached for a day.
pub fn asset(bytes: &'static [u8], kind: &'static str) -> axum::routing::MethodRouter {
    get(move || async move {
        (
            [
                (header::CONTENT_TYPE, kind),
                (header::CACHE_CONTROL, "public, max-age=86400"),
            ],
            bytes,
        )
            .into_response()
    })
}

/// The page: a choice of document, and Swagger UI on the chosen one (an unknown name
/// shows the first).
fn page(names: &[&str], chosen: Option<&str>) -> String {
    let chosen = names
        .iter()
        .find(|n| Some(**n) == chosen)
        .or(names.first())
        .copied()
        .unwrap_or("admin");
    let options: String = names
        .iter()
        .map(|n| {
            let selected = if *n == chosen { " selected" } else { "" };
            format!(r#"<option value="{n}"{selected}>{n}</option>"#)
        })
        .collect();
    format!(
        r##"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>kep API: {chosen}</title>
<link rel="stylesheet" href="/docs/swagger-ui.css">
<style>body {{ margin: 0; font-family: sans-serif }} header {{ padding: 12px 20px; background: #1b1b1b; color: #fff }} select {{ font-size: 15px; margin-left: 8px }}</style>
</head>
<body>
<header><label>kep API document<select id="doc" onchange="location.search = '?doc=' + this.value">{options}</select></label></header>
<div id="ui"></div>
<script src="/docs/swagger-ui-bundle.js"></script>
<script>
  window.ui = SwaggerUIBundle({{ url: "/openapi/{chosen}.json", dom_id: "#ui", deepLinking: true, persistAuthorization: false }});
</script>
</body>
</html>
"##
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_page_offers_every_document_and_shows_the_chosen_one() {
        let names = ["admin", "live", "messaging"];
        let page = super::page(&names, Some("live"));
        assert!(page.contains(r#"url: "/openapi/live.json""#));
        assert!(page.contains(r#"<option value="live" selected>"#));
        assert!(page.contains(r#"<option value="messaging">"#));
        // A name that is no document's shows the first: nothing of the query reaches the page.
        let page = super::page(&names, Some("x\"</script>"));
        assert!(page.contains(r#"url: "/openapi/admin.json""#) && !page.contains("x\""));
    }
}
